"""One writer per output folder: an operating-system lock on `--out` while a command writes it.

    with output_lock(args.out, command="pretrain"):
        ...  # create, resume or replace args.out; nobody else writes it meanwhile

A second process asking for the same folder is refused at once with `OutputLockedError`,
one line naming the holder (pid, host, start time, command). The lock is the kernel's
`flock` on `.<name>.lock` beside the folder (not inside: a writer may rename a staged copy
over the folder, or delete it), so a dead holder's lock is simply taken over; the record in
the file is only what the refusal prints. The holder deletes the file before it lets go, and
a process that locked a file deleted meanwhile tries again, so two processes never hold
"the" lock on two different files. Re-entrant within a process (an entry point, then its
library code); lock-file parents it created are removed again on release when empty.
POSIX only (`fcntl`), as TensorFlow Text is.

Every writer of a folder takes this lock first, so the lock is also where a folder that
cannot be written is refused (`OutputNotWritableError`): a read-only or immutable place,
or a path through a regular file. The refusal names the folder as the caller gave it
(`--out`, or an argument such as `` `out=` ``) and the fix, not the lock file or a
writer's staging folder, and comes before any work.
"""

import contextlib
import datetime
import errno
import fcntl
import json
import os
import socket
import sys
import time

# The (canonical) lock files this process holds.
_HELD = set()


class OutputLockedError(BlockingIOError):
    """Another process is writing the output folder; the message names it (one line)."""


class OutputNotWritableError(OSError):
    """The output folder cannot be written here; the message names it and the fix (one line).

    `errno` is the operating system's (`EROFS`, `EPERM`, `EACCES` or `ENOTDIR`).
    """

    def __str__(self):
        return self.strerror


# What creating a file says where this process may not write: a read-only file system,
# an immutable folder (`chattr +i`), a forbidden one, a path through a regular file.
_UNWRITABLE_ERRNOS = frozenset({errno.EROFS, errno.EPERM, errno.EACCES, errno.ENOTDIR})


def lock_path(out):
    """The lock file of output folder `out`: `.<name>.lock` beside it, in its parent.

    Canonical (symbolic links of the parent resolved, a trailing slash ignored), so
    two spellings of one folder share one lock.
    """
    out = os.path.abspath(os.fspath(out)).rstrip(os.sep) or os.sep
    parent, name = os.path.split(out)
    return os.path.join(os.path.realpath(parent), f".{name}.lock")


def holder(out):
    """The record of the process holding `out`'s lock (a dict), or None when none does.

    Asks the kernel (a non-blocking lock attempt on a separate open of the file), so a
    record left by a dead process reads as None.
    """
    path = lock_path(out)
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return None
    try:
        return None if _try_lock(fd, fcntl.LOCK_SH) else _read_record(fd)
    finally:
        os.close(fd)


def _try_lock(fd, mode):
    """Whether `fd` got the lock (`mode`, without waiting); False when another process has it."""
    try:
        fcntl.flock(fd, mode | fcntl.LOCK_NB)
    except OSError as error:
        if error.errno not in (errno.EAGAIN, errno.EWOULDBLOCK, errno.EACCES):
            raise
        return False
    return True


@contextlib.contextmanager
def output_lock(out, command=None, flag="--out"):
    """Holds the lock of output folder `out` for the block; refuses when another process does.

    Args:
        out: str or path. The folder the block writes (it need not exist yet).
        command: str or None. What this process is, for the refusal another process
            prints (e.g. "pretrain"). Defaults to the command line.
        flag: str. How the refusal names `out`: `"--out"` in a command-line tool, an
            argument name such as `"export_dir"` for a Python caller.

    Raises:
        OutputLockedError: another live process holds the lock. Its message is one line:
            the folder, the holder's pid, host, start time and command, and what to do.
        OutputNotWritableError: `out`, or the folder it would be made in, cannot be
            written by this process (one line: `out` as `flag` names it, why, the fix).
    """
    path = lock_path(out)
    if path in _HELD:  # held already: an entry point, then its library
        yield path
        return
    made = []
    try:
        _check_writable(out)
        made = _make_parents(os.path.dirname(path))
        fd = _acquire(path, out, flag)
    except OSError as error:
        _remove_empty(made)
        if error.errno not in _UNWRITABLE_ERRNOS:
            raise
        raise OutputNotWritableError(error.errno, _not_writable(out, flag, error)) from error
    except BaseException:
        _remove_empty(made)
        raise
    try:
        _write_record(fd, command)
        _HELD.add(path)
        yield path
    finally:
        _HELD.discard(path)
        # Delete the file while still holding it; a process that opened it just before
        # sees, once it gets the lock, that the path no longer names its file.
        with contextlib.suppress(OSError):
            os.unlink(path)
        os.close(fd)  # releases the lock
        _remove_empty(made)


