"""Raw sentences (or pairs) to the inputs of a keras_tupe classifier."""

import keras
import keras_hub

from keras_tupe.models.preset_folders import preset_sequence_length, refuse_overwrite
from keras_tupe.models.string_inputs import check_string_inputs
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_tokenizer import TupeTokenizer


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeTextClassifierPreprocessor(keras_hub.models.TextClassifierPreprocessor):
    """`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, round-robin truncated, padded.

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
