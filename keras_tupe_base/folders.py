"""Output folders that a failed command does not leave behind, and nothing else removed."""

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

    Only what this call created goes: `path` with everything in it if it did not
    exist before, then each parent it created while that parent is empty (a parent
    another command has put its own folder into meanwhile stays). A folder that
    existed before is never touched. `keep()`, asked after a failure, can spare
    `path` (a run with a backup to resume from). `KeyboardInterrupt` counts as a
    failure.

    Take the folder's `keras_tupe_base.output_lock.output_lock` first: only then is "did
    not exist before" this process's own observation, not a race with another.

    Args:
        path: str. The folder to create.
        keep: callable returning bool, or None (always remove).
    """
    path = os.path.abspath(path)
    created = first_missing(path)
    try:  # a signal right after the folder is made still removes it
        os.makedirs(path, exist_ok=True)
        yield path
    except BaseException:
        if created and not (keep and keep()):
            shutil.rmtree(path, ignore_errors=True)
            remove_empty_parents(path, created)
        raise


def remove_empty_parents(path, outermost):
    """Removes the parents of `path` up to `outermost` (included) while they are empty."""
    outermost = os.path.abspath(outermost)
    parent = os.path.dirname(os.path.abspath(path))
    while len(parent) >= len(outermost):
        try:
            os.rmdir(parent)
        except OSError:  # not empty (another command's), or gone
            return
        parent = os.path.dirname(parent)
