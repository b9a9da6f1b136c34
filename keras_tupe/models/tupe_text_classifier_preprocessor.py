"""Raw sentences (or pairs) to the inputs of a keras_tupe classifier."""

import keras
import keras_hub
import numpy as np

from keras_tupe.models.string_inputs import TextPreprocessorMixin
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_tokenizer import TupeTokenizer


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeTextClassifierPreprocessor(TextPreprocessorMixin,
                                     keras_hub.models.TextClassifierPreprocessor):
    """`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, round-robin truncated, padded.

    With a `TupeBpeTokenizer` a pair is `<s> a </s> </s> b </s>`, as the TUPE
    authors fine-tuned. keras-hub's `TextClassifierPreprocessor` with a `TupeTokenizer`: its
    `MultiSegmentPacker` packs exactly as `keras_tupe.data.packing.pack_segments`
    (the exported preprocessor SavedModel), which the tests check. Outputs
    `token_ids`, `padding_mask` and `segment_ids` (unless `segment_ids=False`)
    `(batch, sequence_length)`,
    on tf.data (traced) and on the pure-Python path keras-hub takes eagerly
    and in Grain pipelines (no TensorFlow needed).

    Args:
        tokenizer: a `TupeTokenizer` or `TupeBpeTokenizer`.
        sequence_length: int. Defaults to `512`; an absolute encoder's task
            refuses a length above its position table.
        truncate: `"round_robin"` or `"waterfall"`. Defaults to `"round_robin"`.
        pad_to_multiple_of: int or None. Pad each batch only to its longest
            packed example, rounded up to a multiple of this, at most
            `sequence_length`: a masked encoder gives the same outputs on the
            real tokens with less work on padding, at the cost of one compiled
            step per length (at most `sequence_length / pad_to_multiple_of`).
            Defaults to `None`: every batch is `sequence_length` long.
        segment_ids: bool. Whether the outputs hold `segment_ids`: `False` for a
            backbone without a segment embedding (`num_segments=0`), as keras-hub's
            RoBERTa preprocessor. Defaults to `True`; `TupeTextClassifier` sets it
            from its backbone.

    Example:
    >>> preprocessor = TupeTextClassifierPreprocessor.from_preset(
    ...     "runs/tupe_r_mini/preset", sequence_length=128)
    >>> preprocessor(["a fine film"])["token_ids"].shape
    """

    backbone_cls = TupeBackbone
    tokenizer_cls = TupeTokenizer

    def __init__(self, tokenizer, sequence_length=512, truncate="round_robin",
                 pad_to_multiple_of=None, **kwargs):
        if pad_to_multiple_of is not None and (
                isinstance(pad_to_multiple_of, bool) or not isinstance(pad_to_multiple_of, int)
                or pad_to_multiple_of < 1):
            raise ValueError("`pad_to_multiple_of` must be a positive int or None. Received: "
                             f"pad_to_multiple_of={pad_to_multiple_of!r}")
        super().__init__(tokenizer, sequence_length=sequence_length, truncate=truncate, **kwargs)
        self.pad_to_multiple_of = pad_to_multiple_of

    def build(self, input_shape):
        super().build(input_shape)
        # A tokenizer may declare how many separators stand between a pair's
        # segments (`TupeBpeTokenizer`: 2, the TUPE authors' `<s> a </s></s> b </s>`).
        separators = getattr(self.tokenizer, "pair_separators", 1)
        if separators != 1:
            self.packer = keras_hub.layers.MultiSegmentPacker(
                start_value=self.tokenizer.start_token_id,
                end_value=self.tokenizer.end_token_id,
                sep_value=[self.tokenizer.end_token_id] * separators,
                pad_value=self.tokenizer.pad_token_id,
                truncate=self.truncate,
                sequence_length=self.sequence_length,
            )

    def call(self, x, y=None, sample_weight=None):
        outputs = super().call(x, y=y, sample_weight=sample_weight)
        if self.pad_to_multiple_of is None:
            return outputs
        x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(outputs)
        tf = None
        if self._use_tf_workflow():
            import tensorflow as tf  # the traced path: keras-hub's, where TensorFlow is
        return keras.utils.pack_x_y_sample_weight(
            trim_packed(x, self.pad_to_multiple_of, tf), y, sample_weight)

    def get_config(self):
        return {**super().get_config(), "pad_to_multiple_of": self.pad_to_multiple_of}


def trim_packed(x, multiple, tf=None):
    """Packed inputs `x` cut after their longest example, rounded up to `multiple` (at
    most their length): with TensorFlow's ops where `tf` is the module (a traced batch),
    else NumPy's."""
    mask = x["padding_mask"]
    if tf is not None:
        longest = tf.reduce_max(tf.reduce_sum(tf.cast(mask, tf.int32), -1))
        width = tf.minimum(tf.shape(mask)[-1], -(-longest // multiple) * multiple)
    else:
        longest = int(np.max(np.sum(np.asarray(mask), axis=-1)))
        width = min(mask.shape[-1], -(-longest // multiple) * multiple)
    return {name: value[..., :width] for name, value in x.items()}
