"""What keras_tupe's raw-text preprocessors add to keras-hub's."""

import keras
import numpy as np

from keras_tupe.models.preset_folders import StagedPresetSaving, preset_sequence_length

_TOKEN_IDS_HINT = ("To feed token ids instead, set the task's `preprocessor = None` and pass a "
                   "dict of token_ids, padding_mask and segment_ids.")
_EXAMPLE = ("e.g. predict([\"a fine film\", \"a dull film\"]); for sentence pairs a tuple of "
            "two such lists")


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
                f"dtype {dtype}. {_TOKEN_IDS_HINT}"
            )


def _describe(item):
    if item is None:
        return "None"
    if isinstance(item, (list, tuple, np.ndarray)):
        kinds = sorted({type(value).__name__ for value in item}) or ["nothing"]
        return (f"a {type(item).__name__} of {len(item)} {'/'.join(kinds)}"
                + (" (token ids?)" if kinds == ["int"] else ""))
    return f"{type(item).__name__} {item!r:.40}"


def check_text_batch(owner, x):
    """Raises a clear error unless `x` is a batch of strings (or a pair of batches).

    For the Python values a user passes to `predict` (lists, tuples, NumPy arrays):
    tensors and datasets go on to the preprocessor's own check (`check_string_inputs`).
    Without it `predict([None])`, `predict([])` or ragged token-id lists failed with
    TensorFlow's conversion errors, which do not say that strings are expected.
    """
    if x is None or isinstance(x, (str, bytes)):
        received = "None" if x is None else "a single string: wrap it in a list"
        raise ValueError(f"{owner} takes a batch of strings ({_EXAMPLE}). Received {received}.")
    if isinstance(x, tuple) and x and all(isinstance(s, (list, np.ndarray)) for s in x):
        segments = x
        if len({len(segment) for segment in segments}) > 1:
            raise ValueError(
                f"{owner}: the sentence-pair batches differ in length "
                f"({', '.join(str(len(segment)) for segment in segments)}): pass one second "
                "sentence for each first sentence.")
    elif isinstance(x, tuple):
        raise ValueError(
            f"{owner} reads a tuple as sentence pairs, (first sentences, second sentences), "
            f"each a list of strings; for single sentences pass a list ({_EXAMPLE}). Received "
            f"a tuple of {_describe(x)[len('a tuple of '):]}.")
    elif isinstance(x, (list, np.ndarray)):
        segments = (x,)
    else:
        return
    for index, segment in enumerate(segments):
        where = f"segment {index} of the batch" if len(segments) > 1 else "the batch"
        items = segment.tolist() if isinstance(segment, np.ndarray) else list(segment)
        if not items:
            raise ValueError(f"{owner} received an empty batch: pass at least one string "
                             f"({_EXAMPLE}).")
        for position, item in enumerate(items):
            if not isinstance(item, (str, bytes)):
                raise ValueError(
                    f"{owner} takes strings, but item {position} of {where} is "
                    f"{_describe(item)}. {_TOKEN_IDS_HINT}")


class TextPreprocessorMixin(StagedPresetSaving):
    """Mixed in before a keras-hub text preprocessor: preset length, safe saving, text check,
    and `segment_ids`: whether `x` holds them (`False` for a backbone without a segment
    embedding, as keras-hub's RoBERTa preprocessors; the task sets it from its backbone)."""

    def __init__(self, *args, segment_ids=True, **kwargs):
        super().__init__(*args, **kwargs)
        self.segment_ids = segment_ids

    @classmethod
    def _add_missing_kwargs(cls, loader, kwargs):
        # keras-hub's (private) hook for a task whose preset folder holds no
        # preprocessor of this class: take the folder's sequence length rather
        # than keras-hub's 512, which an absolute encoder's table may not have.
        kwargs = super()._add_missing_kwargs(loader, kwargs)
        kwargs.setdefault("sequence_length", preset_sequence_length(loader))
        return kwargs

    def call(self, x, y=None, sample_weight=None):
        check_string_inputs(type(self).__name__, x)
        outputs = super().call(x, y=y, sample_weight=sample_weight)
        if self.segment_ids:
            return outputs
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(outputs)
        x = {key: value for key, value in x.items() if key != "segment_ids"}
        return keras.utils.pack_x_y_sample_weight(x, y, sample_weight)

    def get_config(self):
        return {**super().get_config(), "segment_ids": self.segment_ids}
