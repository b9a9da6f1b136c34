"""Pre-training across processes under JAX (`--strategy multiworker`, `keras_tupe.processes`).

Each run is `keras-tupe-pretrain` in fresh processes on this CPU: two processes of one
device each (JAX's gloo collectives over 127.0.0.1), one process of two virtual devices
(`--xla_force_host_platform_device_count=2`, `--strategy mirrored`) and one device, all with
the same global batch of 8 from the same token-id shards. Process 0 writes the run folder;
each process feeds its half of every batch.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

# One worker runs the file (`--dist loadgroup`): the runs are one module fixture.
pytestmark = [pytest.mark.jax, pytest.mark.xdist_group("test_processes")]

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
# Float32 sums taken in another order (each process's half, then the all-reduce): the
# losses agree to about 1e-7 relative, the weights after 4 steps to about 1e-7 absolute.
LOSS_RTOL, WEIGHT_ATOL = 1e-5, 1e-5


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    """A training shard folder of 3 files and a validation one of 1 (fewer files than
    processes: a process reads rows, not files)."""
    from keras_tupe import data
    from keras_tupe.data.sharding import shard_corpus

    root = tmp_path_factory.mktemp("shards")
    vocab = data.train_vocabulary(str(DATA_DIR / "enwiki" / "train.txt"), 400,
                                  str(root / "vocab.txt"), max_lines=300)
    shard_corpus(str(DATA_DIR / "enwiki" / "train.txt"), vocab, str(root / "train"), 32,
                 sequences_per_shard=1000, max_lines=340, command="test")
    shard_corpus(str(DATA_DIR / "enwiki" / "valid.txt"), vocab, str(root / "valid"), 32,
                 max_lines=60, command="test")
    return root


def pretrain_args(out, shards, *extra, steps=4, eval_every=1):
    return ["--preset", "tupe_r_tiny", "--shards", str(shards / "train"),
            "--valid-shards", str(shards / "valid"), "--valid-batches", "2", "--seq-len", "32",
            "--batch-size", "8", "--steps", str(steps), "--eval-every", str(eval_every),
            "--learning-rate", "1e-3", "--out", str(out), *extra]


def start(args, devices=1, **popen):
    """`keras-tupe-pretrain` in a process where TensorFlow cannot be imported
    (tests/no_tensorflow): the lent GPU machine's, and a cluster image's, JAX alone."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "no_tensorflow"), str(REPO)])}
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    return subprocess.Popen([sys.executable, "-m", "training.pretrain", *args], cwd=REPO,
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            text=True, **popen)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def layout(port, index, count=2, *extra):
    return ["--strategy", "multiworker", "--coordinator", f"127.0.0.1:{port}",
            "--num-processes", str(count), "--process-id", str(index), *extra]


def start_processes(args, count=2):
    """`count` processes of one layout, each with its own `--process-id`."""
    port = free_port()
    return [start([*args, *layout(port, index, count)]) for index in range(count)]


def finish(processes, timeout=600):
    """Each process's (status, output)."""
    return [(p.wait(timeout), p.communicate()[0]) for p in processes]


def losses(out):
    rows = (Path(out) / "metrics.csv").read_text().splitlines()[1:]
    return np.array([[float(v) for v in row.split(",")[1:4:2]] for row in rows])  # loss, val


def weights(out):
    from keras_tupe.models import TupeMaskedLM

    return [np.asarray(w) for w in TupeMaskedLM.from_preset(str(Path(out) / "preset")).weights]


def kill_after_first_backup(processes, out):
    """SIGKILL to every process once process 0 committed a backup (after step 2 of 4):
    a file it writes, waited for, not a time."""
    metadata = Path(out) / "backup" / "training_metadata.json"
    deadline = time.time() + 600
    while not (metadata.exists() and json.loads(metadata.read_text() or "{}").get("step", 0) >= 2):
        assert all(p.poll() is None for p in processes) and time.time() < deadline, \
            finish(processes)
        time.sleep(0.05)
    for p in processes:
        p.send_signal(signal.SIGKILL)
    return finish(processes)


@pytest.fixture(scope="module")
def runs(shards, tmp_path_factory):
    """The same 4 steps as 1 device, 1 process x 2 devices, and 2 processes x 1 device
    killed after their first backup and resumed."""
    root = tmp_path_factory.mktemp("runs")
    one = start(pretrain_args(root / "one", shards))
    virtual = start(pretrain_args(root / "virtual", shards, "--strategy", "mirrored"), devices=2)
    kill_after_first_backup(start_processes(pretrain_args(root / "two", shards)), root / "two")
    assert not (root / "two" / "preset").exists()
    results = {"one": finish([one]), "virtual": finish([virtual]),
               "two": finish(start_processes(pretrain_args(root / "two", shards)))}
    for name, finished in results.items():
        assert [status for status, _ in finished] == [0] * len(finished), finished
    return root, results


