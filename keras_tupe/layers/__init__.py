"""Positional-encoding layers of keras_tupe."""

from keras_tupe.layers.bidirectional_alibi_bias import BidirectionalAlibiBias, alibi_slopes
from keras_tupe.layers.cls_reset import ClsReset
from keras_tupe.layers.disentangled_attention import (
    DisentangledAttention,
    deberta_log_bucket_position,
)
from keras_tupe.layers.disentangled_relative_embedding import DisentangledRelativeEmbedding
from keras_tupe.layers.positional_attention_base import PositionalAttentionBase
from keras_tupe.layers.qkr_multiplicative_attention import QKRMultiplicativeAttention
from keras_tupe.layers.relative_bucket_bias import RelativeBucketBias, t5_relative_position_bucket
from keras_tupe.layers.rotary_positional_attention import RotaryPositionalAttention
from keras_tupe.layers.transformer_encoder_block import TransformerEncoderBlock
from keras_tupe.layers.untied_positional_attention import UntiedPositionalAttention
from keras_tupe.layers.untied_positional_correlation import UntiedPositionalCorrelation

__all__ = [
    "BidirectionalAlibiBias",
    "ClsReset",
    "DisentangledAttention",
    "DisentangledRelativeEmbedding",
    "PositionalAttentionBase",
    "QKRMultiplicativeAttention",
    "RelativeBucketBias",
    "RotaryPositionalAttention",
    "TransformerEncoderBlock",
    "UntiedPositionalAttention",
    "UntiedPositionalCorrelation",
    "alibi_slopes",
    "deberta_log_bucket_position",
    "t5_relative_position_bucket",
]
