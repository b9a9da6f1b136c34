"""`keras-tupe-finetune-glue`: repeated tasks, rates and seeds run and count once; an
`--init` it cannot use (a fairseq preset converted without BPE codes, an unfinished
pre-training run) is named with the fix; SIGTERM leaves no results folder.

The inputs at the edges (issue 38) tested here (all failed on the code before):

- `finetune_glue --tasks sst2 sst2` (or a repeated rate or seed):
  `test_repeated_tasks_rates_and_seeds_run_once_and_count_once`
- `--init` on an unfinished pre-training run:
  `test_init_on_an_unfinished_run_says_how_to_finish_or_use_a_checkpoint`
- SIGTERM before fine-tuning's first result:
  `test_sigterm_before_the_first_finetuning_result_leaves_no_results_folder`
- a process layout without `--grid`, a process id outside the count:
  `test_a_wrong_process_layout_is_one_line_and_nothing_made`
"""

import json
import os

import pytest

from tests.commands.entry_points import FakeEncoder, run_main


def test_repeated_tasks_rates_and_seeds_run_once_and_count_once(tmp_path, monkeypatch, capsys):
    """`--tasks sst2 sst2` ran every run twice and counted sst2 twice in the average."""
    from keras_tupe.finetuning import glue as protocol
    from keras_tupe.finetuning import summarize
    from keras_tupe_cli import finetune_glue

    runs = []

    def fake_run(config, members, engine, data):  # a run: one member, the fit engine
        runs.append((config.task, config.learning_rate, config.seed))
        return [{"task": config.task, "learning_rate": config.learning_rate,
                 "seed": config.seed, "dev": {"validation": {"score": 0.5}}}]

    # The checks and the splits they load (each once), the task's inputs: none here.
    monkeypatch.setattr(protocol, "_preflight", lambda *args: {"sst2": {}})
    monkeypatch.setattr(protocol, "glue_data", lambda config, splits: None)
    monkeypatch.setattr(protocol, "train_glue", fake_run)
    out = tmp_path / "glue"
    code, stdout, err = run_main(finetune_glue.main, [
        "--init", str(tmp_path / "run"), "--out", str(out), "--tasks", "sst2", "sst2",
        "--learning-rates", "2e-5", "2e-5", "3e-5", "--seeds", "0", "0", "0"], capsys)
    assert code == 0
    assert err.splitlines() == [
        "note: --tasks lists sst2 more than once (2 times); each runs once: --tasks sst2",
        "note: --learning-rates lists 2e-05 more than once (2 times); each runs once: "
        "--learning-rates 2e-05 3e-05",
        "note: --seeds lists 0 more than once (3 times); each runs once: --seeds 0",
    ]
    assert runs == [("sst2", 2e-5, 0), ("sst2", 3e-5, 0)]
    summary = (out / "summary.md").read_text().splitlines()
    assert [line for line in summary if line.startswith("| sst2")] == [
        "| sst2 | 50.00 | 2e-05 | 1 | 50.00 – 50.00 |"]
    assert stdout.count("sst2: ") == 1  # the table's line
    # A results.jsonl that holds a run twice (written by the old code) counts it once.
    row = {"task": "sst2", "learning_rate": 2e-5, "seed": 0,
           "dev": {"validation": {"score": 0.5}}}
    assert [(r["task"], r["seeds"]) for r in summarize([row, row], ["sst2", "sst2"])] == [
        ("sst2", 1)]


def glue_refusal(init, tmp_path, capsys):
    """`finetune_glue --init INIT --tasks sst2 --out OUT`: (status, stderr); OUT not made."""
    from keras_tupe_cli import finetune_glue

    out = tmp_path / "glue"
    code, _, err = run_main(finetune_glue.main, [
        "--init", str(init), "--tasks", "sst2", "--out", str(out)], capsys)
    assert not out.exists()
    return code, err