def test_two_processes_and_two_devices_train_as_one_device(runs):
    root, results = runs
    want_losses, want_weights = losses(root / "one"), weights(root / "one")
    assert want_losses.shape == (4, 2)
    for name in ("two", "virtual"):
        np.testing.assert_allclose(losses(root / name), want_losses, rtol=LOSS_RTOL)
        for got, want in zip(weights(root / name), want_weights, strict=True):
            np.testing.assert_allclose(got, want, atol=WEIGHT_ATOL)


def test_the_two_processes_resume_after_a_kill_with_one_writer(runs):
    root, results = runs
    (first_status, first), (second_status, second) = results["two"]
    assert "Resuming" in first and "Resuming" not in second  # process 0 speaks for the run
    assert "Process 1 of 2, 2 devices in all: process 0 writes" in second
    steps = [int(row.split(",")[0]) for row in
             (root / "two" / "metrics.csv").read_text().splitlines()[1:]]
    assert steps == [1, 2, 3, 4]  # continued: no step twice, none missing
    record = json.loads((root / "two" / "run_config.json").read_text())
    assert (record["replicas"], record["processes"]) == (2, 2)
    assert sorted(p.name for p in root.iterdir()) == ["one", "two", "virtual"]
    assert not (root / "two" / "backup").exists()  # removed once the preset was whole


GRID = """
import json, sys
index, count, port, shards, out, encoder, glue = sys.argv[1:]
# The GLUE protocol's grid (STS-B, 2 rates x 2 seeds) by the command, which joins the
# processes of its layout flags: JAX is distributed from there on.
from keras_tupe_cli.finetune_glue import main
layout = (["--coordinator", f"127.0.0.1:{port}", "--num-processes", count, "--process-id",
           index] if int(count) > 1 else [])
status = main(["--init", encoder, "--tasks", "stsb", "--out", out + "_glue", "--data-dir", glue,
               "--learning-rates", "1e-3", "1e-4", "--seeds", "0", "1", "--grid", "--epochs",
               "1", "--batch-size", "16", "--seq-len", "32", "--max-train-examples", "40",
               *layout])
assert status == 0, status
# One run (fit): data-parallel over both processes' devices, each feeding half of each batch.
status = main(["--init", encoder, "--tasks", "stsb", "--out", out + "_fit", "--data-dir", glue,
               "--learning-rates", "1e-3", "--seeds", "0", "--epochs", "1", "--batch-size",
               "16", "--seq-len", "32", "--max-train-examples", "40", *layout])
assert status == 0, status
import numpy as np
from keras_tupe.grid import GridTrainer, Schedule
from keras_tupe.pretraining import pretrain_grid
from keras_tupe_base.settings import PretrainConfig
from tests.training.test_grid import RATES, SEEDS, classification_data, classifier

source, rows, weights, _ = classification_data(2)
trainer = GridTrainer(classifier(2), SEEDS, RATES, Schedule(len(rows), 2), steps_per_dispatch=5)
losses = trainer.fit(source, rows, weights)
held = sorted({k for shard in trainer.state[0][0].addressable_shards
               for k in range(*shard.index[0].indices(len(SEEDS)))})
last = [[np.asarray(w).tolist() for w in trainer.member_model(k).trainable_weights[-2:]]
        for k in range(len(SEEDS))]
predicted = trainer.predict(source[0])
config = PretrainConfig(preset="tupe_a_tiny", corpus=None, shards=shards, out=out, steps=4,
                        batch_size=8, seq_len=32, eval_every=2, save_steps=[0, 2],
                        backbone_overrides={"num_layers": 1})
folders = pretrain_grid(config, seeds=[0, 1])
print(json.dumps({"held": held, "losses": losses.tolist(), "last": last,
                  "predicted": predicted.tolist(), "folders": folders}))
"""


