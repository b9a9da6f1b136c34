"""Writes that leave the whole file or nothing: staged beside, space checked, renamed.

`staged(path)` yields `<path>.partial` beside the target and renames it over `path` once the
block has finished, so a reader (or a resumed run) never finds half a file, whatever stopped
the writer. A write that cannot happen raises `WriteError`, one line: what, why, how much is
free there. With `needed=` that check comes before any byte is written: the whole against
the free space, each file against the file-size limit (`ulimit -f` limits files, not
folders). On failure only what the block staged is removed; an existing `path` stays.
Keras's weights files go through `keras_tupe.models.saving.write_weights`, which makes them in
memory first. The standard library alone (the base package's rule).
"""

import contextlib
import errno
import json
import os
import re
import resource
import shutil

# Failures of the place written to, not of the program: the user can free space, raise
# the limit or choose another folder, and run the same command again.
SPACE_ERRNOS = frozenset({errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS, errno.EACCES,
                          errno.EPERM})
_SPACE_MESSAGES = (errno.ENOSPC, errno.EFBIG, errno.EDQUOT, errno.EROFS)
# HDF5 reports the C library's errno inside its message ("errno = 28, error message = ...").
_HDF5_ERRNO = re.compile(r"errno = (\d+), error message = '([^']*)'")


class WriteError(OSError):
    """A file or folder could not be written; the message is one line, for the user."""

    def __init__(self, path, reason, code=errno.ENOSPC):
        self.path, self.reason = os.fspath(path), reason
        super().__init__(code, f"could not write {self.path}: {reason}")

    def __str__(self):
        return self.strerror

    def with_note(self, note):
        """The same error with `note` (what was kept, how to go on) after the message."""
        error = WriteError(self.path, f"{self.reason}. {note}", self.errno)
        error.__cause__ = self.__cause__
        return error


def existing_ancestor(path):
    """`path`, or its nearest ancestor that exists."""
    path = os.path.abspath(os.fspath(path))
    while not os.path.exists(path):
        path = os.path.dirname(path)
    return path


def free_bytes(path):
    """Bytes an unprivileged process may still write on the filesystem holding `path`."""
    return shutil.disk_usage(existing_ancestor(path)).free


def file_size_limit():
    """This process's largest file in bytes (`ulimit -f`, RLIMIT_FSIZE), or None for none."""
    soft, _ = resource.getrlimit(resource.RLIMIT_FSIZE)
    return None if soft == resource.RLIM_INFINITY else soft


def human(size):
    """`size` bytes as a short figure: 512 B, 3.1 MB, 2.0 GB."""
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if size < 1000 or unit == "TB":
            return f"{size:.0f} {unit}" if unit == "B" else f"{size:.1f} {unit}"
        size /= 1000


def space_note(path):
    """`"<N> free on its disk"`, with the file-size limit when one is set."""
    note = f"{human(free_bytes(path))} free on its disk"
    limit = file_size_limit()
    if limit is not None:
        note += f", file-size limit (ulimit -f) {human(limit)}"
    return note


def check_space(path, needed, largest=None):
    """Raises `WriteError` unless `needed` bytes fit on `path`'s disk and a file of
    `largest` bytes (None: not known yet, checked as each file is written) under this
    process's file-size limit."""
    limit = file_size_limit()
    if limit is not None and largest is not None and largest > limit:
        raise WriteError(path, f"it needs about {human(largest)}, more than this process's "
                               f"file-size limit (ulimit -f) of {human(limit)}", errno.EFBIG)
    free = free_bytes(path)
    if needed > free:
        raise WriteError(path, f"it needs about {human(needed)} and only {human(free)} is "
                               "free on its disk")


def space_error(error):
    """The (errno, reason) of an out-of-space, file-size or read-only failure, else None.

    Recognizes plain `OSError`s, HDF5's (h5py raises `OSError` or `RuntimeError`
    with the C library's errno inside the message) and TensorFlow's (its `OpError`s
    carry the C library's message).
    """
    if isinstance(error, WriteError):
        return error.errno, error.reason
    if isinstance(error, OSError) and error.errno in SPACE_ERRNOS:
        return error.errno, os.strerror(error.errno)
    if isinstance(error, Exception):
        message = str(error)
        match = _HDF5_ERRNO.search(message)
        if match and int(match.group(1)) in SPACE_ERRNOS:
            return int(match.group(1)), match.group(2)
        for code in _SPACE_MESSAGES:  # TensorFlow's writers: the C library's words
            if os.strerror(code) in message:
                return code, os.strerror(code)
    return None


