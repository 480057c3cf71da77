#!/usr/bin/env bash
# One call on a lent GPU (docs/gpu.md): a mini-t5 retrieval study on the snapshots carried in .device-carry/study/,
# side by side, each process the study's own script, measuring with the harness (device=auto, here CUDA):
#   STUDY=study_mini_t5.py         the first study (docs/mini-t5-study.md), the default;
#   STUDY=study_mini_t5_counts.py  the first-of-K study (docs/mini-t5-study.md, "The first-of-K stand-in").
#
#   .device-carry/study/snapshots/seed<S>/step-<N>/   a snapshot's files; tokenizer.json left out where it is the
#   .device-carry/study/tokenizer.json                 shared one, put back into each snapshot before it is read
#   .device-carry/study/stores.tar.gz                  (optional) results stores to resume: the stores here
#                                                      (make gpu-study-carry STORES=1), or a call's $OUT/study.tar.gz
#   .device-carry/study/workers.txt                    (optional) "seed<S>/step-<N> K" lines: K processes on that
#                                                      snapshot, each starting at another cell (--worker I/K)
#
# Each process stops at STUDY_SECONDS (default 420); the results stores are resumable, so what a process did not
# finish is measured by the next run, on any device. Every PACK_SECONDS (60), and at the end, the stores and logs
# are packed into $OUT/study.tar.gz (merged back here with scripts/maintenance/merge_stores.py). Where CUDA does not answer a
# first tensor, every process runs with --device cpu; one that fails within its first two minutes is run again so.
# REPLICATE="SNAP:VARIANT:LENGTH:METHOD ..." (the counts study) adds one process per cell measured again at its
# replication seed.
# Run from the repository root with the wheels of `make gpu-wheels` in .whl/ (carried along); PYTHON and
# STUDY_DEVICE (default auto) are for a run elsewhere (a CPU rehearsal).
set -u
OUT=${OUT:-out}
S=${STUDY_TMP:-/tmp/study}
C=.device-carry/study
SECONDS_EACH=${STUDY_SECONDS:-420}
STUDY=${STUDY:-study_mini_t5.py}
PY=${PYTHON:-python3}
DEV=${STUDY_DEVICE:-auto}
case $STUDY in
  study_mini_t5.py) EXTRA=();;
  study_mini_t5_counts.py) EXTRA=(--no-render);;  # seven processes would render one study.md; here, after merging
  *) echo "STUDY=$STUDY: not a study. Fix: STUDY=study_mini_t5.py or STUDY=study_mini_t5_counts.py"; exit 2;;
esac
rm -rf $S && mkdir -p "$OUT" $S/logs
if ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=1
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
torch.cuda.get_device_name() if torch.cuda.is_available() else 'no CUDA')" 2>&1 | tee $S/logs/versions.txt
nproc >>$S/logs/versions.txt
if [ "$DEV" != cpu ] && ! $PY -c "import torch; torch.ones(1, device='cuda').sum().item()" >>$S/logs/versions.txt 2>&1; then
  echo "CUDA does not answer (logs/versions.txt): every process runs with --device cpu"; DEV=cpu
fi

cp -r $C/snapshots $S/
for d in $S/snapshots/seed*/step-*/; do [ -f "$d/tokenizer.json" ] || cp $C/tokenizer.json "$d"; done
if [ -f $C/stores.tar.gz ]; then tar xzf $C/stores.tar.gz -C $S; fi  # resume

pack() {
  tar czf "$OUT/study.tar.gz.part" -C $S --exclude=snapshots --exclude=.locks --exclude=.cache --exclude=.results.lock . && \
    mv "$OUT/study.tar.gz.part" "$OUT/study.tar.gz"
}

one() {  # one process ("$@": what it measures, --only or --replicate): on the GPU; on the CPU if that fails early
  local log=$S/logs/$1.log t0=$(date +%s) rc
  shift
  timeout "$SECONDS_EACH" $PY scripts/$STUDY --results $S --threads 1 --device "$DEV" ${EXTRA[@]+"${EXTRA[@]}"} "$@" >"$log" 2>&1
  rc=$?
  echo "$*: exit $rc after $(( $(date +%s) - t0 )) s" >>"$log"
  if [ $rc -ne 0 ] && [ $rc -ne 124 ] && [ $(( $(date +%s) - t0 )) -lt 120 ]; then
    timeout $(( SECONDS_EACH - $(date +%s) + t0 )) $PY scripts/$STUDY --results $S --threads 1 --device cpu \
      ${EXTRA[@]+"${EXTRA[@]}"} "$@" >>"$log" 2>&1
    echo "$*: cpu rerun exit $? after $(( $(date +%s) - t0 )) s" >>"$log"
  fi
}

T0=$(date +%s)
PIDS=()
for d in $S/snapshots/seed*/step-*/; do
  snap=$(basename "$(dirname "$d")")/$(basename "$d")
  k=$(awk -v s="$snap" '$1 == s {print $2}' $C/workers.txt 2>/dev/null)
  k=${k:-1}
  for ((i = 0; i < k; i++)); do
    if [ "$k" -gt 1 ]; then one "${snap//\//-}-w$i" --only "$snap" --worker "$i/$k" & else one "${snap//\//-}" --only "$snap" & fi
    PIDS+=($!)
  done
done
for spec in ${REPLICATE:-}; do
  one "replicate-${spec//[^A-Za-z0-9._=-]/_}" --only --replicate "$spec" &
  PIDS+=($!)
done
( while sleep "${PACK_SECONDS:-60}"; do pack; done ) &
PACKER=$!
wait "${PIDS[@]}"
kill $PACKER 2>/dev/null
echo "study phase: $(( $(date +%s) - T0 )) s"
grep -h "exit" $S/logs/*.log
command -v nvidia-smi >/dev/null && nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv >>$S/logs/versions.txt 2>&1
pack
ls -la "$OUT"
