"""Raw sentences (or pairs) to the inputs of a keras_tupe classifier."""

import keras
import keras_hub

from keras_tupe.models.string_inputs import TextPreprocessorMixin
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_tokenizer import TupeTokenizer


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeTextClassifierPreprocessor(TextPreprocessorMixin,
                                     keras_hub.models.TextClassifierPreprocessor):
    """`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, round-robin truncated, padded.

    With a `TupeBpeTokenizer` a pair is `<s> a </s> </s> b </s>`, as the TUPE
    authors fine-tuned.

    keras-hub's `TextClassifierPreprocessor` with a `TupeTokenizer`: its
    `MultiSegmentPacker` packs exactly as `keras_tupe.data.packing.pack_segments`
    (GLUE fine-tuning and the exported preprocessor SavedModel), which the
    tests check. Outputs `token_ids`, `padding_mask` and `segment_ids`
    `(batch, sequence_length)`.

    Args:
        tokenizer: a `TupeTokenizer`.
        sequence_length: int. Defaults to `512`; an absolute encoder's task
            refuses a length above its position table.
        truncate: `"round_robin"` or `"waterfall"`. Defaults to `"round_robin"`.

    Example:
    >>> preprocessor = TupeTextClassifierPreprocessor.from_preset(
    ...     "runs/tupe_r_mini/preset", sequence_length=128)
    >>> preprocessor(["a fine film"])["token_ids"].shape
    """

    backbone_cls = TupeBackbone
    tokenizer_cls = TupeTokenizer

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
