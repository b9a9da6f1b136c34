"""One writer per output folder (`keras_tupe_base.output_lock`): refusal, takeover, re-entry.

The processes here load `output_lock.py` by path (standard library only), so each starts
in a fraction of a second instead of importing TensorFlow.
"""

import os
import signal
import subprocess
import sys

import pytest

from keras_tupe_base.output_lock import OutputLockedError, holder, lock_path, output_lock

HOLD = """
import sys, time
from keras_tupe_base import output_lock as lock  # the standard library alone: a quick start
try:
    with lock.output_lock(sys.argv[1], command="holder-test"):
        print("held", flush=True)
        time.sleep(float(sys.argv[2]))
except lock.OutputLockedError as error:
    print(error, flush=True)
    sys.exit(2)
"""


def hold(out, seconds):
    """A process holding `out`'s lock for `seconds`, once it has printed `held`."""
    process = subprocess.Popen([sys.executable, "-c", HOLD, str(out), str(seconds)],
                               stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "held"
    return process


def test_a_second_writer_is_refused_with_the_holders_pid_host_and_start(tmp_path):
    out = tmp_path / "run"
    first = hold(out, 30)
    try:
        with pytest.raises(OutputLockedError) as refused:
            with output_lock(out, command="pretrain"):
                pass
        message = str(refused.value)
        assert f"--out {out} is being written by process {first.pid} on " in message
        assert "holder-test" in message and "started 20" in message and "\n" not in message
        assert holder(out)["pid"] == first.pid
    finally:
        first.kill()
        first.wait()


def test_a_lock_got_on_a_file_deleted_meanwhile_does_not_count(tmp_path, monkeypatch):
    """The step between opening the lock file and locking it, made to happen by construction:
    B has opened the file when its holder A lets go (deleting it) and C takes the new file;
    B's lock on the deleted file must not count, so B tries again and is refused: B and C
    never both hold the folder."""
    from keras_tupe_base import output_lock as module

    out = tmp_path / "run"
    path = lock_path(out)
    a = module._acquire(path, out, "--out")  # A holds
    real, c = module._try_lock, []

    def between(fd, mode):  # B's first lock attempt, after its open
        if not c:
            c.append(None)
            os.unlink(path)  # A lets go as `output_lock` does: the file deleted, then closed
            os.close(a)
            c[0] = module._acquire(path, out, "--out")  # C: the new file
            module._write_record(c[0], "writer-c")
        return real(fd, mode)

    monkeypatch.setattr(module, "_try_lock", between)
    try:
        with pytest.raises(OutputLockedError, match="writer-c"):
            module._acquire(path, out, "--out")
    finally:
        os.close(c[0])


def test_a_lock_left_by_a_killed_process_is_taken_over(tmp_path):
    out = tmp_path / "run"
    first = hold(out, 60)
    first.send_signal(signal.SIGKILL)
    first.wait()
    assert os.path.exists(lock_path(out))  # its record stays, but the kernel let go
    assert holder(out) is None
    with output_lock(out, command="pretrain"):
        assert holder(out)["pid"] == os.getpid()
    assert not os.path.exists(lock_path(out))


def test_reentrant_in_one_process_and_parents_it_made_go_again(tmp_path):
    out = tmp_path / "new" / "deeper" / "run"
    with output_lock(out):
        with output_lock(str(out) + "/"):  # the entry point, then its library: one lock
            assert holder(out)["pid"] == os.getpid()
        second = subprocess.run([sys.executable, "-c", HOLD, str(out), "0"],
                                capture_output=True, text=True)
        assert second.returncode == 2 and f"process {os.getpid()}" in second.stdout
    assert not (tmp_path / "new").exists()  # made for the lock file, empty again


# One of a pair: loads the lock, says `ready` and waits for `go` (the start barrier); then
# tries the lock once and says `held` or the refusal. A holder keeps the lock until told
# `release`, which the test sends only once both have answered: the two attempts overlap by
# construction, however slowly either process starts. `broken` makes `flock` a no-op (the
# check that the test can fail).
PAIR = """
import sys
from keras_tupe_base import output_lock as lock
if sys.argv[2] == "broken":
    lock.fcntl.flock = lambda fd, mode: None
print("ready", flush=True)
assert sys.stdin.readline() == "go\\n"
try:
    with lock.output_lock(sys.argv[1], command="pair-test"):
        print("held", flush=True)
        sys.stdin.readline()  # `release`, once the other has tried
except lock.OutputLockedError as error:
    print(error, flush=True)
    sys.exit(2)
"""


def race_a_pair(out, lock="flock"):
    """Two processes try `out`'s lock at once and both answer while any holder still holds.

    Returns their answers (`held` or a refusal) and exit statuses, in start order.
    """
    pair = [subprocess.Popen([sys.executable, "-c", PAIR, str(out), lock],
                             stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            for _ in range(2)]
    try:
        for process in pair:
            assert process.stdout.readline() == "ready\n"
        for process in pair:
            process.stdin.write("go\n")
            process.stdin.flush()
        answers = [process.stdout.readline().strip() for process in pair]
        for process in pair:
            process.stdin.close()  # releases a holder: both have answered
        codes = [process.wait(timeout=60) for process in pair]
    finally:
        for process in pair:
            process.kill()
            process.wait()
    return answers, codes


def test_twenty_pairs_started_together_never_share_a_folder(tmp_path):
    """Two processes at once on one folder, many times: exactly one writes, the other is refused."""
    for i in range(20):
        answers, codes = race_a_pair(tmp_path / f"run{i}")
        assert sorted(codes) == [0, 2], answers
        refusal = answers[codes.index(2)]
        assert answers[codes.index(0)] == "held", answers
        assert f"--out {tmp_path / f'run{i}'} is being written by " in refusal, answers


def test_the_pair_race_catches_a_lock_that_does_not_lock(tmp_path):
    """Without `flock` both of a pair hold the folder, so the test above would fail."""
    answers, codes = race_a_pair(tmp_path / "run", lock="broken")
    assert answers == ["held", "held"] and codes == [0, 0]
