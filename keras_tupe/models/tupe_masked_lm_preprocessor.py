"""Raw text to masked-LM training examples for a keras_tupe encoder."""

import math

import keras
import keras_hub
import numpy as np

from keras_tupe.models.string_inputs import TextPreprocessorMixin
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_tokenizer import TupeTokenizer
from keras_tupe_base.checks import check_int, check_rate


def mask_selection_length(sequence_length, mask_rate=0.15):
    """P: the number of masked-position slots of a sequence (the MLM targets).

    tf-text's `RandomItemSelector` (inside `keras_hub.layers.MaskedLMMaskGenerator`)
    selects exactly `ceil(mask_rate * n)` of the `n` selectable tokens of each
    sequence, not a binomial number. Packed sequences have `n <= sequence_length - 1`
    selectable tokens ([CLS] is not), so

        P = ceil(mask_rate * (sequence_length - 1))

    (at least 1) is never truncated and wastes no slot on a sequence without
    [SEP]: 20 for 128 (BERT used 20), 77 for 512 (BERT: 80). The product is also
    taken in float32, as tf-text does, so rounding cannot make tf-text select one
    more than P.
    """
    check_int("sequence_length", sequence_length, 2)
    check_rate("mask_rate", mask_rate)
    selectable = sequence_length - 1
    in_float32 = float(np.ceil(np.float32(selectable) * np.float32(mask_rate)))
    return max(1, math.ceil(selectable * mask_rate), int(in_float32))


def default_mask_selection_length(sequence_length, mask_selection_rate=0.15):
    """`ceil(rate * (L - 1))`: every selected token gets a slot ([CLS] is never selected)."""
    return mask_selection_length(sequence_length, mask_selection_rate)


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeMaskedLMPreprocessor(TextPreprocessorMixin, keras_hub.models.MaskedLMPreprocessor):
    """keras-hub's `MaskedLMPreprocessor` with a `TupeTokenizer`: BERT's 80/10/10 masking.

    Each string is packed `[CLS] text [SEP]` to `sequence_length`, then
    `keras_hub.layers.MaskedLMMaskGenerator` selects `ceil(15%)` of the tokens
    that are not `[CLS]`, `[SEP]`, `[PAD]` (or `[MASK]`) and replaces 80% of
    them by `[MASK]`, 10% by a random token, 10% unchanged. That is the
    tf.data path `fit` takes; called eagerly outside tf.data, keras-hub 0.32
    masks in Python instead, each token with probability 15% (at most
    `mask_selection_length`), not exactly `ceil(15%)`. Outputs
    `(x, y, sample_weight)`: `x` holds `token_ids`, `padding_mask`,
    `segment_ids` (unless `segment_ids=False`) and `mask_positions`, `y` the
    original ids at those positions, `sample_weight` 1 on real slots.

    This is per-example packing, for fine-tuning an MLM on sentences; the
    pre-training corpus pipeline (`keras_tupe.data.mlm_dataset`) packs
    FULL-SENTENCES across lines with the same mask generator.

    Args:
        tokenizer: a `TupeTokenizer`.
        sequence_length: int. Defaults to `512`.
        mask_selection_length: int or None, slots per example. `None` (the
            default) gives `ceil(mask_selection_rate * (sequence_length - 1))`,
            so no selected token is dropped.
        segment_ids: bool. Whether `x` holds `segment_ids`: `False` for a backbone
            without a segment embedding (`num_segments=0`), as keras-hub's RoBERTa
            preprocessor. Defaults to `True`; `TupeMaskedLM` sets it from its backbone.
        **kwargs: other `MaskedLMPreprocessor` arguments (`mask_selection_rate`
            0.15, `mask_token_rate` 0.8, `random_token_rate` 0.1).
    """

    backbone_cls = TupeBackbone
    tokenizer_cls = TupeTokenizer

    def __init__(self, tokenizer, sequence_length=512, mask_selection_length=None,
                 mask_selection_rate=0.15, segment_ids=True, **kwargs):
        if mask_selection_length is None:
            mask_selection_length = default_mask_selection_length(
                sequence_length, mask_selection_rate)
        super().__init__(
            tokenizer,
            sequence_length=sequence_length,
            mask_selection_length=mask_selection_length,
            mask_selection_rate=mask_selection_rate,
            segment_ids=segment_ids,
            **kwargs,
        )
