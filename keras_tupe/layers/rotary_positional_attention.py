"""Self-attention with rotary position embeddings on the queries and keys (RoFormer)."""

import keras
import keras_hub

from keras_tupe.layers.untied_positional_attention import UntiedPositionalAttention


def check_rotary_head_dim(head_dim, hidden_dim=None, num_heads=None):
    """Raises a clear error unless the head size is even (rotations act on pairs)."""
    if head_dim % 2:
        sizes = (
            f" (hidden_dim={hidden_dim}, num_heads={num_heads})" if hidden_dim is not None else ""
        )
        raise ValueError(
            "relative_position='rotary' rotates pairs of head dimensions, so the head "
            f"size hidden_dim // num_heads must be even. Received: head size {head_dim}{sizes}"
        )


@keras.saving.register_keras_serializable(package="keras_tupe")
class RotaryPositionalAttention(UntiedPositionalAttention):
    """Multi-head self-attention with queries and keys rotated by position.

    RoFormer (Su et al. 2021, Eq. 34): with `θ_c = base^(-2c/d_h)` for
    `c = 0 .. d_h/2 - 1`, the query and key of position `m` are rotated pair by
    pair by the angle `m θ_c`,

        f(x, m)_a = x_a cos(m θ_c) - x_b sin(m θ_c)
        f(x, m)_b = x_b cos(m θ_c) + x_a sin(m θ_c)

    so that `f(q, m)·f(k, n)` depends on the positions only through `m - n`,
    and the logits are `α_ij = f(q_i, i)·f(k_j, j) / sqrt(d_h)` (times
    `1/sqrt(2 d_h)` with `untied_scaling`, TUPE's scale when an untied
    correlation is added), plus the optional `attention_bias`.

    Pairs: this layer reuses keras-hub's `RotaryEmbedding`, which pairs
    dimension `c` with `c + d_h/2` (the two halves of the head, GPT-NeoX /
    Llama style); RoFormer's paper and code pair `2c` with `2c + 1`
    (interleaved). The two are the same function up to one fixed permutation
    of the head dimensions applied to both queries and keys, which the learned
    `W^Q`, `W^K` absorb: trained from scratch they are equivalent. Porting an
    interleaved checkpoint (RoFormer, GPT-J) needs its query and key kernels'
    output columns permuted per head (interleaved `2c → c`, `2c + 1 → c + d_h/2`);
    `tests/layers/test_position_encodings_beyond.py` checks that equivalence.

    The rotation happens before either attention path, so the fused
    `keras.ops.dot_product_attention` path (`attention_implementation`) works as
    for `UntiedPositionalAttention`. It runs in the compute dtype (keras-hub's
    choice: cos/sin of float32 angles, cast). Needs an even head size.

    Args:
        max_wavelength: int. The `base` of `θ_c`. Defaults to `10000`
            (RoFormer).
        num_heads, untied_scaling, attention_implementation, dropout,
        kernel_initializer, bias_initializer: as in `UntiedPositionalAttention`.

    Call arguments and output: as in `PositionalAttentionBase`.

    Example:
    >>> attention = RotaryPositionalAttention(num_heads=4, untied_scaling=False)
    >>> attention(keras.ops.ones((2, 10, 64))).shape
    (2, 10, 64)

    Reference:
        Su, Lu, Pan, Murtadha, Wen, Liu. RoFormer: Enhanced Transformer with
        Rotary Position Embedding. arXiv:2104.09864.
    """

    def __init__(self, num_heads, max_wavelength=10000, **kwargs):
        super().__init__(num_heads, **kwargs)
        if not isinstance(max_wavelength, (int, float)) or max_wavelength <= 1:
            raise ValueError(
                "`max_wavelength` must be a number > 1. "
                f"Received: max_wavelength={max_wavelength!r}"
            )
        self.max_wavelength = max_wavelength

    def build_positional(self, hidden_dim):
        check_rotary_head_dim(self.head_dim, hidden_dim, self.num_heads)
        # Axes of the (B, n, h, d_h) queries and keys.
        self.rotary_embedding = keras_hub.layers.RotaryEmbedding(
            max_wavelength=self.max_wavelength,
            sequence_axis=1,
            feature_axis=-1,
            dtype=self.dtype_policy,
            name="rotary_embedding",
        )

    def position_query_key(self, query, key):
        return self.rotary_embedding(query), self.rotary_embedding(key)  # (B, n, h, d_h) each

    def get_config(self):
        config = super().get_config()
        config["max_wavelength"] = self.max_wavelength
        return config