def _acquire(path, out, flag):
    """A descriptor of `path` locked by this process, or `OutputLockedError`."""
    for _ in range(100):  # retried only while holders delete the file under us
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        except FileNotFoundError:  # another process removed the parent it had made
            os.makedirs(os.path.dirname(path), exist_ok=True)
            continue
        try:
            locked = _try_lock(fd, fcntl.LOCK_EX)
        except OSError:
            os.close(fd)
            raise
        if not locked:
            for _ in range(20):  # the holder writes its record just after it locks
                record = _read_record(fd)
                if record:
                    break
                time.sleep(0.025)
            os.close(fd)
            raise OutputLockedError(_refusal(out, flag, record)) from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            return fd
        os.close(fd)  # locked a file its holder had just deleted: take the new one
    raise OutputLockedError(f"{flag} {out}: its lock file {path} keeps being replaced; "
                            "another process is starting and stopping on it.")


def _check_writable(out):
    """Raises the error of creating a file in `out`, where it is a folder that refuses.

    The file is unnamed (`O_TMPFILE`), so nothing is left to remove; where the system
    has none, `os.access` decides. A folder `out` that does not exist yet is made in its
    parent, which the lock file (created there next) tests.
    """
    if not os.path.isdir(out):
        return
    tmpfile = getattr(os, "O_TMPFILE", None)
    if tmpfile is None:
        if not os.access(out, os.W_OK | os.X_OK):
            raise PermissionError(errno.EACCES, os.strerror(errno.EACCES), os.fspath(out))
        return
    try:
        os.close(os.open(out, tmpfile | os.O_WRONLY, 0o600))
    except OSError as error:
        if error.errno in _UNWRITABLE_ERRNOS:
            raise
        # EOPNOTSUPP, EISDIR: a file system without unnamed files; the writer will see.


def _not_writable(out, flag, error):
    """`OutputNotWritableError`'s message: `out` as `flag` names it, the folder, the fix."""
    place = os.path.abspath(os.fspath(out))
    while not os.path.exists(place):
        place = os.path.dirname(place)
    if not os.path.isdir(place):
        why = f"{place} is a file, not a folder"
    else:
        why = f"this process cannot create files in {place} ({error.strerror})"
    return f"{flag} {out} cannot be written: {why}. Choose another {flag}, in a folder " \
           "this process can write."


def _refusal(out, flag, record):
    if not record:  # the holder has not written its record yet (it has just started)
        who = "another process (it has just started)"
    else:
        who = (f"process {record.get('pid')} on {record.get('host')} "
               f"(started {record.get('started')}: {record.get('command')})")
    return (f"{flag} {out} is being written by {who}; one process writes a folder at a "
            f"time. Wait for it to finish, stop it, or choose another {flag}.")


def _write_record(fd, command):
    record = {
        "pid": os.getpid(),
        "host": socket.gethostname(),
        "started": datetime.datetime.now().astimezone().isoformat(timespec="seconds"),
        "command": command or " ".join([os.path.basename(sys.argv[0] or "python"),
                                        *sys.argv[1:]]),
    }
    data = json.dumps(record).encode()
    os.ftruncate(fd, 0)
    os.pwrite(fd, data, 0)


def _read_record(fd):
    try:
        return json.loads(os.pread(fd, 1 << 16, 0) or b"{}")
    except (OSError, ValueError):
        return {}


def _make_parents(folder):
    """Creates `folder` and its missing parents; returns those it created, innermost first."""
    missing, made = [], []
    folder = os.path.abspath(folder)
    while not os.path.isdir(folder):
        missing.append(folder)
        folder = os.path.dirname(folder)
    try:
        for folder in reversed(missing):
            try:
                os.mkdir(folder)
            except FileExistsError:  # another process made it meanwhile: its, not ours
                continue
            made.insert(0, folder)
    except BaseException:  # a read-only or immutable folder, a file on the way
        _remove_empty(made)
        raise
    return made


def _remove_empty(folders):
    """Removes each of `folders` (innermost first) that is empty; stops at the first that is not."""
    for folder in folders:
        try:
            os.rmdir(folder)
        except OSError:
            return
