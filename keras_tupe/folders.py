"""Output folders that a failed command does not leave behind."""

import contextlib
import os
import shutil


def first_missing(path):
    """The outermost folder `os.makedirs(path)` would create, or None if `path` exists."""
    path, missing = os.path.abspath(path), None
    while not os.path.exists(path):
        path, missing = os.path.dirname(path), path
    return missing


@contextlib.contextmanager
def made_folder(path, keep=None):
    """Creates `path` (and its parents); when the block raises, removes what it created.

    Only folders this call created go, with everything in them: one that existed
    before is never touched. `keep()`, asked after a failure, can spare them (a run
    with a backup to resume from). `KeyboardInterrupt` counts as a failure.

    Args:
        path: str. The folder to create.
        keep: callable returning bool, or None (always remove).
    """
    created = first_missing(path)
    os.makedirs(path, exist_ok=True)
    try:
        yield path
    except BaseException:
        if created and not (keep and keep()):
            shutil.rmtree(created, ignore_errors=True)
        raise
