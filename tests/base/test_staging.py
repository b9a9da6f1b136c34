"""`keras_tupe_base.staging`: whole files or nothing, and one line when the disk says no.

A full disk is stood in for by a file-size limit (`RLIMIT_FSIZE`) set in a child process
with SIGXFSZ ignored; the child loads `staging.py` by path (standard library only).
"""

import subprocess
import sys
from pathlib import Path

import pytest

from keras_tupe_base import staging

LIMITED = """
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
from keras_tupe_base import staging  # the standard library alone: a quick start
resource.setrlimit(resource.RLIMIT_FSIZE, (10_000, resource.RLIM_INFINITY))
path, size, needed = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "needed"
try:
    with staging.staged(path, needed=size if needed else None) as partial:
        with open(partial, "wb") as f:
            f.write(b"n" * size)
except staging.WriteError as error:
    print(error)
    sys.exit(2)
"""


@pytest.mark.parametrize("needed", ["needed", "unknown"])
def test_a_write_past_the_limit_fails_in_one_line_and_keeps_the_old_file(tmp_path, needed):
    path = tmp_path / "weights.bin"
    path.write_bytes(b"old")
    result = subprocess.run([sys.executable, "-c", LIMITED, str(path), "50000", needed],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 2 and result.stderr == "", result.stderr
    line = result.stdout.strip()
    assert line.startswith(f"could not write {path}: ") and "\n" not in line
    assert "file-size limit (ulimit -f) 10.0 KB" in line or "limit (ulimit -f) of 10.0 KB" in line
    assert path.read_bytes() == b"old"  # the last good file stays whole
    assert sorted(p.name for p in tmp_path.iterdir()) == ["weights.bin"]  # no partial left


def test_a_write_that_fits_replaces_the_file_whole(tmp_path):
    path = tmp_path / "metrics.csv"
    path.write_text("old")
    staging.write_text(path, "new\n")
    assert path.read_text() == "new\n" and sorted(p.name for p in tmp_path.iterdir()) == [
        "metrics.csv"]
    with pytest.raises(RuntimeError):
        with staging.staged(path) as partial:
            Path(partial).write_text("half")
            raise RuntimeError("stopped")
    assert path.read_text() == "new\n" and len(list(tmp_path.iterdir())) == 1


def test_h5py_and_tensorflow_out_of_space_messages_are_recognized():
    hdf5 = OSError(27, "Can't synchronously write data (file write failed: errno = 27, "
                       "error message = 'File too large', buf = 0x1)")
    assert staging.space_error(hdf5) == (27, "File too large")
    assert staging.space_error(RuntimeError("write failed: No space left on device"))[0] == 28
    assert staging.space_error(ValueError("a bad flag")) is None