def test_a_grids_members_split_across_two_processes_train_as_on_one_device(shards, tmp_path):
    """`GridTrainer` over the devices of 2 processes (1 each): members 0-1 held by process
    0, 2-3 by process 1, and every process gets every member's losses, weights and
    predictions, those of the same grid on one device; `pretrain_grid` of 2 seeds, one
    a process, `keras-tupe-finetune-glue --grid` with the layout's flags (STS-B, 2 rates x
    2 seeds) and the same command without `--grid` (one run, data-parallel over both
    processes) leave the folders and rows of one device's runs, written by process 0
    alone (a second writer would be refused by the lock and stop both; a row written twice
    would show), and every process prints the table."""
    from keras_tupe.data import load_tokenizer
    from keras_tupe.models import TupeBackbone, TupeTokenizer

    encoder = tmp_path / "encoder"
    size = load_tokenizer(str(shards / "vocab.txt")).vocabulary_size()
    TupeBackbone.from_preset("tupe_a_tiny", vocabulary_size=size, num_layers=1).save_to_preset(
        str(encoder))
    TupeTokenizer(vocabulary=str(shards / "vocab.txt")).save_to_preset(str(encoder))
    env = {**os.environ, "KERAS_BACKEND": "jax", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "no_tensorflow"), str(REPO)])}

    def run(index, count, port, out):
        return subprocess.Popen([sys.executable, "-c", GRID, str(index), str(count), str(port),
                                 str(shards / "train"), str(tmp_path / out), str(encoder),
                                 str(DATA_DIR / "glue")], cwd=REPO, env=env,
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)

    port = free_port()
    finished = finish([run(0, 1, 0, "one"), run(0, 2, port, "two"), run(1, 2, port, "two")])
    assert [status for status, _ in finished] == [0, 0, 0], finished
    one, *two = [json.loads(output.splitlines()[-1]) for _, output in finished]
    assert one["held"] == [0, 1, 2, 3] and [p["held"] for p in two] == [[0, 1], [2, 3]]
    for found in two:  # every process holds every member's results
        for key in ("losses", "predicted"):
            np.testing.assert_allclose(found[key], one[key], atol=WEIGHT_ATOL, err_msg=key)
        for got, want in zip(found["last"], one["last"], strict=True):
            for g, w in zip(got, want, strict=True):
                np.testing.assert_allclose(g, w, atol=WEIGHT_ATOL)
    def grid_losses(folder):  # a grid's metrics.csv: the step's loss, no validation
        rows = (tmp_path / folder / "metrics.csv").read_text().splitlines()[1:]
        return [float(row.split(",")[1]) for row in rows]

    for seed in ("seed_0", "seed_1"):
        assert len(grid_losses(f"one/{seed}")) == 2
        np.testing.assert_allclose(grid_losses(f"two/{seed}"), grid_losses(f"one/{seed}"),
                                   rtol=LOSS_RTOL)
        for got, want in zip(weights(tmp_path / "two" / seed), weights(tmp_path / "one" / seed),
                             strict=True):
            np.testing.assert_allclose(got, want, atol=WEIGHT_ATOL)
        assert sorted(p.name for p in (tmp_path / "two" / seed).iterdir()) == sorted(
            p.name for p in (tmp_path / "one" / seed).iterdir())

    def glue_rows(out, count=4):  # (rate, seed): the dev score of each row, each row once
        lines = (tmp_path / out / "results.jsonl").read_text().splitlines()
        rows = [json.loads(line) for line in lines]
        assert len(rows) == count
        return {(r["learning_rate"], r["seed"]): r["dev"]["validation"]["score"] for r in rows}

    one_rows, two_rows = glue_rows("one_glue"), glue_rows("two_glue")
    assert len(set(one_rows.values())) == 4  # four different runs, not one floor
    for run_key, score in one_rows.items():
        assert abs(two_rows[run_key] - score) <= 1e-4, (run_key, one_rows, two_rows)
    # Each process prints the table, "stsb: SCORE (lr RATE, 2 seeds)": the same rate chosen.
    chosen = [re.findall(r"^stsb: [-\d.]+ \(lr (\S+), 2 seeds\)$", output, re.M)
              for _, output in finished]
    assert len(chosen[0]) == 1 and chosen[1] == chosen[2] == chosen[0], chosen
    # The one run across processes: the one-device run's score (each process's gradient
    # of its half of every batch, all-reduced, is the whole batch's).
    one_fit, two_fit = glue_rows("one_fit", 1), glue_rows("two_fit", 1)
    assert abs(two_fit[(1e-3, 0)] - one_fit[(1e-3, 0)]) <= 1e-4, (one_fit, two_fit)


def test_the_parts_of_a_batch_are_the_whole_batch(shards):
    """Each process's rows, read and masked alone, are its rows of the one-process batch."""
    from keras_tupe.data.shards import MaskedLMShards

    whole = MaskedLMShards(str(shards / "train"), 8, seed=3, threads=0)
    parts = [MaskedLMShards(str(shards / "train"), 8, seed=3, threads=0, part=(i, 4))
             for i in range(4)]
    for index in (0, 1, 289):  # 289: the end of the first pass and the second's start
        (x, y, weight), pieces = whole[index], [part[index] for part in parts]
        for key in x:
            np.testing.assert_array_equal(np.concatenate([p[0][key] for p in pieces]), x[key])
        np.testing.assert_array_equal(np.concatenate([p[1] for p in pieces]), y)
        np.testing.assert_array_equal(np.concatenate([p[2] for p in pieces]), weight)
        assert len({p[0]["token_ids"].tobytes() for p in pieces}) == 4
    with pytest.raises(ValueError, match="A batch of 8 does not split into 3 equal parts"):
        MaskedLMShards(str(shards / "train"), 8, part=(0, 3))


