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

# The reports keep the finished runs that earlier workspaces committed (runs/ is not in git;
# see experiments/README.md), and `pretrain` skips those runs unless `--variants` names them:
# the studies still missing come first, and each step trains only what it needs on disk.
# 1. Relative methods (Huang Tables 1-2) and 2. the clipping distance of method 4; their
# reference curves (bert_a, bert_r, tupe_r, huang_m4) come from the committed records.
run pretrain --study relative
run report --study relative
run pretrain --study clip_sweep
run report --study clip_sweep
# 3. Length generalization (Huang Table 4) of the models on disk; the rows of models
# evaluated in earlier workspaces are kept.
run length --study length
# 4. Fine-tuning (TUPE Table 2) of TUPE-A and TUPE-R at 50% of the budget: pre-trained to
# step 1000 only (about 37 min for both), the rest of their budget in step 5.
run pretrain --study pretrain --variants tupe_a tupe_r --until-step 1000
run finetune --study finetune_intermediate
# 5. Last, what regenerates results committed from earlier workspaces: the six pre-training
# runs (TUPE Figure 4a; 3 h 55 min in results.md section 1), their report and positional
# maps, the seed replicate of bert_a and tupe_r, and the six final checkpoints fine-tuned
# (about 5.5 hours: 52-58 min a checkpoint, finetune_table.md).
run pretrain --study pretrain --variants bert_a bert_r tupe_a tupe_r tupe_a_tie_cls bert_a_d
run report --study pretrain
for v in tupe_a tupe_a_tie_cls tupe_r bert_r; do
  run maps --init "runs/study/pretrain/$v" --out "docs/results/maps/pretrain_$v.png" --length 128
done
run pretrain --study pretrain_seed1 --variants bert_a tupe_r
run report --study pretrain_seed1
run finetune --study finetune
echo "=== $(date -u +%FT%TZ) all studies done"
