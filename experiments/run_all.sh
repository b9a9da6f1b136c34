#!/usr/bin/env bash
# Every study, each step resumable: run it again after a stop and it continues where it was
# (finished runs are skipped). For a long session in the background:
#
#   nohup bash experiments/run_all.sh > runs/study_all.log 2>&1 &
#
# Default: what runs/ lacks and the committed reports do not record (an earlier workspace's
# runs are kept from the reports; see experiments/README.md).
#
#   bash experiments/run_all.sh --all
#
# retrains and re-evaluates every committed number from scratch, in dependency order: every
# pre-training run (each report after its study), the positional maps, the length study of
# all those models, the fine-tuning of their checkpoints, then the speed comparison (and the
# tuning sweep, once its comparison is committed; then each of issue 21's later studies whose
# report is committed: long, long_seed1, relative_v2, relative_v2_seed1, glue_full,
# glue_relative, squad_relative). `--fresh` makes each step ignore the
# committed records, so nothing is taken from an earlier workspace; runs finished on disk in
# this workspace are still skipped, so a stopped `--all` resumes. It prints the expected time
# first (`experiments.run estimate`, from the wall times the reports recorded).
#
# Steps run one after another; a failing step stops the script (`set -e`), so a later study
# never reads an unfinished earlier one. Each report is rewritten at the end of its step.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
ALL=0
case "${1:-}" in
  --all) ALL=1 ;;
  "") ;;
  *) echo "error: unknown argument ${1}: run_all.sh takes no argument (resume what is missing) or --all (retrain and re-evaluate everything)" >&2; exit 2 ;;
esac
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

if [ "$ALL" -eq 1 ]; then
  # The speed study ran bert_a only, to step 300 (docs/results/speed_compare.md).
  SPEED="speed_f32_xla speed_bf16_xla speed_f32_noxla speed_bf16_noxla"
  SWEEP="sweep_lr5e4_wu05 sweep_lr2e4_wu05 sweep_lr1e3_wu05 sweep_lr2e4_wu20 sweep_lr5e4_wu20 sweep_lr1e3_wu20 sweep_lr2e3_wu20"
  SWEEP_COMMITTED=0
  [ -f docs/results/sweep_compare.csv ] && SWEEP_COMMITTED=1
  SPEED_SPECS=""
  for s in $SPEED; do SPEED_SPECS="$SPEED_SPECS $s:bert_a@300"; done
  SWEEP_SPECS=""
  [ "$SWEEP_COMMITTED" -eq 1 ] && SWEEP_SPECS="$SWEEP"
  # Issue 21's later studies, each once its report is committed (in dependency order): the
  # long runs and their seed replicate, the relative methods again, the full-set GLUE of
  # both, SQuAD.
  LATER=""
  for s in long long_seed1 relative_v2 relative_v2_seed1 glue_full glue_relative squad_relative; do
    [ -f "docs/results/${s}_config.json" ] && LATER="$LATER $s"
  done
  echo "=== $(date -u +%FT%TZ) run_all.sh --all: every study from scratch. Expected time:"
  # shellcheck disable=SC2086
  "$PY" -m experiments.run estimate pretrain pretrain_seed1 relative clip_sweep length \
      finetune finetune_intermediate $SPEED_SPECS $SWEEP_SPECS $LATER
  for study in pretrain pretrain_seed1 relative clip_sweep; do
    run pretrain --study "$study" --fresh
    run report --study "$study"
  done
  run seeds --name pretrain --studies pretrain pretrain_seed1 --variants bert_a tupe_r
  for v in tupe_a tupe_a_tie_cls tupe_r bert_r; do
    run maps --init "runs/study/pretrain/$v" --out "docs/results/maps/pretrain_$v.png" --length 128
  done
  run length --study length --fresh            # every model above is on disk now
  run finetune --study finetune --fresh        # the final checkpoints
  run finetune --study finetune_intermediate --fresh   # step 1000 (save_steps) of tupe_a, tupe_r
  for s in $SPEED; do
    run pretrain --study "$s" --variants bert_a --until-step 300 --fresh
  done
  # shellcheck disable=SC2086
  run compare --name speed --studies $SPEED --variants bert_a
  if [ "$SWEEP_COMMITTED" -eq 1 ]; then
    for s in $SWEEP; do
      run pretrain --study "$s" --fresh
      run report --study "$s"
    done
    # shellcheck disable=SC2086
    run compare --name sweep --studies $SWEEP
  fi
  for s in $LATER; do
    case "$s" in
      glue_*|squad_*) run finetune --study "$s" --fresh ;;  # after the runs they read
      *) run pretrain --study "$s" --fresh
         run report --study "$s" ;;
    esac
  done
  case " $LATER " in
    *" long_seed1 "*) run seeds --name long --studies long long_seed1 --variants bert_a tupe_a ;;
  esac
  echo "=== $(date -u +%FT%TZ) all studies done"
  exit 0
fi

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
run seeds --name pretrain --studies pretrain pretrain_seed1 --variants bert_a tupe_r
run finetune --study finetune
echo "=== $(date -u +%FT%TZ) all studies done"
