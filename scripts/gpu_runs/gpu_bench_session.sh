#!/usr/bin/env bash
# The benchmark calls on a lent GPU (docs/gpu.md, "The benchmark calls"): each step alone on the GPU, in order.
#   PHASE=1 (about 9.5 minutes): the Triton kernel's tests compiled on CUDA (each new shape autotunes six
#           configurations, so the file takes minutes) and the CUDA tests of the attention
#           paths; scripts/bench/gpu/bench_gpu_triton.py (the one-pass statistics against lengthx-sdpa, XXL shape);
#           scripts/bench/gpu/bench_gpu.py items 1-2 at 8k and 15k (gpu.md, now with the lengthx+triton row); then
#           scripts/bench/gpu/bench_gpu_cells.py (every paper model's largest cell, largest first) with what time is left.
#   PHASE=2 (the same warm machine, right after): the cells the first call's budget skipped (--resume from
#           .cells-work/gpu-cells.json, which a warm machine keeps), then scripts/bench/gpu/profile_gpu_flex.py.
# SECONDS_TOTAL is the call's wall time to keep to (the run's timeout_s less a margin). Everything comes back
# through $OUT: the reports (.md and .json) and logs.tar.gz. Needs the wheels of `make gpu-wheels` in .whl/.
set -u
OUT=${OUT:-out}
PHASE=${PHASE:-1}
END=${SECONDS_TOTAL:-570}
R=/tmp/gpu-bench
W=$PWD/.cells-work
mkdir -p "$OUT" $R $W
T0=$(date +%s)
left() { echo $(( END - ($(date +%s) - T0) )); }
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
finish() {
  cp $W/gpu-cells.md $W/gpu-cells.json "$OUT"/ 2>/dev/null
  tar czf "$OUT/logs-$PHASE.tar.gz" -C $R . 2>/dev/null
  ls -la "$OUT"
}
trap finish EXIT

if [ "$PHASE" = 1 ]; then
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >$R/nvidia-smi.txt 2>&1
  python3 -c "import torch, transformers, triton; print('torch', torch.__version__, 'transformers', \
transformers.__version__, 'triton', triton.__version__, torch.cuda.get_device_name())" 2>&1 | tee $R/versions.txt
  timeout 170 python3 -m pytest -q -p no:cacheprovider tests/test_triton_stats.py >$R/pytest-triton.log 2>&1
  timeout 60 python3 -m pytest -q -p no:cacheprovider tests/test_efficient_attention.py -k cuda \
    >$R/pytest-cuda.log 2>&1
  tail -n 2 $R/pytest-triton.log $R/pytest-cuda.log
  echo "[$(( $(date +%s) - T0 )) s] triton bench"
  timeout 110 python3 scripts/bench/gpu/bench_gpu_triton.py --lengths 15360 --budget-s 95 --out "$OUT/gpu-triton.md" \
    >$R/triton.log 2>&1
  grep -E "target|NOT|error" "$OUT/gpu-triton.md" | head -n 12
  echo "[$(( $(date +%s) - T0 )) s] bench_gpu items 1-2"
  timeout 170 python3 scripts/bench/gpu/bench_gpu.py --items 1 2 --lengths 8192 15360 --budget-s 155 --out "$OUT/gpu.md" \
    --variants stock-sdpa lengthx-sdpa lengthx+stats lengthx+triton >$R/bench.log 2>&1
  grep -E "PASS|FAIL" "$OUT/gpu.md" | head -n 12
  echo "[$(( $(date +%s) - T0 )) s] cells, $(left) s left"
  timeout $(( $(left) + 5 )) python3 scripts/bench/gpu/bench_gpu_cells.py --budget-s $(( $(left) - 10 )) --reserve-s 45 \
    --out $W/gpu-cells.md --work $W >$R/cells.log 2>&1
else
  echo "[$(( $(date +%s) - T0 )) s] cells (resumed), $(left) s left"
  timeout $(( $(left) - 60 )) python3 scripts/bench/gpu/bench_gpu_cells.py --resume $W/gpu-cells.json \
    --budget-s $(( $(left) - 75 )) --reserve-s 30 --out $W/gpu-cells.md --work $W >$R/cells-2.log 2>&1
  echo "[$(( $(date +%s) - T0 )) s] flex profile, $(left) s left"
  timeout $(( $(left) - 3 )) python3 scripts/bench/gpu/profile_gpu_flex.py --out "$OUT/gpu-flex.md" >$R/flex.log 2>&1
fi
grep -E "^\| " $W/gpu-cells.md 2>/dev/null | cut -c1-160
echo "[$(( $(date +%s) - T0 )) s] done"