def partial_path(path):
    """The staging name of `path`: `<path>.partial`, beside it (same filesystem, so the
    rename is atomic); `x.keras` stages as `x.partial.keras`, since Keras picks the
    format by the suffix."""
    path = os.fspath(path).rstrip(os.sep)
    for suffix in (".weights.h5", ".keras", ".h5", ".npz", ".npy"):
        if path.endswith(suffix):
            return path[: -len(suffix)] + ".partial" + suffix
    return path + ".partial"


@contextlib.contextmanager
def staged(path, folder=False, needed=None, overwrite=True, largest=None):
    """Yields a staging path for `path`; renames it to `path` when the block completes.

    Args:
        path: str. The file or folder to write.
        folder: bool. Stage a folder (created empty) instead of a file.
        needed: int or None. Bytes the write needs (e.g. `arrays_bytes(weights)`):
            checked against the free space before anything is written, and, for a
            file, against the file-size limit.
        overwrite: bool. Replace an existing `path` (the old one is removed only after
            the new one is complete). `False` raises `FileExistsError` instead.
        largest: int or None. A folder's largest file, when known beforehand: checked
            against the file-size limit first. Defaults to `needed` for a file.

    Raises:
        WriteError: no room, a file-size limit, a read-only or forbidden folder. The
            staging copy is removed; `path` is as it was.
        FileExistsError: `path` exists and `overwrite` is false.
    """
    path = os.fspath(path).rstrip(os.sep)
    if not overwrite and os.path.exists(path):
        raise FileExistsError(f"{path} already exists; refusing to replace it.")
    staging = partial_path(path)
    _remove(staging)  # left by a writer that was killed: never complete, never read
    try:
        if needed:
            check_space(path, needed, needed if largest is None and not folder else largest)
        os.makedirs(os.path.dirname(staging) or ".", exist_ok=True)
        if folder:
            os.mkdir(staging)
        yield staging
        _replace(staging, path)
    except BaseException as error:
        _remove(staging)
        found = space_error(error)
        if not found:
            raise
        code, reason = found
        # A file of the folder is named where it would have been, not in the staging copy.
        where = _as_written(getattr(error, "path", None) or getattr(error, "filename", None),
                            staging, path)
        if not isinstance(error, WriteError):
            reason = f"{reason} ({space_note(path)})"
        elif where == error.path:
            raise
        raise WriteError(where, reason, code) from error


def _as_written(name, staging, path):
    """`name`, a path inside `staging`, as it would be under `path`; else `path`."""
    if name is None or not isinstance(name, (str, os.PathLike)):
        return path
    inside = os.path.relpath(os.path.abspath(name), os.path.abspath(staging))
    if inside == os.curdir or inside.startswith(os.pardir):
        return path
    return os.path.join(path, inside)


def _replace(staging, path):
    if os.path.isdir(staging) and os.path.isdir(path):  # swap, then delete the old one
        retired = partial_path(path) + ".old"
        _remove(retired)
        os.replace(path, retired)
        os.replace(staging, path)
        _remove(retired)
    else:
        os.replace(staging, path)


def _remove(path):
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    else:
        with contextlib.suppress(FileNotFoundError):
            os.remove(path)


def write_text(path, text, sync=True):
    """Writes `text` to `path` as a whole: a kill leaves the old file or the new one."""
    with staged(path) as staging:
        with open(staging, "w", encoding="utf-8") as f:
            f.write(text)
            if sync:
                f.flush()
                os.fsync(f.fileno())
    return path


def write_bytes(path, data):
    """Writes `data` (bytes or a buffer) to `path` as a whole by ordinary file writes,
    which fail with the C library's errno; its size is checked first (`staged`)."""
    data = memoryview(data)
    with staged(path, needed=data.nbytes) as staging:
        with open(staging, "wb") as f:
            f.write(data)
    return path


def write_json(path, value, sync=True):
    """`write_text` of `value` as indented JSON."""
    return write_text(path, json.dumps(value, indent=2, default=str) + "\n", sync=sync)


def copy_file(source, path):
    """Copies `source` to `path` as a whole (staged, space checked)."""
    with staged(path, needed=os.path.getsize(source)) as staging:
        shutil.copyfile(source, staging)
    return path
