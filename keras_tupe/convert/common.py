"""What every converter shares: its error, reading inputs, writing the preset folder."""

import os

import numpy as np

from keras_tupe.files import file_sha256


class ConversionError(ValueError):
    """A checkpoint that cannot be converted; the message names the file and the fix."""


def require_file(folder, names, what):
    """The path of the first of `names` in `folder`, or a clear `ConversionError`."""
    for name in names:
        path = os.path.join(folder, name)
        if os.path.isfile(path):
            return path
    raise ConversionError(
        f"{folder}: no {what} (expected {' or '.join(names)})."
    )


def refuse_existing_output(out):
    """`out` must not exist, or be an empty folder: checked before a checkpoint is read.

    The one writer's rule (`preset_folders.refuse_existing_folder`), as a
    `ConversionError`.
    """
    from keras_tupe.models.preset_folders import refuse_existing_folder

    refuse_existing_folder(out, ConversionError)


sha256 = file_sha256  # the name this module has always offered


def file_records(files):
    """`{role: {"path", "sha256"}}` of the files a conversion read, for its metadata."""
    return {
        role: {"path": os.path.abspath(path), "sha256": file_sha256(path)}
        for role, path in files.items()
    }


def assign_weights(values, target, what):
    """Assigns `values` ({weight path: array}) to every weight of `target`.

    Every weight of `target` must have a value and every value a weight, with
    equal shapes (a converter that drops or invents a tensor is wrong).
    """
    values = dict(values)
    missing = []
    for weight in target.weights:
        if "seed_generator" in weight.path:
            continue
        if weight.path not in values:
            missing.append(weight.path)
            continue
        value = np.asarray(values.pop(weight.path))
        if tuple(value.shape) != tuple(weight.shape):
            raise ConversionError(
                f"{what}: {weight.path} has shape {tuple(value.shape)} in the checkpoint "
                f"but {tuple(weight.shape)} in the model."
            )
        weight.assign(value.astype(weight.dtype))
    if missing or values:
        raise ConversionError(
            f"{what}: weights not mapped. Model weights without a checkpoint tensor: "
            f"{missing}; checkpoint tensors without a model weight: {sorted(values)}"
        )


def write_preset(out, model, conversion, preprocessor=None):
    """Writes `model` (a backbone or a task; `preprocessor` beside a backbone) to the
    preset folder `out`.

    `keras_tupe.models.preset_folders.write_preset_folder`, the one preset writer:
    staged in `<out>.partial` and renamed, so nothing is left at `out` when a step
    fails, and a folder that holds files is refused. `conversion` (source, kind, files
    with their sha256, ...) is recorded in `metadata.json` under `keras_tupe_conversion`.
    """
    from keras_tupe.models.preset_folders import write_preset_folder

    refuse_existing_output(out)
    return write_preset_folder(model, out, "keras_tupe_conversion", conversion,
                               preprocessor=preprocessor)
