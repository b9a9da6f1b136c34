#!/bin/bash
# Issue 36 item 2 on one GPU through the JAX backend: long_v2.json's four runs (TUPE-A and
# BERT-A, seeds 0 and 1; 16,000 steps of 32 x 128 tokens, LR 1e-3, 20% warm-up, corrected
# initialization) at once, as four processes sharing the GPU, read from token-id shards.
#
# Prepared here (TensorFlow), then run on the lent machine from the repository root:
#   python -m training.shard_corpus --corpus ../shared/data/enwiki/train.txt \
#       --vocab runs/study/vocab_v2.txt --seq-len 128 --out SHARDS/train_v2_128
#   python -m training.shard_corpus --corpus ../shared/data/enwiki/valid.txt \
#       --vocab runs/study/vocab_v2.txt --seq-len 128 --out SHARDS/valid_v2_128
#   (cd SHARDS && tar -cJf $REPO/.gpu/shards.tar.xz train_v2_128 valid_v2_128)
#   .whl/: keras 3.15.1, keras-hub 0.32.0, namex, optree (README of the device tool)
#   bash experiments/gpu_long_v2.sh DEADLINE_SECONDS   # carry: .whl .gpu
#
# Every run stops at DEADLINE_SECONDS after the start (SIGTERM: it keeps its last backup),
# finished or not. What comes back in $OUT: logs.tar.xz (each run's metrics.csv,
# run_config.json, console log, encoder config; nvidia-smi; versions) and the masked-LM
# models as xz-compressed tar parts (weights1.*: the three final models item 3 needs
# first; /tmp/out2 keeps weights2.* for a second call: the 30% checkpoints and TUPE-A
# seed 0's final model).
set -u
deadline=${1:-380}
start=$(date +%s)
repo=$PWD
# A dry run on a CPU (JAX, no TensorFlow): STEPS=4 EVAL_EVERY=2 SAVE_STEPS=0,2 VALID_BATCHES=2
steps=${STEPS:-16000} eval_every=${EVAL_EVERY:-200} save_steps=${SAVE_STEPS:-0,4800,8000}
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target /tmp/site .whl/*.whl || exit 1
export PYTHONPATH=/tmp/site:$PWD KERAS_BACKEND=jax PYTHONUNBUFFERED=1
export XLA_PYTHON_CLIENT_PREALLOCATE=false
# The shards go where experiments/configs/long_v2_jax.json names them (shards/ here).
mkdir -p shards /tmp/runs /tmp/out2
python3 -c "import tarfile; tarfile.open('.gpu/shards.tar.xz').extractall('shards')" || exit 1
nvidia-smi > /tmp/runs/nvidia-smi.txt 2>&1
python3 -c "import jax, keras, keras_hub, numpy; print(jax.devices(), jax.__version__, \
keras.__version__, keras_hub.__version__, numpy.__version__)" > /tmp/runs/versions.txt 2>&1
cat /tmp/runs/versions.txt
settings=(--shards shards/train_v2_128 --valid-shards shards/valid_v2_128
          --vocabulary-size 8000 --vocab-lines 20000
          --steps $steps --batch-size 32 --seq-len 128 --learning-rate 1e-3 --warmup-ratio 0.2
          --weight-decay 0.01 --adam-beta1 0.9 --adam-beta2 0.999 --adam-epsilon 1e-6
          --clip-norm 1.0 --dropout 0.1 --mask-rate 0.15 --mask-token-rate 0.8
          --random-token-rate 0.1 --eval-every $eval_every --valid-batches ${VALID_BATCHES:-20} --save-steps $save_steps
          --strategy default --precision float32 --verbose 2)
left=$((deadline - ($(date +%s) - start)))
for run in bert_a_s0 tupe_a_s1 bert_a_s1 tupe_a_s0; do
    timeout -s TERM -k 30 "$left" python3 -m training.pretrain --preset "${run%_s?}_mini" \
        --seed "${run##*_s}" --out "/tmp/runs/$run" "${settings[@]}" \
        > "/tmp/runs/$run.log" 2>&1 &
done
tick=0
while [ "$(jobs -r | wc -l)" -gt 0 ]; do  # every minute: where each run is
    sleep 5; tick=$((tick + 1)); [ $((tick % 12)) -eq 0 ] || continue
    for run in bert_a_s0 tupe_a_s1 bert_a_s1 tupe_a_s0; do
        echo "$(( $(date +%s) - start )) s $run: $(tail -n 1 /tmp/runs/$run/metrics.csv 2>/dev/null | cut -c1-60)"
    done
done
wait
cd /tmp/runs
for run in bert_a_s0 tupe_a_s1 bert_a_s1 tupe_a_s0; do tail -n 3 "$run.log"; done
python3 "$repo/experiments/gpu_pack.py" "$OUT" /tmp/out2
ls -la "$OUT" /tmp/out2
echo "total $(( $(date +%s) - start )) s"
