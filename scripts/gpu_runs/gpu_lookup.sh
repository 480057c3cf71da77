#!/usr/bin/env bash
# One call on a lent GPU (docs/gpu.md, "The lookup study on a GPU"): the lookup stand-in's variants
# (docs/mini-t5-lookup.md) trained on, side by side, each through its own recipe
# (lengthx train-mini recipe=lookup_<variant>, device=cuda, as the Makefile's mini-t5-lookup-study), from the resume
# points carried in .device-carry/lookup/<variant>/ (resume.pt and curve.json: make gpu-lookup-carry).
#
# Each run saves its resume point every minute and stops at LOOKUP_SECONDS (default 520); every PACK_SECONDS (60)
# and at the end, $OUT/lookup.tar.gz.part-* (join them: cat part-* > lookup.tar.gz) hold each variant's resume.pt,
# curve.json, log and new snapshots, merged back here with scripts/maintenance/merge_lookup.py. LOOKUP_VARIANTS (default "warm pieces scratch") picks the
# variants; PYTHON and LOOKUP_DEVICE (default cuda) are for a rehearsal elsewhere (LOOKUP_DEVICE=cpu);
# LOOKUP_NO_INSTALL=1 when the caller installed the wheels. A second call on a warm machine goes on from the first's
# state (LOOKUP_TMP is kept); a run stopped at its time saves at a step boundary first.
# Run from the repository root with the wheels of `make gpu-wheels` in .whl/ (carried along).
set -u
OUT=${OUT:-out}
C=.device-carry/lookup
W=${LOOKUP_TMP:-/tmp/lookup}
PY=${PYTHON:-python3}
DEV=${LOOKUP_DEVICE:-cuda}
SECS=${LOOKUP_SECONDS:-520}
PACK=${PACK_SECONDS:-60}
VARIANTS=${LOOKUP_VARIANTS:-warm pieces scratch}
mkdir -p "$OUT" "$W/logs"  # kept on a warm machine: a second call goes on from the first's state.pt
if [ -z "${LOOKUP_NO_INSTALL:-}" ] && ls .whl/*.whl >/dev/null 2>&1; then
  $PY -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
fi
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 TQDM_DISABLE=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
$PY -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
'cuda', torch.cuda.is_available() and torch.cuda.get_device_name())" 2>&1 | tee "$W/logs/versions.txt"

pack() {  # resume points, curves, logs and snapshots (tokenizers left out: the shipped mini-t5's), in parts of
  # at most 15 MB ($OUT/lookup.tar.gz.part-00, -01, ...: a file coming back is at most 16 MiB); join with cat
  tar czf "$W.tar.new" -C "$W" --exclude=state.pt --exclude='tokenizer*' . 2>/dev/null || return
  rm -rf "$W.parts" && mkdir -p "$W.parts" && split -b 15M -d "$W.tar.new" "$W.parts/lookup.tar.gz.part-" \
    && rm -f "$OUT"/lookup.tar.gz.part-* && mv "$W.parts"/* "$OUT"/
}

T0=$(date +%s)
for v in $VARIANTS; do
  mkdir -p "$W/train/$v"
  if [ -f "$C/$v/resume.pt" ] && [ ! -f "$W/train/$v/resume.pt" ]; then
    cp "$C/$v/resume.pt" "$C/$v/curve.json" "$W/train/$v/"
  fi
  timeout "$SECS" $PY -m lengthx.cli train-mini recipe="lookup_$v" device="$DEV" \
    save_every_minutes=1 out="$W/train/$v" snapshots_to="$W/snapshots/$v" >>"$W/logs/$v.log" 2>&1 &
done
while [ -n "$(jobs -r)" ]; do
  for _ in $(seq "$PACK"); do sleep 1; [ -z "$(jobs -r)" ] && break; done  # a stopped run ends the wait
  pack
  echo "[$(( $(date +%s) - T0 )) s] $(for v in $VARIANTS; do grep -o '^\[[0-9:]*\] step [0-9]*' "$W/logs/$v.log" | tail -n 1 | sed "s/^/$v: /"; done | tr '\n' ' ')"
done
pack
for v in $VARIANTS; do echo "== $v"; grep -E "resumed from|gate passed|exported|Error|error" "$W/logs/$v.log" | tail -n 6; done
ls -la "$OUT"