def one_line(output):
    lines = [line for line in output.splitlines() if line.startswith("error:")]
    assert len(lines) == 1, output
    return lines[0]


@pytest.mark.parametrize("index", [0, 1])
def test_settings_that_differ_stop_every_process_naming_the_others(monkeypatch, index):
    """`Processes.agree` over a gather faked for two processes whose settings differ (the
    settings' digest): process 0 and process 1 each raise the same line, naming process 1;
    the same settings pass."""
    from jax.experimental import multihost_utils

    from keras_tupe.processes import LayoutError, Processes

    def gather(mine, differ=True):  # row i: process i's (no problem, count told, digest)
        other = mine.copy()
        other[2] += differ
        return np.stack([mine, other] if index == 0 else [other, mine])

    processes = Processes(index, 2)
    monkeypatch.setattr(multihost_utils, "process_allgather", gather)
    with pytest.raises(LayoutError) as raised:
        processes.agree(None, settings={"seeds": [0, index]}, num_processes=2)
    assert str(raised.value) == ("the settings of process(es) 1 differ from process 0's: start "
                                 "every process with the same command but --process-id.")
    monkeypatch.setattr(multihost_utils, "process_allgather", lambda mine: gather(mine, False))
    processes.agree(None, settings={"seeds": [0, 1]}, num_processes=2)


def test_process_counts_that_differ_stop_every_process_with_one_line(shards, tmp_path):
    out = tmp_path / "run"
    port, args = free_port(), pretrain_args(out, shards)
    processes = [start([*args, *layout(port, 0, 2)]), start([*args, *layout(port, 1, 3)])]
    (first, first_output), (second, second_output) = finish(processes)
    assert (first, second) == (2, 2)
    assert one_line(second_output) == (
        "error: --num-processes 3 does not match the coordinator's: 2 processes joined it. "
        "Give every process the same --num-processes.")
    assert one_line(first_output) == ("error: process 1 stopped before training (its own "
                                      "error line says why); nothing was trained or written.")
    assert not out.exists()


def test_a_coordinator_nobody_answers_ends_in_one_line_within_the_timeout(shards, tmp_path):
    out = tmp_path / "run"
    alone = start([*pretrain_args(out, shards),
                   *layout(free_port(), 1, 2, "--coordinator-timeout", "5")])
    [(status, output)] = finish([alone], timeout=300)
    assert status == 2
    assert one_line(output).startswith(
        "error: the processes did not all join --coordinator 127.0.0.1:")
    assert "within --coordinator-timeout 5 s (this process: --process-id 1 of " \
           "--num-processes 2)" in output
    assert not out.exists()


@pytest.mark.parametrize("flags, message", [
    (("--strategy", "multiworker", "--num-processes", "2", "--process-id", "2"),
     "error: --process-id 2 is out of range for --num-processes 2: give each process one of "
     "0 .. 1."),
    (("--num-processes", "2"),
     "error: --num-processes set the process layout of --strategy multiworker (JAX); the run "
     "has --strategy default. Add --strategy multiworker, or leave them out."),
    (("--strategy", "multiworker", "--coordinator", "localhost"),
     "error: --coordinator must be HOST:PORT (process 0's address and a free port, e.g. "
     "10.0.0.1:1234). Received: 'localhost'"),
])
def test_a_wrong_layout_is_refused_before_keras_starts(shards, tmp_path, flags, message):
    out = tmp_path / "run"
    [(status, output)] = finish([start([*pretrain_args(out, shards), *flags])])
    assert (status, one_line(output)) == (2, message)
    assert not out.exists()


def test_a_second_process_0_on_the_same_out_is_refused_at_once(shards, tmp_path):
    from keras_tupe_base.output_lock import output_lock

    out = tmp_path / "run"
    with output_lock(str(out), command="the first process 0"):  # held: a barrier, not a race
        [(status, output)] = finish([start([*pretrain_args(out, shards),
                                            *layout(free_port(), 0, 2)])])
    assert status == 2
    assert one_line(output).startswith(f"error: --out {out} is being written by process "
                                       f"{os.getpid()}")
