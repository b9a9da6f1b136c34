"""The pre-training CLI: errors before training, no silent overwrite, resume, multi-worker."""

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from keras_tupe import data
from keras_tupe.models.preset_folders import run_checkpoint, run_model
from keras_tupe_cli import pretrain as cli

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI_TRAIN = DATA_DIR / "enwiki" / "train.txt"
ENWIKI_VALID = DATA_DIR / "enwiki" / "valid.txt"


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return data.train_vocabulary(str(ENWIKI_TRAIN), 400, str(path), max_lines=1500)


def tiny_args(out, vocab, *extra):
    return [
        "--preset", "tupe_r_tiny", "--corpus", str(ENWIKI_TRAIN), "--out", str(out),
        "--vocab", str(vocab), "--max-lines", "1500", "--seq-len", "32", "--batch-size", "8",
        "--steps", "6", "--eval-every", "2", "--learning-rate", "1e-3", "--verbose", "0",
        "--shuffle-buffer", "64", *extra,
    ]


def run_cli(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr().err


@pytest.mark.parametrize(
    "change, message",
    [
        (["--corpus", "/nonexistent/corpus.txt"], "/nonexistent/corpus.txt"),
        (["--seq-len", "256"], "--seq-len 256 is longer than the absolute position table.*128"),
        (["--strategy", "mirrored", "--batch-size", "9"], "--batch-size 9.*multiple.*replicas \\(2\\)"),
        (["--steps", "7"], "--steps \\(7\\) must be a positive multiple of --eval-every \\(2\\)"),
        # 0 (the initialization) is a step to save; 100 is past --steps.
        (["--save-steps", "0,100"],
         r"--save-steps must lie in \[0, --steps=6\].*Received: \[100\]"),
        (["--preset", "tupe_r_huge"], "Unknown preset tupe_r_huge. The nearest: .*tupe_r_tiny"),
        (["--steps-per-execution", "4"], r"--steps-per-execution \(4\) must be a positive "
                                         r"divisor of --eval-every \(2\)"),
        (["--steps-per-execution", "2", "--save-steps", "3"],
         r"--steps-per-execution \(2\).*each --save-steps \(3\): validation and backups "
         r"happen between executions"),
    ],
)
def test_bad_input_fails_before_anything_is_written(tmp_path, vocab, capsys, change, message):
    import re

    out = tmp_path / "run"
    code, err = run_cli(tiny_args(out, vocab) + change, capsys)
    assert code == 2 and re.search(message, err), err
    assert not out.exists()


@pytest.mark.parametrize("until_step", [0, 3, 8])
def test_a_bad_until_step_fails_before_anything_is_written(tmp_path, vocab, until_step):
    from keras_tupe.pretraining import PretrainError, pretrain

    out = tmp_path / "run"
    with pytest.raises(PretrainError, match=r"until_step must be a positive multiple of "
                       rf"eval_every \(2\) and at most steps \(6\)\. Received: {until_step}"):
        pretrain(cli.parse_config(tiny_args(out, vocab)), until_step=until_step)
    assert not out.exists()


@pytest.mark.parametrize("overrides, message", [
    # A misspelt field is named with the valid ones, before anything is written.
    ({"num_bucket": 8}, r"backbone_overrides \['num_bucket'\] are not TupeBackbone arguments.*"
                        r"Valid: \[.*'num_buckets'"),
    # The overrides are the run's backbone: the length check reads them, not the preset alone.
    ({"max_sequence_length": 16}, r"--seq-len 32 is longer than the absolute position table "
                                  r"of tupe_r_tiny \(max_sequence_length=16\)"),
])
def test_backbone_overrides_are_checked_before_anything_is_written(tmp_path, vocab, overrides,
                                                                   message):
    import dataclasses

    from keras_tupe.pretraining import PretrainError, pretrain

    out = tmp_path / "run"
    config = dataclasses.replace(cli.parse_config(tiny_args(out, vocab)),
                                 backbone_overrides=overrides)
    with pytest.raises(PretrainError, match=message):
        pretrain(config)
    assert not out.exists()


def test_empty_corpus_is_refused(tmp_path, vocab, capsys):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    code, err = run_cli(tiny_args(tmp_path / "run", vocab) + ["--corpus", str(empty)], capsys)
    assert code == 2 and "empty" in err and str(empty) in err
    assert not (tmp_path / "run").exists()


def test_foreign_or_finished_directories_are_not_overwritten(tmp_path, vocab, capsys):
    out = tmp_path / "run"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    code, err = run_cli(tiny_args(out, vocab), capsys)
    assert code == 2 and "not a keras_tupe run directory" in err and "--overwrite" in err
    assert (out / "notes.txt").read_text() == "mine" and len(os.listdir(out)) == 1
    (out / "run_config.json").write_text("{}")
    (out / "preset").mkdir()
    (out / "preset" / "config.json").write_text("{}")
    code, err = run_cli(tiny_args(out, vocab), capsys)
    assert code == 2 and "finished run" in err  # a run is finished once its preset is there
    assert (out / "preset" / "config.json").read_text() == "{}"


def test_resume_refuses_other_settings_and_another_vocabulary(tmp_path, vocab, capsys):
    out = tmp_path / "run"
    config = cli.parse_config(tiny_args(out, vocab))
    out.mkdir()
    (out / "run_config.json").write_text(json.dumps({"config": config.resume_key()}))
    (out / "vocab.txt").write_text(Path(vocab).read_text())
    code, err = run_cli(tiny_args(out, vocab, "--learning-rate", "5e-4"), capsys)
    assert code == 2 and "learning_rate: run has 0.001, now 0.0005" in err
    other = tmp_path / "other_vocab.txt"
    other.write_text(Path(vocab).read_text() + "zzzextra\n")
    code, err = run_cli(tiny_args(out, other), capsys)
    assert code == 2 and "does not match the vocabulary of the checkpoint" in err


@pytest.mark.slow
@pytest.mark.parametrize("precision", ["mixed_float16", "mixed_bfloat16"])
def test_pretrain_in_mixed_precision(tmp_path, vocab, capsys, precision):
    # float16 under XLA, its loss scaling in the compiled step: no other test trains the
    # model so. bfloat16 without XLA (half the time): tests/training/test_distributed.py trains the
    # masked LM in mixed_bfloat16 under XLA, and the run's precision plumbing is the same.
    xla = ["--no-xla"] if precision == "mixed_bfloat16" else []
    out = tmp_path / "run"
    args = tiny_args(out, vocab, "--precision", precision, "--valid-corpus", str(ENWIKI_VALID),
                     "--valid-batches", "2", *xla)
    args[args.index("--steps") + 1] = "4"
    code, err = run_cli(args, capsys)
    assert code == 0, err
    rows = [row.split(",") for row in (out / "metrics.csv").read_text().splitlines()[1:]]
    losses = [float(row[column]) for row in rows for column in (1, 3)]  # loss, val_loss
    assert len(rows) == 2 and all(np.isfinite(losses))
    assert _steps_trained(out) == 4
    model, _ = _final_weights(out)
    assert model.backbone.dtype_policy.name == precision


def test_steps_per_execution_trains_the_same_weights(tmp_path, vocab, capsys):
    """Two steps a call of the train function: the same run, step for step (the log's
    losses and the final weights), and the step-2 checkpoint is kept.

    Without XLA (half of each run's time here): Keras loops over the same step function
    either way, and the slow tests below pre-train under XLA.
    """
    runs = {}
    for n in (1, 2):
        out = tmp_path / f"spe{n}"
        code, err = run_cli(tiny_args(out, vocab, "--steps-per-execution", str(n),
                                      "--save-steps", "2", "--no-xla"), capsys)
        assert code == 0, err
        runs[n] = out
    assert (runs[1] / "metrics.csv").read_text().splitlines()[1:] != []
    for a, b in zip(*((Path(runs[n]) / "metrics.csv").read_text().splitlines() for n in (1, 2))):
        assert a.split(",")[:5] == b.split(",")[:5]  # step, loss, accuracy, val: not the times
    for a, b in zip(_final_weights(runs[1])[1], _final_weights(runs[2])[1]):
        np.testing.assert_array_equal(a, b)
    assert os.path.isdir(runs[2] / "checkpoints" / "step_0000002")


def _subprocess_run(argv, env=None):
    return subprocess.Popen(
        [sys.executable, "-m", "training.pretrain", *argv], cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", **(env or {})},
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )


def _final_weights(out):
    from keras_tupe.models import TupeMaskedLM

    model = TupeMaskedLM.from_preset(run_model(out))
    return model, [w.numpy() for w in model.weights]


def _steps_trained(out):
    """The last step of the run's metrics.csv (its preset holds no optimizer state)."""
    rows = (Path(out) / "metrics.csv").read_text().splitlines()[1:]
    return int(rows[-1].split(",")[0])


@pytest.mark.slow
def test_killed_run_resumes_to_the_same_weights(tmp_path, vocab):
    args = lambda out: tiny_args(out, vocab, "--valid-corpus", str(ENWIKI_VALID),
                                 "--valid-batches", "2", "--save-steps", "4")
    straight = _subprocess_run(args(tmp_path / "straight"))
    assert straight.wait(600) == 0, straight.stdout.read()

    killed = _subprocess_run(args(tmp_path / "killed"))
    metadata = tmp_path / "killed" / "backup" / "training_metadata.json"
    deadline = time.time() + 600
    while not (metadata.exists() and json.loads(metadata.read_text() or "{}").get("epoch", 0) >= 1):
        assert killed.poll() is None and time.time() < deadline, killed.stdout.read()
        time.sleep(0.05)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert not os.path.exists(run_model(tmp_path / "killed"))
    resumed = _subprocess_run(args(tmp_path / "killed"))
    output = resumed.communicate(timeout=600)[0]
    assert resumed.returncode == 0, output

    _, weights = _final_weights(tmp_path / "killed")
    assert _steps_trained(tmp_path / "killed") == 6
    _, want = _final_weights(tmp_path / "straight")
    for got, expected in zip(weights, want):
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)
    rows = (tmp_path / "killed" / "metrics.csv").read_text().splitlines()
    steps = [int(row.split(",")[0]) for row in rows[1:]]
    assert steps[-1] == 6 and sorted(set(steps)) == steps  # continues, no step twice
    assert os.path.isfile(os.path.join(run_checkpoint(tmp_path / "killed", 4), "config.json"))


def _free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
def test_multiworker_workers_end_with_identical_weights(tmp_path, vocab):
    ports = [_free_port(), _free_port()]
    cluster = {"worker": [f"127.0.0.1:{port}" for port in ports]}
    workers = []
    for index in range(2):
        tf_config = json.dumps({"cluster": cluster, "task": {"type": "worker", "index": index}})
        argv = tiny_args(tmp_path / f"worker{index}", vocab, "--strategy", "multiworker")
        argv[argv.index("--steps") + 1] = "4"
        workers.append(_subprocess_run(argv, env={"TF_CONFIG": tf_config}))
    outputs = [worker.communicate(timeout=600)[0] for worker in workers]
    assert [worker.returncode for worker in workers] == [0, 0], outputs
    _, first = _final_weights(tmp_path / "worker0")
    _, second = _final_weights(tmp_path / "worker1")
    assert _steps_trained(tmp_path / "worker0") == _steps_trained(tmp_path / "worker1") == 4
    for a, b in zip(first, second):
        np.testing.assert_array_equal(a, b)
