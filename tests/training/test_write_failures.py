"""Nothing a user has is lost when a write fails or two commands share a folder (issue 49).

A full disk is stood in for by a file-size limit (`RLIMIT_FSIZE`, no root needed) set in
the pre-training process at a chosen moment, with SIGXFSZ ignored so a write past it
fails with EFBIG as a full disk fails with ENOSPC.

The runs train without XLA: they check what is written and kept when a write fails, and a
resume to the same weights under XLA, the default, is `tests/training/test_pretrain.py`'s
(`test_killed_run_resumes_to_the_same_weights`).
"""

import json
import os
import re
import resource
import subprocess
import sys

import numpy as np
import pytest

from tests.training.test_pretrain import REPO, _final_weights, _steps_trained, vocab  # noqa: F401
from tests.training.test_pretrain import tiny_args as pretrain_args

# Under `--dist loadgroup` (Makefile): one worker makes the uninterrupted run both compare with.
pytestmark = pytest.mark.xdist_group("test_write_failures")

# Runs `training.pretrain` with a file-size limit of LIMIT bytes set right after the backup
# of step AFTER_STEP has been committed (the run's last step: the limit meets the final save).
LIMITED = """
import resource, signal, sys
import keras_tupe_cli  # first: TensorFlow starts quietly, as it does for `keras-tupe-pretrain`
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
limit, after_step = int(sys.argv[1]), int(sys.argv[2])
from keras_tupe.callbacks import AtomicBackupAndRestore
save = AtomicBackupAndRestore._save_model

def save_then_limit(self):
    save(self)
    if int(self.model.optimizer.iterations.numpy()) >= after_step:
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

AtomicBackupAndRestore._save_model = save_then_limit
sys.argv = ["python -m training.pretrain", *sys.argv[3:]]
from keras_tupe_cli.pretrain import main
sys.exit(main())
"""


def tiny_args(out, vocab, *extra):
    return pretrain_args(out, vocab, "--no-xla", *extra)


def _run(argv, limit=None, after_step=None, preexec_fn=None):
    command = ([sys.executable, "-c", LIMITED, str(limit), str(after_step)] if limit
               else [sys.executable, "-m", "training.pretrain"])
    return subprocess.run([*command, *argv], cwd=REPO, capture_output=True, text=True,
                          env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}, timeout=900,
                          preexec_fn=preexec_fn)


def _assert_same_weights(out, reference):
    assert _steps_trained(out) == 6
    _, got = _final_weights(out)
    _, want = _final_weights(reference)
    for a, b in zip(got, want):
        np.testing.assert_array_equal(a, b)


def _file_size_limit(limit):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


@pytest.fixture(scope="module")
def straight(tmp_path_factory, vocab):  # noqa: F811
    """A run never stopped, under a file-size limit of 2 MB (RLIMIT_FSIZE, set by
    `preexec_fn`): issue 59's row 8. Each file fits (the largest, a backup's weights with
    the optimizer's state, is 1.5 MB), though the estimate of a whole backup (3.1 MB) does
    not: the run was refused at its first backup."""
    out = tmp_path_factory.mktemp("straight") / "run"
    done = _run(tiny_args(out, vocab), preexec_fn=_file_size_limit(2_000_000))
    assert done.returncode == 0, done.stderr[-3000:]
    assert (out / "preset" / "model.weights.h5").is_file()
    assert not (out / "backup").exists()  # removed once the final files read back
    return out


@pytest.mark.slow
@pytest.mark.parametrize("after_step, kept_step", [(2, 2), (6, 6)], ids=["backup", "final"])
def test_a_full_disk_keeps_the_last_backup_and_the_same_command_finishes(
        tmp_path, vocab, straight, after_step, kept_step):  # noqa: F811
    """At a backup (the limit meets step 4's) and at the final save (after step 6's)."""
    out = tmp_path / "run"
    failed = _run(tiny_args(out, vocab), limit=100_000, after_step=after_step)
    lines = failed.stderr.strip().splitlines()
    assert failed.returncode == 2, failed.stderr[-3000:]
    assert len(lines) == 1 and lines[0].startswith("error: could not write "), lines[-5:]
    assert "file-size limit" in lines[0] and re.search(r"\d [KM]B", lines[0])
    assert f"Kept: the backup of step {kept_step} in {out / 'backup'}" in lines[0]
    assert "run the same command again" in lines[0]
    metadata = json.loads((out / "backup" / "training_metadata.json").read_text())
    assert metadata["step"] == kept_step
    assert (out / "backup" / metadata["backup"] / "model.weights.h5").is_file()
    assert (out / "metrics.csv").is_file() and (out / "vocab.txt").is_file()
    assert not (out / "preset").exists()
    assert not [p for p in out.rglob("*partial*")]  # no half-written file left

    resumed = _run(tiny_args(out, vocab))
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    _assert_same_weights(out, straight)
    assert not (out / "backup").exists()
