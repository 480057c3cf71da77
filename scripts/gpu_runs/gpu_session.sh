#!/usr/bin/env bash
# One call on a lent GPU (docs/gpu.md), about 9.5 minutes of wall time, in this order:
#   1. side by side: two variants of the lines recipe (the default, and a smaller batch with 4x the updates),
#      two runs of the CPU stand-in's passkey + topics recipe (docs/mini-t5-study.md) on the GPU to see how
#      many steps topics needs, and the CUDA tests;
#   2. alone on the GPU: the paper-shape benchmark (scripts/bench/gpu/bench_gpu.py).
# Everything comes back through $OUT: gpu.md and gpu.json, logs.tar.gz (logs, curves, cards), and the
# weights of each lines variant that passed the 2-line gate (lines-<variant>.tar).
# Run from the repository root with the wheels of `make gpu-wheels` in .whl/ (carried along).
set -u
OUT=${OUT:-out}
R=/tmp/gpu
mkdir -p "$OUT" $R
python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false OMP_NUM_THREADS=2
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.sm --format=csv >$R/nvidia-smi.txt 2>&1
python3 -c "import torch, transformers; print('torch', torch.__version__, 'transformers', transformers.__version__, \
torch.cuda.get_device_name())" 2>&1 | tee $R/versions.txt

T0=$(date +%s)
TRAIN="python3 scripts/train_mini_t5.py --device cuda --save-every-minutes 1 --final-lengths 256,512,1024"
LINES="--max-minutes 3.8 --gate-minutes 3.0 --eval-every 1000"
timeout 345 $TRAIN $LINES --out $R/lines-A >$R/lines-A.log 2>&1 &
timeout 345 $TRAIN $LINES --batch-size 128 --warmup 1000 --out $R/lines-C >$R/lines-C.log 2>&1 &
STAND_IN="--d-model 128 --d-kv 32 --heads 4 --d-ff 512 --enc-layers 3 --dec-layers 2 --batch-size 32 --w-lines 0 \
 --gate-minutes 0 --warmup 100 --max-minutes 0 --max-steps 12000 --final-lengths 256 \
 --export-steps 1000,2000,3000,4000,5000,6000,7000,8000,9000,10000,11000"
timeout 300 $TRAIN $STAND_IN --w-passkey 0.5 --w-topics 0.5 --out $R/topics-50 >$R/topics-50.log 2>&1 &
timeout 300 $TRAIN $STAND_IN --w-passkey 0.25 --w-topics 0.75 --out $R/topics-75 >$R/topics-75.log 2>&1 &
timeout 240 python3 -m pytest -q -p no:cacheprovider tests/test_efficient_attention.py tests/test_models.py \
  -k cuda >$R/pytest-cuda.log 2>&1 &
wait
echo "training phase: $(( $(date +%s) - T0 )) s"
tail -n 3 $R/pytest-cuda.log
for v in lines-A lines-C topics-50 topics-75; do echo "== $v"; grep -E "gate passed|NO-GO|final @|stopped at" $R/$v.log | tail -n 8; done

python3 scripts/bench/gpu/bench_gpu.py --out "$OUT/gpu.md" --budget-s 190 >$R/bench.log 2>&1
tail -n 40 $R/bench.log

for v in lines-A lines-C; do
  if [ -f $R/$v/export/README.md ] && python3 -c "import json,sys; s=json.load(open('$R/$v/export/curve.json')); \
sys.exit(0 if '2' in map(str, s['gates']) else 1)"; then
    tar cf - -C $R/$v export | split -b 15m - "$OUT/$v.tar."
  fi
done
find $R -name '*.safetensors' -o -name 'state.pt' -o -name 'tokenizer*' | xargs rm -f
tar czf "$OUT/logs.tar.gz" -C $R .
ls -la "$OUT"
