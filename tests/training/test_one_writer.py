"""One writer per output folder, end to end: commands started together on one `--out`.

The twenty pairs run a stand-in command (`WRITER`: the entry-point wrapper
`keras_tupe_base.command_line.run`, the output lock, `made_folder` and staged writes, as `pretrain` uses
them, writing a few small files), so each pair takes a fraction of a second; the slow
test runs real `pretrain`s, the first held once it holds the folder until the others are done.
"""

import os
import random
import signal
import subprocess
import sys
import time

import pytest

from tests.training.test_pretrain import REPO, _steps_trained, tiny_args, vocab  # noqa: F401

# The stand-in command: holds the lock, makes the folder, writes five files one by one
# (each naming this process) and `done` last; Ctrl-C or SIGTERM unwinds through the same
# cleanups as `pretrain`. The base package's modules: the standard library alone, no Keras.
WRITER = """
import os, sys, time
from keras_tupe_base import folders, staging
from keras_tupe_base import output_lock as lock
from keras_tupe_base.command_line import run

def main(argv):
    out = argv[0]
    with lock.output_lock(out, command="writer"):
        with folders.made_folder(out):
            for i in range(5):
                staging.write_text(os.path.join(out, f"part{i}"), str(os.getpid()))
                time.sleep(0.02)
            staging.write_text(os.path.join(out, "done"), str(os.getpid()))
    return 0

sys.exit(run(main, sys.argv[1:]))
"""


def _writer(out):
    return subprocess.Popen([sys.executable, "-c", WRITER, str(out)], cwd=REPO,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def test_twenty_pairs_on_one_folder_one_killed_at_random(tmp_path):
    """Never a mixed folder, never a folder deleted under a finished writer."""
    chance = random.Random(49)
    for i in range(20):
        out = tmp_path / f"pair{i}" / "out"
        pair = [_writer(out), _writer(out)]
        victim, survivor = chance.sample(pair, 2)
        time.sleep(chance.uniform(0.0, 0.4))
        victim.send_signal(signal.SIGTERM)
        results = {p.pid: (p.wait(60), p.stderr.read()) for p in pair}
        finished = [pid for pid, (code, _) in results.items() if code == 0]
        for pid, (code, err) in results.items():
            assert code in (0, 2, 143, -signal.SIGTERM), (i, code, err)
            if code == 2:
                assert err.startswith(f"error: --out {out} is being written by process "), err
        assert len(finished) <= 1, results  # never two writers of one folder
        if finished or (out / "done").exists():  # (a writer may be stopped after its work)
            files = sorted(p.name for p in out.iterdir())
            assert files == ["done", "part0", "part1", "part2", "part3", "part4"], files
            writers = {(out / name).read_text() for name in files}
            assert len(writers) == 1, writers  # not mixed
            assert not finished or writers == {str(finished[0])}
        else:  # the holder was stopped: what it made went again (a parent the refused
            # one made for its lock file may stay, empty)
            assert not out.exists(), (results, sorted(p.name for p in out.iterdir()))
        assert not (out.parent / ".out.lock").exists()  # let go, by whoever held it
        if not (out / "done").exists():
            assert not [p for p in (tmp_path / f"pair{i}").rglob("*") if p.is_file()]


# `training.pretrain` that, once it holds the folder (run_config.json written), waits for the
# file argv[1] before it builds and trains: the other commands meet it there, however slowly
# the machine runs.
HELD = """
import os, sys, time
import keras_tupe_cli  # first: TensorFlow starts quietly, as for `keras-tupe-pretrain`
from keras_tupe import pretraining

go, compiled_model = sys.argv[1], pretraining._compiled_model


def held(*args, **kwargs):
    while not os.path.exists(go):
        time.sleep(0.05)
    return compiled_model(*args, **kwargs)


pretraining._compiled_model = held
sys.argv = ["python -m training.pretrain", *sys.argv[2:]]
from keras_tupe_cli.pretrain import main
sys.exit(main())
"""


def _pretrain(argv, held_until=None):
    command = ([sys.executable, "-c", HELD, str(held_until)] if held_until
               else [sys.executable, "-m", "training.pretrain"])
    return subprocess.Popen(
        [*command, *argv], cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"},
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


@pytest.mark.slow
def test_a_second_pretrain_on_the_same_out_is_refused_and_a_stopped_one_deletes_nothing(
        tmp_path, vocab):  # noqa: F811
    # Without XLA: what is checked is who writes the folder.
    out, go = tmp_path / "run", tmp_path / "go"
    first = _pretrain(tiny_args(out, vocab, "--no-xla"), held_until=go)
    deadline = time.time() + 300
    while not (out / "run_config.json").exists():  # it holds the folder
        assert first.poll() is None and time.time() < deadline, first.stderr.read()
        time.sleep(0.1)
    second = _pretrain(tiny_args(out, vocab, "--no-xla"))  # while it holds it: must not retrain
    stopped = _pretrain(tiny_args(out, vocab, "--no-xla"))  # stopped while it starts
    time.sleep(3)
    stopped.send_signal(signal.SIGTERM)
    second_err = second.communicate(timeout=300)[1]
    assert second.returncode == 2, second_err
    assert second_err.strip().splitlines() == [
        f"error: --out {out} is being written by process {first.pid} on "
        + second_err.split(" on ", 1)[1].strip()]
    assert stopped.wait(300) in (2, 143)
    assert first.poll() is None  # still holding the folder, waiting
    go.write_text("")
    assert first.wait(600) == 0, first.stderr.read()
    rows = (out / "metrics.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in rows] == [2, 4, 6]  # one run, no step twice
    assert _steps_trained(out) == 6 and (out / "preset" / "task.weights.h5").is_file()
    assert len(list((out / "tensorboard").rglob("events.out.tfevents*"))) == 1
