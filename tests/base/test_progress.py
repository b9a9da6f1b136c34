"""Heartbeats: a line every few seconds while a blocking call runs, and no thread left after."""

import re
import threading
import time

import keras
import pytest

from keras_tupe.callbacks import StepProgress
from keras_tupe_base.progress import Heartbeat


def heartbeat_threads():
    return [t for t in threading.enumerate() if t.name.startswith("heartbeat: ")]


def test_heartbeat_prints_while_a_call_blocks_and_stops_after():
    lines = []
    with Heartbeat("fake learner", every=1.0, print_fn=lines.append) as heartbeat:
        assert heartbeat.running
        time.sleep(2.5)
    assert not heartbeat.running
    assert lines[:2] == ["fake learner: still working, 1s elapsed",
                         "fake learner: still working, 2s elapsed"]
    assert len(lines) == 2
    assert heartbeat_threads() == []


def test_heartbeat_stops_on_an_exception():
    lines = []
    with pytest.raises(RuntimeError, match="learner failed"):
        with Heartbeat("fake learner", every=0.2, print_fn=lines.append):
            time.sleep(0.5)
            raise RuntimeError("learner failed")
    count = len(lines)
    assert count >= 1
    time.sleep(0.5)
    assert len(lines) == count
    assert heartbeat_threads() == []


def test_touch_postpones_the_heartbeat():
    """Other progress printed meanwhile (the vocabulary's lines read): no heartbeat line."""
    lines = []
    with Heartbeat("reading", every=0.5, print_fn=lines.append) as heartbeat:
        for _ in range(6):
            time.sleep(0.2)
            heartbeat.touch()
    assert lines == []


def test_heartbeat_refuses_a_nonpositive_interval():
    with pytest.raises(ValueError, match=r"`every` must be > 0 seconds. Received: every=0"):
        Heartbeat("x", every=0)


def test_step_progress_speaks_while_the_first_step_compiles():
    """fit calls nothing between on_train_begin and the first on_train_batch_end."""
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    model.optimizer.build(model.trainable_variables)
    lines = []
    progress = StepProgress(4, 2, every=0.4, print_fn=lines.append)
    progress.set_model(model)
    progress.on_train_begin()
    progress.on_epoch_begin(0)
    time.sleep(1.0)  # the compilation
    progress.on_train_batch_end(0, {"loss": 1.0})
    assert lines[0] == ("starting at step 0/4: reading the first batches, building and "
                        "compiling the training step ...")
    assert len(lines) >= 3  # at 0.4 s and 0.8 s
    assert all(re.fullmatch(r"  reading the first batches, building and compiling the "
                            r"training step: still working, [01]s elapsed", line)
               for line in lines[1:]), lines
    count = len(lines)
    time.sleep(0.6)  # a slow second step
    assert len(lines) > count
    assert lines[-1].startswith("  training after step 1/4: still working, ")
    progress.close()  # what the caller does when fit raises
    assert heartbeat_threads() == []


def test_a_blocks_last_step_is_one_line():
    """Issue 67: `step 82/82` came twice, from the step's line and from the block's end."""
    lines = []
    progress = StepProgress(2, 2, every=1e-6, print_fn=lines.append)
    progress.on_train_begin()
    progress.on_epoch_begin(0)
    for batch in range(2):
        time.sleep(0.01)  # past `every`: a line per step would come
        progress.on_train_batch_end(batch, {"loss": 1.0})
    progress.on_epoch_end(0, {"loss": 1.0})
    progress.close()
    assert [line.split(":")[0] for line in lines if line.startswith("step ")] == ["step 2/2"]


def test_an_execution_longer_than_a_block_counts_to_the_blocks_end():
    """Issue 67: `--steps-per-execution 100` on shorter blocks printed a negative steps/s."""
    lines = []
    progress = StepProgress(4, 2, every=1e-6, print_fn=lines.append)
    progress.on_train_begin()
    for epoch in range(2):
        progress.on_epoch_begin(epoch)
        time.sleep(0.01)
        progress.on_train_batch_end(99, {"loss": 1.0})  # Keras: the last step of a 100-step call
        progress.on_epoch_end(epoch, {"loss": 1.0})
    progress.close()
    steps = [line for line in lines if line.startswith("step ")]
    assert [line.split(":")[0] for line in steps] == ["step 2/4", "step 4/4"]
    assert "-" not in "".join(steps), steps


def test_finetune_glue_says_which_run_it_starts_and_turns_progress_on(tmp_path, monkeypatch,
                                                                     capsys):
    """Issue 23: `training.finetune_glue` printed nothing for minutes while a run trained."""
    from keras_tupe.finetuning import glue as protocol
    from keras_tupe_cli import finetune_glue

    seen = []

    def fake_run(config, members, engine, data):  # a run: one member, the fit engine
        seen.append(config)
        return [{"task": config.task, "learning_rate": config.learning_rate, "seed": config.seed,
                 "dev": {"validation": {"accuracy": 0.5, "score": 0.5}}}]

    monkeypatch.setattr(protocol, "_preflight", lambda tasks, *args: {t: {} for t in tasks})
    monkeypatch.setattr(protocol, "glue_data", lambda config, splits: None)
    monkeypatch.setattr(protocol, "train_glue", fake_run)
    out = tmp_path / "glue"
    assert finetune_glue.main(["--init", "run", "--tasks", "rte", "--out", str(out),
                               "--learning-rates", "1e-4", "--seeds", "0", "1"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "rte lr=0.0001 seed=0: loading and fine-tuning (run 1 of 2) ..."
    assert lines[2] == "rte lr=0.0001 seed=1: loading and fine-tuning (run 2 of 2) ..."
    assert [config.progress for config in seen] == [True, True]
    # --verbose 1: Keras's own progress bar instead, and a resumed grid counts from its place.
    assert finetune_glue.main(["--init", "run", "--tasks", "rte", "--out", str(out),
                               "--learning-rates", "1e-4", "--seeds", "0", "1", "2",
                               "--verbose", "1"]) == 0
    assert [config.progress for config in seen[2:]] == [False]
    assert "loading and fine-tuning" not in capsys.readouterr().out
