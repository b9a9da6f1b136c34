"""DeBERTa's relative position embeddings, one table shared by every layer."""

import keras
from keras import ops

from keras_tupe.layers.utils import clone_initializer, initializer_or_default


@keras.saving.register_keras_serializable(package="keras_tupe")
class DisentangledRelativeEmbedding(keras.layers.Layer):
    """The LayerNorm-ed relative embeddings `P = LN(R)`, `R ∈ R^{2k × d}`.

    DeBERTa (He et al., ICLR 2021, §3.1; DeBERTaV3 keeps it) learns one table
    of `2k` relative embeddings (`k` = `bucket_size`, the attention span) for
    the whole encoder; every layer projects it with its own `W^Q`, `W^K`
    (`DisentangledAttention`). Row `r` holds the bucketed distance `r - k`. As
    in keras-hub's `RelativeEmbedding` (and HF's DeBERTa-v2 with
    `norm_rel_ebd="layer_norm"`) the table goes through a LayerNorm before use.
    Computed once per forward pass; it does not depend on the input.

    Args:
        bucket_size: int `k`. The table has `2k` rows.
        layer_norm_epsilon: float. Defaults to `1e-7` (DeBERTa's).
        embeddings_initializer: initializer of the table. Defaults to a
            truncated normal with stddev 0.02.

    Call arguments:
        inputs: any tensor `(B, n, d)`; only its last axis (at build) is used.

    Returns:
        `(1, 2k, d)` in the compute dtype.

    Example:
    >>> embedding = DisentangledRelativeEmbedding(bucket_size=8)
    >>> embedding(keras.ops.zeros((2, 10, 64))).shape
    (1, 16, 64)

    Reference:
        He, Liu, Gao, Chen. DeBERTa: Decoding-enhanced BERT with Disentangled
        Attention. ICLR 2021.
    """

    def __init__(
        self, bucket_size, layer_norm_epsilon=1e-7, embeddings_initializer=None, **kwargs
    ):
        super().__init__(**kwargs)
        if not isinstance(bucket_size, int) or bucket_size < 2:
            raise ValueError(
                f"`bucket_size` must be an int >= 2. Received: bucket_size={bucket_size!r}"
            )
        self.bucket_size = bucket_size
        self.layer_norm_epsilon = layer_norm_epsilon
        self.embeddings_initializer = initializer_or_default(embeddings_initializer)

    def build(self, inputs_shape):
        self.hidden_dim = inputs_shape[-1]
        self.relative_embeddings = self.add_weight(
            name="relative_embeddings",
            shape=(2 * self.bucket_size, self.hidden_dim),
            initializer=clone_initializer(self.embeddings_initializer),
        )
        self.layer_norm = keras.layers.LayerNormalization(
            epsilon=self.layer_norm_epsilon,
            dtype=self.dtype_policy,
            name="relative_embeddings_layer_norm",
        )
        self.layer_norm.build((None, self.hidden_dim))
        self.built = True

    def call(self, inputs):
        table = ops.cast(self.relative_embeddings, self.compute_dtype)  # (2k, d)
        return self.layer_norm(table)[None]  # (1, 2k, d)

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(
            (1, 2 * self.bucket_size, inputs.shape[-1]), dtype=self.compute_dtype
        )

    def get_config(self):
        return {
            **super().get_config(),
            "bucket_size": self.bucket_size,
            "layer_norm_epsilon": self.layer_norm_epsilon,
            "embeddings_initializer": keras.initializers.serialize(self.embeddings_initializer),
        }
