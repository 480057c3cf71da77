#!/usr/bin/env bash
# The benchmark calls on a lent GPU (docs/gpu.md, "The benchmark calls"): each timed step alone on the GPU, in order.
#   PHASE=1 (about 9.5 minutes): the Triton kernel's tests compiled on CUDA (each new shape autotunes six
#           configurations, so the file takes minutes) and the CUDA tests of the attention paths;
#           scripts/bench/gpu/bench_gpu.py items 1-2 at 8k and 15k (gpu.md: the default statistics path, the
#           Triton pass and the explicit blocks by name, against lengthx-sdpa and stock); then
#           scripts/bench/gpu/bench_gpu_cells.py (every paper model's largest cell, largest first; CELLS_ONLY names
#           models) with what time is left.
#   PHASE=2 (the same warm machine, right after): the cells the first call's budget skipped (--resume from
#           .cells-work/gpu-cells.json, which a warm machine keeps), then, with LOOKUP_SECONDS, the lookup study.
# LOOKUP_SECONDS (default 0): in PHASE 1 the lookup study's variants train (scripts/gpu_runs/gpu_lookup.sh, from
# .device-carry/lookup/) at most that long while the tests compile, and stop when they end; in PHASE 2
# they go on (a warm machine keeps their state) with the time the cells leave.
# BENCH=0 leaves bench_gpu.py out of PHASE 1 (its report already committed). TRITON_TEST_SECONDS (default 200) bounds
# the compiled Triton tests (each new shape autotunes: the whole file needs more than 200 s on an H200).
# SECONDS_TOTAL is the call's wall time to keep to (the run's timeout_s less a margin). Everything comes back
# through $OUT: the reports (.md and .json), logs.tar.gz and lookup.tar.gz.part-*. Needs the wheels of `make gpu-wheels`
# in .whl/.
set -u
OUT=${OUT:-out}
PHASE=${PHASE:-1}
END=${SECONDS_TOTAL:-570}
LOOKUP=${LOOKUP_SECONDS:-0}
ONLY=${CELLS_ONLY:-}
R=/tmp/gpu-bench
W=$PWD/.cells-work
mkdir -p "$OUT" $R $W
T0=$(date +%s)
left() { echo $(( END - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --upgrade --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
finish() {
  cp $W/gpu-cells.md $W/gpu-cells.json "$OUT"/ 2>/dev/null
  tar czf "$OUT/logs-$PHASE.tar.gz" -C $R . 2>/dev/null
  ls -la "$OUT"
}
trap finish EXIT

lookup() {  # the lookup study for $1 seconds, in the background (its own log; packs $OUT/lookup.tar.gz.part-*)
  if [ "$1" -gt 30 ] && [ -d .device-carry/lookup ]; then
    LOOKUP_SECONDS=$1 LOOKUP_VARIANTS="$(ls .device-carry/lookup | tr '\n' ' ')" OUT="$OUT" PACK_SECONDS=15 \
      LOOKUP_NO_INSTALL=1 \
      bash scripts/gpu_runs/gpu_lookup.sh >>$R/lookup-call.log 2>&1 &
    LOOKUP_PID=$!
  fi
}
if [ "$PHASE" = 1 ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >$R/nvidia-smi.txt 2>&1
  python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" 2>&1 | tee $R/versions.txt
  lookup "$LOOKUP"
  # -o addopts= : the project's -q would hide the per-test lines that name a failure when the file is cut short
  timeout ${TRITON_TEST_SECONDS:-200} python3 -m pytest -o addopts= -v -rf --tb=short -p no:cacheprovider -n 12 tests/test_triton_stats.py \
    >$R/pytest-triton.log 2>&1
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_efficient_attention.py -k "cuda or blocks" \
    >$R/pytest-cuda.log 2>&1
  grep -E "PASSED|FAILED|ERROR" $R/pytest-triton.log | sed 's/.*\] //' | cut -c1-160; tail -n 2 $R/pytest-cuda.log
  if [ -n "${LOOKUP_PID:-}" ]; then  # stopped now (each run saves at its step boundary), before anything is timed
    echo "[$(( $(date +%s) - T0 )) s] stopping the lookup study"
    pkill -TERM -f "^python3 -m lengthx.cli train-mini"; wait $LOOKUP_PID  # the trainers, not their timeout: one signal
  fi
  tail -n 4 $R/lookup-call.log 2>/dev/null
  if [ "${BENCH:-1}" = 1 ]; then
    echo "[$(( $(date +%s) - T0 )) s] bench_gpu items 1-2"
    timeout 200 python3 scripts/bench/gpu/bench_gpu.py --items 1 2 --lengths 8192 15360 --budget-s 185 \
      --out "$OUT/gpu.md" --variants stock-sdpa lengthx-sdpa lengthx+stats lengthx+triton "lengthx+stats[blocks]" \
      >$R/bench.log 2>&1
    grep -E "PASS|FAIL|stats_backend=auto" "$OUT/gpu.md" | cut -c1-300 | head -n 12
  fi
  echo "[$(( $(date +%s) - T0 )) s] cells, $(left) s left"
  timeout $(( $(left) + 5 )) python3 scripts/bench/gpu/bench_gpu_cells.py --budget-s $(( $(left) - 10 )) --reserve-s 30 \
    --out $W/gpu-cells.md --work $W ${ONLY:+--only $ONLY} >$R/cells.log 2>&1
else
  echo "[$(( $(date +%s) - T0 )) s] cells (resumed), $(left) s left"
  timeout $(( $(left) - 20 )) python3 scripts/bench/gpu/bench_gpu_cells.py --resume $W/gpu-cells.json \
    --budget-s $(( $(left) - 35 )) --reserve-s 30 --out $W/gpu-cells.md --work $W ${ONLY:+--only $ONLY} \
    >$R/cells-2.log 2>&1
  if [ "$LOOKUP" -gt 0 ] && [ "$(left)" -gt 60 ]; then
    echo "[$(( $(date +%s) - T0 )) s] lookup study, $(left) s left"
    lookup $(( $(left) - 25 ))
    wait ${LOOKUP_PID:-}
  fi
fi
grep -E "^\| " $W/gpu-cells.md 2>/dev/null | cut -c1-160
echo "[$(( $(date +%s) - T0 )) s] done"
