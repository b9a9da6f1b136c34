"""A full disk or a file-size limit where weights and shards are written (issue 59, item 1).

Each case runs the command in a child process (HDF5 crashed the process it wrote from) and
asks for one `error:` line, no h5py noise, no `.partial` and no lock file left. The full
disk is a real one: a small tmpfs mounted for the test (root, as CI runs), filled by the
child at the moment the case names; the file-size limit is `RLIMIT_FSIZE`, set in the
child by `preexec_fn` (Python ignores SIGXFSZ, so a write past it fails with EFBIG). Row 8,
a pre-training run under a file-size limit above each of its files, is the uninterrupted
run of `tests/training/test_write_failures.py`. The runs train without XLA: what they check is
written the same either way.
"""

import os
import re
import resource
import subprocess
import sys

import keras
import numpy as np
import pytest

from keras_tupe.models.saving import write_weights
from keras_tupe_base import staging
from tests.training.test_pretrain import ENWIKI_TRAIN, REPO, tiny_args, vocab  # noqa: F401

# `training.pretrain` in which the disk fills right after the space check of a write whose
# path matches argv[1] has passed: the file argv[2] takes all but argv[3] bytes of it, so
# the write itself meets a full disk part-way, as when another process fills it meanwhile.
FILLED_DURING = """
import os, re, sys
import keras_tupe_cli  # first: TensorFlow starts quietly, as for `keras-tupe-pretrain`
from keras_tupe_base import staging

pattern, filler, room = re.compile(sys.argv[1]), sys.argv[2], int(sys.argv[3])
check_space = staging.check_space


def check_then_fill(path, *args, **kwargs):
    check_space(path, *args, **kwargs)
    if pattern.search(os.fspath(path)) and not os.path.exists(filler):
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:
            while os.write(fd, bytes(1 << 16)):
                pass
        except OSError:  # ENOSPC: the disk is full
            pass
        os.ftruncate(fd, max(0, os.fstat(fd).st_size - room))
        os.close(fd)


staging.check_space = check_then_fill
sys.argv = ["python -m training.pretrain", *sys.argv[4:]]
from keras_tupe_cli.pretrain import main
sys.exit(main())
"""


@pytest.fixture
def tmpfs(tmp_path):
    """`mount(size)`: a fresh tmpfs of `size` bytes under `tmp_path`, unmounted afterwards."""
    mounted = []

    def mount(size):
        path = tmp_path / f"disk{len(mounted)}"
        path.mkdir()
        done = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs",
                               str(path)], capture_output=True, text=True)
        if done.returncode:
            pytest.skip(f"cannot mount a tmpfs (needs root): {done.stderr.strip()}")
        mounted.append(path)
        return path

    yield mount
    for path in mounted:
        subprocess.run(["umount", "-l", str(path)], check=False)


def _env():
    return {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"}


def _pretrain_filled_during(pattern, filler, argv, room=200_000):
    return subprocess.run([sys.executable, "-c", FILLED_DURING, pattern, str(filler),
                           str(room), *argv],
                          cwd=REPO, capture_output=True, text=True, env=_env(), timeout=900)


def _file_size_limit(limit):
    return lambda: resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))


def _one_error_line(done):
    """The single `error:` line of a command that failed cleanly (status 2)."""
    assert done.returncode == 2, f"status {done.returncode}: {done.stderr[-3000:]}"
    assert "__dealloc__" not in done.stderr and "Traceback" not in done.stderr, (
        done.stderr[-3000:])
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: could not write "), lines[-5:]
    return lines[0]


def _out_of_space(line):
    """The disk's refusal: before the file (its size checked) or as it was written."""
    assert re.search(r": (No space left on device \(|it needs about .* and only .* is free)",
                     line) and "free on its disk" in line, line


def _nothing_half_made(disk):
    left = sorted(str(p.relative_to(disk)) for p in disk.rglob("*")
                  if ".partial" in p.name or p.name.endswith(".lock"))
    assert not left, left


def _dense_model():
    model = keras.Sequential([keras.Input((10,)), keras.layers.Dense(300),
                              keras.layers.Dense(300)])  # 362 KB of float32
    model.compile(optimizer="adam", loss="mse")
    model.optimizer.build(model.trainable_variables)
    return model


def test_weights_made_in_memory_read_back_as_keras_wrote_them(tmp_path):
    model = _dense_model()
    for variable in model.weights:
        variable.assign(np.random.default_rng(0).normal(size=variable.shape))
    model.optimizer.iterations.assign(7)
    write_weights(model, tmp_path / "in_memory.weights.h5")
    model.save_weights(tmp_path / "keras.weights.h5")
    for name in ("in_memory", "keras"):
        copy = _dense_model()
        copy.load_weights(tmp_path / f"{name}.weights.h5")
        assert int(copy.optimizer.iterations.numpy()) == 7
        for got, want in zip(copy.weights, model.weights):
            np.testing.assert_array_equal(got.numpy(), want.numpy())
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in_memory.weights.h5",
                                                          "keras.weights.h5"]


