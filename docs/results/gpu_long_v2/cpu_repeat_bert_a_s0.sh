#!/bin/bash
# BERT-A seed 0 of long_v2_jax again on this CPU (JAX, no TensorFlow), stopped after step 200:
# its step-0 checkpoint (the random-initialization control) and a check of step 200 against
# the GPU run's record.
cd /work/main
export PATH=/tmp/gpusim/bin:$PATH PYTHONPATH=/tmp/site:$PWD KERAS_BACKEND=jax PYTHONUNBUFFERED=1
python3 -m training.pretrain --preset bert_a_mini --seed 0 --out /tmp/init_check/bert_a_s0 \
  --shards shards/train_v2_128 --valid-shards shards/valid_v2_128 --vocabulary-size 8000 --vocab-lines 20000 \
  --steps 16000 --batch-size 32 --seq-len 128 --learning-rate 1e-3 --warmup-ratio 0.2 \
  --weight-decay 0.01 --adam-beta1 0.9 --adam-beta2 0.999 --adam-epsilon 1e-6 --clip-norm 1.0 \
  --dropout 0.1 --mask-rate 0.15 --mask-token-rate 0.8 --random-token-rate 0.1 --eval-every 200 \
  --valid-batches 20 --save-steps 0,4800,8000 --strategy default --precision float32 --verbose 2 &
pid=$!
while ! grep -q "^200," /tmp/init_check/bert_a_s0/metrics.csv 2>/dev/null; do sleep 5; kill -0 $pid || exit 1; done
kill -TERM $pid; wait
cat /tmp/init_check/bert_a_s0/metrics.csv
