"""A clear error when a preprocessor that takes raw text gets something else."""

import keras
import numpy as np


def _dtype(value):
    if isinstance(value, (str, bytes)):
        return "string"
    if isinstance(value, (list, tuple)) and value:
        return _dtype(value[0])
    dtype = getattr(value, "dtype", None)
    if dtype is None:
        return type(value).__name__
    if isinstance(dtype, np.dtype) and dtype.kind in "USO":
        return "string"
    name = getattr(dtype, "name", str(dtype))
    return "string" if name == "string" else keras.backend.standardize_dtype(dtype) if (
        name != "object") else "string"


def check_string_inputs(owner, x):
    """Raises unless every segment of `x` (a batch, or a tuple of them) is text."""
    segments = x if isinstance(x, tuple) else (x,)
    for index, segment in enumerate(segments):
        dtype = _dtype(segment)
        if dtype != "string":
            raise ValueError(
                f"{owner} takes raw strings (a string, a list of strings or a string "
                f"tensor; a tuple of them for sentence pairs). Received segment {index} of "
                f"dtype {dtype}. To feed token ids instead, set the task's "
                "`preprocessor = None` and pass a dict of token_ids, padding_mask and "
                "segment_ids."
            )