def test_weights_meeting_a_full_disk_half_way_raise_one_write_error(tmpfs, monkeypatch):
    """A real 256 KB tmpfs and a 362 KB file, its space check skipped (as if the disk
    filled after it): the ordinary writes fail with ENOSPC, nothing is left."""
    disk = tmpfs(256 << 10)
    monkeypatch.setattr(staging, "check_space", lambda *args, **kwargs: None)
    with pytest.raises(staging.WriteError) as caught:
        with staging.staged(disk / "backup", folder=True):
            write_weights(_dense_model(), disk / "backup.partial" / "w.weights.h5")
    assert str(caught.value).startswith(
        f"could not write {disk / 'backup' / 'w.weights.h5'}: No space left on device (")
    assert "free on its disk" in str(caught.value) and not list(disk.iterdir())


def test_the_file_size_limit_is_compared_with_each_file_not_the_whole(tmp_path, monkeypatch):
    monkeypatch.setattr(staging, "file_size_limit", lambda: 2_000_000)
    with staging.staged(tmp_path / "backup", folder=True, needed=3_000_000) as partial:
        staging.write_bytes(os.path.join(partial, "a"), bytes(1_500_000))
        staging.write_bytes(os.path.join(partial, "b"), bytes(1_500_000))
    with pytest.raises(staging.WriteError, match=r"could not write .*backup/c: it needs "
                                                 r"about 2\.5 MB, more than .* 2\.0 MB"):
        with staging.staged(tmp_path / "backup", folder=True, needed=3_000_000) as partial:
            staging.write_bytes(os.path.join(partial, "c"), bytes(2_500_000))
    with pytest.raises(staging.WriteError, match="file-size limit"):
        with staging.staged(tmp_path / "export", folder=True, needed=3_000_000,
                            largest=3_000_000):
            pass
    assert sorted(os.listdir(tmp_path / "backup")) == ["a", "b"]
    assert sorted(os.listdir(tmp_path)) == ["backup"]


@pytest.mark.slow
@pytest.mark.parametrize("filled_at, steps, written, finishes", [
    (r"backup/step_0+4$", "4", "backup/step_000000004", "the run"),
    (r"run/preset$", "2", "preset", "the final preset"),
], ids=["backup", "final_preset"])
def test_a_disk_that_fills_during_a_weights_write_ends_in_one_error_line(
        tmpfs, vocab, filled_at, steps, written, finishes):  # noqa: F811
    """Rows 1 and 2: a real tmpfs, filled as the step-4 backup or the final `preset/`
    starts. HDF5 met it half-way: h5py's destructors' errors, then a crash (exit -11);
    at the preset without any `error:` line, a half `preset.partial/` and the lock left."""
    disk = tmpfs(16 << 20)
    out = disk / "run"
    done = _pretrain_filled_during(filled_at, disk / "filler",
                                   tiny_args(out, vocab, "--steps", steps, "--no-xla"))
    line = _one_error_line(done)
    assert f"could not write {out / written}" in line
    _out_of_space(line)
    assert f"Kept: the backup of step 2 in {out / 'backup'}" in line
    assert f"run the same command again: it resumes from step 2 and finishes {finishes}" in line
    assert sorted(p.name for p in (out / "backup").iterdir()) == [
        "step_000000002", "training_metadata.json"]
    assert not (out / "preset").exists()
    _nothing_half_made(disk)


@pytest.mark.slow
@pytest.mark.parametrize("limit", ["full_tmpfs", "ulimit"])
def test_shard_corpus_at_a_full_disk_or_a_file_size_limit_ends_in_one_error_line(
        tmp_path, tmpfs, vocab, limit):  # noqa: F811
    """Row 3: a real 64 KB tmpfs (full after a few 6.5 KB shards), or RLIMIT_FSIZE of 4 KB
    set by `preexec_fn` (less than one shard): numpy's `tofile` ended the command in a
    traceback, `OSError: ... requested and ... written`."""
    disk = tmpfs(64 << 10) if limit == "full_tmpfs" else tmp_path
    out = disk / "shards"
    done = subprocess.run(
        [sys.executable, "-m", "training.shard_corpus", "--corpus", str(ENWIKI_TRAIN),
         "--vocab", str(vocab), "--seq-len", "32", "--max-lines", "300",
         "--sequences-per-shard", "100", "--out", str(out)],
        cwd=REPO, capture_output=True, text=True, env=_env(), timeout=600,
        preexec_fn=_file_size_limit(4000) if limit == "ulimit" else None)
    line = _one_error_line(done)
    assert re.search(rf"could not write {re.escape(str(out))}/shard_\d{{5}}\.npy: ", line), line
    if limit == "ulimit":
        assert "file-size limit (ulimit -f) of 4.0 KB" in line
    else:
        _out_of_space(line)
    assert "Nothing was kept" in line and "run the same command again" in line
    assert not out.exists()
    _nothing_half_made(disk)