def test_finetune_glue_on_a_fairseq_preset_without_bpe_codes_says_convert_with_them(
        tmp_path, monkeypatch, capsys):
    """Was "No vocabulary for ...; pass the vocabulary the encoder was pre-trained with",
    naming no flag; a --vocab cannot serve, converting again with --bpe-codes does."""
    from keras_tupe.finetuning import default_vocabulary
    from keras_tupe.finetuning import glue as protocol

    monkeypatch.setattr(protocol, "load_backbone", lambda init: FakeEncoder())
    preset = tmp_path / "converted"  # what convert_fairseq writes without bpe_codes
    preset.mkdir()
    (preset / "config.json").write_text("{}")
    (preset / "metadata.json").write_text(json.dumps({"keras_tupe_conversion": {
        "kind": "fairseq", "source": "/ckpt/checkpoint_best.pt", "tokenizer": None}}))
    assert glue_refusal(preset, tmp_path, capsys) == (2, (
        f"error: {preset} is a fairseq checkpoint converted without BPE codes: the preset has "
        "no tokenizer, so it cannot read text, and no `--vocab` can stand in (its token ids "
        "are the fairseq dictionary's BPE pieces). Convert /ckpt/checkpoint_best.pt again, "
        "giving the converter the BPE codes it was pre-trained with (`--bpe-codes`), and pass "
        "that preset.\n"))
    with pytest.raises(ValueError, match=r"no `vocab=` can stand in .*\(`bpe_codes=`\)"):
        default_vocabulary(str(preset))
    (preset / "metadata.json").unlink()  # any other preset without a vocabulary
    with pytest.raises(FileNotFoundError, match=r"pre-trained with as `vocab=`\.$"):
        default_vocabulary(str(preset))


def test_init_on_an_unfinished_run_says_how_to_finish_or_use_a_checkpoint(tmp_path, capsys):
    """Was "No encoder at ...", which did not say the run is unfinished."""
    run = tmp_path / "run"
    (run / "backup").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "run_config.json").write_text(json.dumps(
        {"config": {"steps": 1000, "eval_every": 100}}))
    (run / "backup" / "training_metadata.json").write_text(json.dumps({"epoch": 3}))
    checkpoint = run / "checkpoints" / "step_0000300"  # a preset folder
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (run / "checkpoints" / "step_0000400.partial").mkdir()  # a killed writer's: never whole
    (run / "vocab.txt").write_text("")
    assert glue_refusal(run, tmp_path, capsys) == (2, (
        f"error: {run} is an unfinished pre-training run (step 300 of 1,000 backed up): the "
        "encoder is saved only after the last step. Finish it by running the same "
        f"`training.pretrain` command again (it resumes; the command is in "
        f"{run / 'run_config.json'}), or pass one of its checkpoints as --init, e.g. "
        f"{checkpoint}.\n"))


def test_sigterm_before_the_first_finetuning_result_leaves_no_results_folder(
        tmp_path, monkeypatch, capsys):
    import signal
    import time

    from keras_tupe.finetuning import glue as protocol
    from keras_tupe_cli import finetune_glue

    def terminated_while_finetuning(config, members, engine, data):
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(protocol, "_preflight", lambda *args: {"sst2": {}})
    monkeypatch.setattr(protocol, "glue_data", lambda config, splits: None)
    monkeypatch.setattr(protocol, "train_glue", terminated_while_finetuning)
    out = tmp_path / "glue" / "sst2"
    code, _, err = run_main(finetune_glue.main, [
        "--init", str(tmp_path / "run"), "--tasks", "sst2", "--out", str(out)], capsys)
    assert (code, err) == (143, "terminated\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("backend, flags, message", [
    ("tensorflow", ["--num-processes", "2", "--process-id", "0"],
     "--num-processes --process-id train across processes on the JAX backend; KERAS_BACKEND "
     "is tensorflow. Valid: KERAS_BACKEND=jax"),
    ("jax", ["--num-processes", "2", "--process-id", "2"],
     "--process-id 2 is out of range for --num-processes 2: give each process one of 0 .. 1."),
    ("jax", ["--grid", "--coordinator", "localhost"],
     "--coordinator must be HOST:PORT (process 0's address and a free port, e.g. "
     "10.0.0.1:1234). Received: 'localhost'"),
])
def test_a_wrong_process_layout_is_one_line_and_nothing_made(tmp_path, monkeypatch, capsys,
                                                             backend, flags, message):
    """A process layout (runs across processes, JAX) checked with the flags: one line, exit
    2, no --out made: the flags are checked before the processes join."""
    from keras_tupe_cli import finetune_glue

    monkeypatch.setenv("KERAS_BACKEND", backend)
    out = tmp_path / "glue"
    code, _, err = run_main(finetune_glue.main, [
        "--init", str(tmp_path / "run"), "--tasks", "stsb", "--out", str(out), *flags], capsys)
    assert (code, err.splitlines(), out.exists()) == (2, [f"error: {message}"], False)
