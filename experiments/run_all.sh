#!/usr/bin/env bash
# Every study of issue 7 in order, each step resumable: run it again after a stop and it
# continues where it was (finished runs are skipped). For a long session in the background:
#
#   nohup bash experiments/run_all.sh > runs/study_all.log 2>&1 &
#
# Steps run one after another; a failing step stops the script (`set -e`), so a later study
# never reads an unfinished earlier one. Each report is rewritten at the end of its step.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
# A step that crashes (SIGSEGV, SIGABRT or SIGBUS: one fine-tuning process segfaulted inside
# TensorFlow after 58 runs) is retried, up to 3 times: every study resumes, so a retry
# loses at most the run in progress. Any other failure (a config error, a refusal, Ctrl-C,
# a kill) stops the script.
run() {
  local attempt rc
  for attempt in 1 2 3; do
    echo "=== $(date -u +%FT%TZ) $* (attempt $attempt)"
    rc=0
    "$PY" -m experiments.run "$@" || rc=$?
    if [ "$rc" -eq 0 ]; then return 0; fi
    case "$rc" in 134|135|139) ;; *) return "$rc" ;; esac
    echo "=== $(date -u +%FT%TZ) crashed (signal $((rc - 128))), retrying: $*"
  done
  return "$rc"
}

# 1. Pre-training (TUPE Table 2 / Figure 4a), then its report and positional maps.
run pretrain --study pretrain
run report --study pretrain
for v in tupe_a tupe_a_tie_cls tupe_r bert_r; do
  run maps --init "runs/study/pretrain/$v" --out "docs/results/maps/pretrain_$v.png" --length 128
done
# 2. Fine-tuning (TUPE Table 2): TUPE-A/R at 50% of the budget.
run finetune --study finetune_intermediate
# 3. Relative methods (Huang Tables 1-2) and 4. the clipping distance of method 4.
run pretrain --study relative
run report --study relative
run pretrain --study clip_sweep
run report --study clip_sweep
# 5. Length generalization (Huang Table 4): every final model at 128, 256, 512.
run length --study length
# 6. Last, the studies that no later step reads: the seed replicate of bert_a and tupe_r
# (the seed spread of the pre-training comparison) and the six final checkpoints
# fine-tuned (TUPE Table 2; about 5.5 hours: 52-58 min a checkpoint, finetune_table.md). Their results are in docs/results already when
# the runs were made in an earlier workspace; re-running them regenerates those files.
run pretrain --study pretrain_seed1
run report --study pretrain_seed1
run finetune --study finetune
echo "=== $(date -u +%FT%TZ) all studies done"
