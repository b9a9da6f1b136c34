"""TensorFlow Serving's versioned layout: `BASE/<version>/`, written atomically."""

import json
import os
import shutil
import tempfile
import time

from keras_tupe.folders import made_folder


def existing_versions(base_dir):
    """The integer version directories under `base_dir`, sorted."""
    if not os.path.isdir(base_dir):
        return []
    return sorted(int(name) for name in os.listdir(base_dir)
                  if name.isdigit() and os.path.isdir(os.path.join(base_dir, name)))


def next_version(base_dir):
    """One more than the highest version under `base_dir`; 1 for a new model."""
    versions = existing_versions(base_dir)
    return versions[-1] + 1 if versions else 1


def write_version(base_dir, write, version=None, overwrite=False, metadata=None):
    """Writes one version of a SavedModel under `base_dir` and returns its path.

    `write(path)` saves into a hidden temporary directory inside `base_dir` (TensorFlow
    Serving ignores names that are not numbers), which is renamed to `base_dir/<version>`
    once complete: a server polling `base_dir` never sees a half-written version, and a
    failed export leaves nothing behind.

    Args:
        base_dir: str. The model's directory (`saved_models/<name>`).
        write: callable taking the directory to save into.
        version: int >= 1, or None for the next free version.
        overwrite: bool. Replace an existing `version`; without it an existing version
            is an error (nothing a user has is replaced silently).
        metadata: dict or None. Written as `assets.extra/keras_tupe.json` (the
            SavedModel convention for files TensorFlow does not read).

    Raises:
        FileExistsError: `version` exists and `overwrite` is False.
        ValueError: `version` is not a positive int.
    """
    if version is None:
        version = next_version(base_dir)
    if isinstance(version, bool) or not isinstance(version, int) or version < 1:
        raise ValueError(f"`version` must be a positive int (a TensorFlow Serving version "
                         f"directory). Received: version={version!r}")
    final = os.path.join(base_dir, str(version))
    if os.path.exists(final) and not overwrite:
        raise FileExistsError(
            f"{final} already exists: exporting would replace version {version}. Export as "
            f"version {next_version(base_dir)} (the next free one; leave the version unset), "
            "or pass overwrite=True (--overwrite) to replace it."
        )
    # A new model folder goes again if its first export fails.
    with made_folder(base_dir):
        return _write_staged(base_dir, final, write, version, metadata)


def _write_staged(base_dir, final, write, version, metadata):
    """`write_version` once `base_dir` exists: stage, add the metadata, rename."""
    staging = tempfile.mkdtemp(prefix=f".tmp-{version}-", dir=base_dir)
    umask = os.umask(0)
    os.umask(umask)
    os.chmod(staging, 0o777 & ~umask)  # mkdtemp's 0700 would hide it from a serving user
    try:
        write(staging)
        if metadata is not None:
            os.makedirs(os.path.join(staging, "assets.extra"), exist_ok=True)
            with open(os.path.join(staging, "assets.extra", "keras_tupe.json"), "w") as f:
                json.dump({**metadata, "version": version,
                           "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, f, indent=2)
        if os.path.exists(final):  # overwrite=True: swap, then delete the old one
            retired = tempfile.mkdtemp(prefix=f".old-{version}-", dir=base_dir)
            os.replace(final, os.path.join(retired, "saved_model"))
            os.replace(staging, final)
            shutil.rmtree(retired)
        else:
            os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    return final
