"""What keras_tupe's raw-text preprocessors add to keras-hub's."""

import numpy as np

from keras_tupe.models.preset_folders import preset_sequence_length, refuse_overwrite


def _is_text(value):
    if isinstance(value, (str, bytes)):
        return True
    if isinstance(value, (list, tuple)):
        return bool(value) and _is_text(value[0])
    dtype = getattr(value, "dtype", None)
    if isinstance(dtype, np.dtype):
        return dtype.kind in "USO"
    return getattr(dtype, "name", None) == "string"  # a tf.string tensor


def check_string_inputs(owner, x):
    """Raises unless every segment of `x` (a batch, or a tuple of them) is text."""
    segments = x if isinstance(x, tuple) else (x,)
    for index, segment in enumerate(segments):
        if not _is_text(segment):
            dtype = getattr(segment, "dtype", type(segment).__name__)
            raise ValueError(
                f"{owner} takes raw strings (a string, a list of strings or a string "
                f"tensor; a tuple of them for sentence pairs). Received segment {index} of "
                f"dtype {dtype}. To feed token ids instead, set the task's "
                "`preprocessor = None` and pass a dict of token_ids, padding_mask and "
                "segment_ids."
            )


class TextPreprocessorMixin:
    """Mixed in before a keras-hub text preprocessor: preset length, safe saving, text check."""

    @classmethod
    def _add_missing_kwargs(cls, loader, kwargs):
        # keras-hub's (private) hook for a task whose preset folder holds no
        # preprocessor of this class: take the folder's sequence length rather
        # than keras-hub's 512, which an absolute encoder's table may not have.
        kwargs = super()._add_missing_kwargs(loader, kwargs)
        kwargs.setdefault("sequence_length", preset_sequence_length(loader))
        return kwargs

    def save_to_preset(self, preset_dir, overwrite=False):
        """Writes `preprocessor.json` and the tokenizer; refuses to replace them."""
        refuse_overwrite(preset_dir, ["preprocessor.json", "tokenizer.json"], overwrite)
        super().save_to_preset(preset_dir)

    def call(self, x, y=None, sample_weight=None):
        check_string_inputs(type(self).__name__, x)
        return super().call(x, y=y, sample_weight=sample_weight)
