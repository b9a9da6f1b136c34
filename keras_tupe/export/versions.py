"""TensorFlow Serving's versioned layout: `BASE/<version>/`, written atomically."""

import os
import time

import tensorflow as tf

from keras_tupe import __version__
from keras_tupe_base.folders import made_folder
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.staging import staged, write_json


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


def write_version(base_dir, write, version=None, overwrite=False, metadata=None, needed=None):
    """Writes one version of a SavedModel under `base_dir` and returns its path.

    `write(path)` saves into a staging directory inside `base_dir`, `<version>.partial`
    (`keras_tupe_base.staging`; TensorFlow Serving ignores names that are not numbers), which
    is renamed to `base_dir/<version>` once complete: a server polling `base_dir` never
    sees a half-written version, and a failed export leaves nothing behind. The process
    holds `base_dir`'s lock meanwhile (`keras_tupe_base.output_lock`): one writer per folder.

    Args:
        base_dir: str. The model's directory (`saved_models/<name>`).
        write: callable taking the directory to save into.
        version: int >= 1, or None for the next free version.
        overwrite: bool. Replace an existing `version`; without it an existing version
            is an error (nothing a user has is replaced silently).
        metadata: dict or None. Written as `assets.extra/keras_tupe.json` (the
            SavedModel convention for files TensorFlow does not read).
        needed: int or None. Bytes the export needs (`models.saving.arrays_bytes` of the
            weights): checked against the free space and, as TensorFlow writes every
            variable into one file, against the file-size limit first.

    Raises:
        FileExistsError: `version` exists and `overwrite` is False.
        keras_tupe_base.staging.WriteError: no room, a file-size limit, a read-only folder.
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
    # One writer per model folder; a new one goes again if its first export fails.
    with output_lock(base_dir, command="export", flag="`export_dir=`"), made_folder(base_dir):
        with staged(final, folder=True, needed=needed, largest=needed) as staging:
            write(staging)
            if metadata is not None:
                write_json(os.path.join(staging, "assets.extra", "keras_tupe.json"),
                           {**metadata, "version": version,
                            "exported_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, sync=False)
    return final


def save_version(base_dir, root, signatures, kind, metadata, version=None, overwrite=False,
                 needed=None):
    """`write_version` of `tf.saved_model.save(root, path, signatures)`, its metadata
    starting with `kind` and keras_tupe's version."""
    return write_version(base_dir, lambda path: tf.saved_model.save(root, path, signatures),
                         version=version, overwrite=overwrite, needed=needed,
                         metadata={"kind": kind, "keras_tupe_version": __version__, **metadata})
