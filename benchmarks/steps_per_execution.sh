#!/bin/bash
# Steps/s of pre-training and fine-tuning with steps_per_execution 1 and 25 (Keras fit's
# argument), interleaved, three rounds, under JAX (the GPU stages' route):
#   bash benchmarks/steps_per_execution.sh SHARDS VOCAB OUT
# SHARDS: a token-id shard folder of 32-token sequences with train/ and valid/ (e.g.
# .stage/S1_tiny/shards from `python -m experiments.stage prepare S1 --tiny`), VOCAB its
# vocab.txt. Pre-training: bert_a_tiny, batch 8, 1,000 steps, the steady block's rate;
# fine-tuning: SST-2's first 8,000 examples, 2 epochs, batch 16, fit's whole time.
set -euo pipefail
shards=$1 vocab=$2 out=$3
export KERAS_BACKEND=jax TF_CPP_MIN_LOG_LEVEL=3
mkdir -p "$out"
for round in 1 2 3; do
  for n in 1 25; do
    run=$out/pretrain_${n}_$round
    .venv/bin/python -m training.pretrain --preset bert_a_tiny --shards "$shards/train" \
      --valid-shards "$shards/valid" --vocab "$vocab" --out "$run" --steps 1000 \
      --eval-every 500 --batch-size 8 --valid-batches 1 --steps-per-execution $n \
      --verbose 0 >/dev/null 2>&1
    echo "pretrain steps_per_execution=$n round $round: $(tail -1 "$run/metrics.csv" |
      awk -F, '{printf "%.1f", $7 / (8 * 32)}') steps/s"
  done
done
for round in 1 2 3; do
  for n in 1 25; do
    run=$out/finetune_${n}_$round
    .venv/bin/python -m training.finetune_glue --init "$out/pretrain_1_1" --tasks sst2 \
      --data-dir ../shared/data/glue --max-train-examples 8000 --epochs 2 \
      --learning-rates 1e-4 --seeds 0 --seq-len 32 --batch-size 16 \
      --steps-per-execution $n --out "$run" >/dev/null 2>&1
    .venv/bin/python -c "import json, sys; row = json.loads(open(sys.argv[1]).readline())
steps = row['epochs'] * -(-row['train_examples'] // 16)
print(f'finetune steps_per_execution=$n round $round: {steps / row[\"train_seconds\"]:.1f} '
      f'steps/s ({steps} steps, compilation included)')" "$run/results.jsonl"
  done
done
