#!/usr/bin/env bash
# One call on a lent GPU (docs/gpu.md): the mini-t5 retrieval study (scripts/study_mini_t5.py,
# docs/mini-t5-study.md) on the snapshots carried in .device-carry/study/, one process per snapshot, side by side.
#
#   .device-carry/study/snapshots/seed<S>/step-<N>/   a snapshot's files, tokenizer.json left out (identical in all)
#   .device-carry/study/tokenizer.json                 put back into each snapshot before it is read
#   .device-carry/study/stores.tar.gz                  (optional) results stores to resume: an earlier call's
#                                                      $OUT/study.tar.gz
#
# Each process stops at STUDY_SECONDS (default 420); the results stores are resumable, so what a process did not
# finish is measured by the next run, on any device. Every minute, and at the end, the stores and logs are packed
# into $OUT/study.tar.gz. A snapshot whose run fails on the GPU within its first two minutes is run again with
# --device cpu. Run from the repository root with the wheels of `make gpu-wheels` in .whl/ (carried along).
set -u
OUT=${OUT:-out}
S=/tmp/study
SECONDS_EACH=${STUDY_SECONDS:-420}
mkdir -p "$OUT" $S/logs
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
torch.cuda.get_device_name())" 2>&1 | tee $S/logs/versions.txt
nproc >>$S/logs/versions.txt

cp -r .device-carry/study/snapshots $S/
for d in $S/snapshots/seed*/step-*/; do cp .device-carry/study/tokenizer.json "$d"; done
if [ -f .device-carry/study/stores.tar.gz ]; then tar xzf .device-carry/study/stores.tar.gz -C $S; fi  # resume

pack() {
  tar czf "$OUT/study.tar.gz.part" -C $S --exclude=snapshots --exclude=.locks --exclude=.cache --exclude=.results.lock . && \
    mv "$OUT/study.tar.gz.part" "$OUT/study.tar.gz"
}

one() {  # one snapshot: on the GPU; again on the CPU if the GPU run fails early
  local snap=$1 log=$S/logs/${1//\//-}.log t0=$(date +%s) rc
  timeout "$SECONDS_EACH" python3 scripts/study_mini_t5.py --results $S --threads 1 --only "$snap" >"$log" 2>&1
  rc=$?
  echo "$snap: exit $rc after $(( $(date +%s) - t0 )) s" >>"$log"
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $(( $(date +%s) - t0 )) -lt 120 ]; then
    timeout $(( SECONDS_EACH - $(date +%s) + t0 )) python3 scripts/study_mini_t5.py --results $S --threads 1 \
      --only "$snap" --device cpu >>"$log" 2>&1
    echo "$snap: cpu rerun exit $? after $(( $(date +%s) - t0 )) s" >>"$log"
  fi
}

T0=$(date +%s)
PIDS=()
for d in $S/snapshots/seed*/step-*/; do
  snap=$(basename "$(dirname "$d")")/$(basename "$d")
  one "$snap" &
  PIDS+=($!)
done
( while sleep 60; do pack; done ) &
PACKER=$!
wait "${PIDS[@]}"
kill $PACKER 2>/dev/null
echo "study phase: $(( $(date +%s) - T0 )) s"
grep -h "exit" $S/logs/*.log
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>$S/logs/versions.txt 2>&1
pack
ls -la "$OUT"
