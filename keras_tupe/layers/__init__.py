"""Positional-encoding layers of keras_tupe."""

from keras_tupe.layers.cls_reset import ClsReset
from keras_tupe.layers.positional_attention_base import PositionalAttentionBase
from keras_tupe.layers.qkr_multiplicative_attention import QKRMultiplicativeAttention
from keras_tupe.layers.relative_bucket_bias import RelativeBucketBias, t5_relative_position_bucket
from keras_tupe.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tupe.layers.untied_positional_attention import UntiedPositionalAttention
from keras_tupe.layers.untied_positional_correlation import UntiedPositionalCorrelation

__all__ = [
    "ClsReset",
    "PositionalAttentionBase",
    "QKRMultiplicativeAttention",
    "RelativeBucketBias",
    "TransformerEncoderBlock",
    "UntiedPositionalAttention",
    "UntiedPositionalCorrelation",
    "t5_relative_position_bucket",
]
