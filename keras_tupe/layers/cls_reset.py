"""TUPE's untied [CLS] (Eq. 9)."""

import keras
from keras import ops


@keras.saving.register_keras_serializable(package="keras_tupe")
class ClsReset(keras.layers.Layer):
    """Replaces the positional correlation of [CLS] by learned per-head scalars.

    TUPE (Ke et al., ICLR 2021, Eq. 9): [CLS] is not a word at a position, so
    its position-only correlation with every token is reset:

        reset(v)_ij = θ1^h   if i = 0              (row 0, (0, 0) included)
                      θ2^h   if i ≠ 0 and j = 0    (column 0)
                      v_ij   otherwise

    `v` is the content-free term of one head (the untied correlation, plus the
    T5 bias for TUPE-R). One pair `θ1, θ2 ∈ R^h` serves the whole encoder. The
    result is float32 under every dtype policy, like its input.

    Args:
        num_heads: int. Number of attention heads.
        theta_initializer: initializer of θ1 and θ2. Defaults to `"zeros"`.

    Call arguments:
        inputs: float tensor `(B or 1, h, q_len, k_len)`, the positional term.

    Returns:
        float32 tensor of the same shape.

    Example:
    >>> ClsReset(num_heads=2)(keras.ops.ones((1, 2, 3, 3))).shape
    (1, 2, 3, 3)
    """

    def __init__(self, num_heads, theta_initializer="zeros", **kwargs):
        kwargs.setdefault("autocast", False)
        super().__init__(**kwargs)
        if num_heads < 1:
            raise ValueError(f"`num_heads` must be >= 1. Received: num_heads={num_heads}")
        self.num_heads = num_heads
        self.theta_initializer = keras.initializers.get(theta_initializer)

    def build(self, inputs_shape):
        if inputs_shape[-3] is not None and inputs_shape[-3] != self.num_heads:
            raise ValueError(
                f"ClsReset expects a positional term of shape (B, num_heads={self.num_heads}, "
                f"q_len, k_len). Received: shape {tuple(inputs_shape)}"
            )
        weight = dict(shape=(self.num_heads,), initializer=self.theta_initializer,
                      dtype=self.variable_dtype)
        self.cls_to_others = self.add_weight(name="cls_to_others", **weight)  # θ1
        self.others_to_cls = self.add_weight(name="others_to_cls", **weight)  # θ2
        self.built = True

    @property
    def decay_exempt_weights(self):
        """θ1 and θ2: the [CLS] reset's scalar logits, which take no weight decay.

        They replace whole rows and columns of the positional term, as a bias
        would (TUPE Eq. 9); decay would pull [CLS]'s attention towards the flat
        logit 0. `keras_tupe.optimization.decay_exclusions` collects them.
        """
        return [self.cls_to_others, self.others_to_cls]

    def call(self, inputs):
        inputs = ops.cast(inputs, "float32")
        shape = ops.shape(inputs)
        is_cls_query = ops.arange(shape[-2])[:, None] == 0  # (q, 1)
        is_cls_key = ops.arange(shape[-1])[None, :] == 0  # (1, k)
        theta1 = ops.cast(self.cls_to_others, "float32")[:, None, None]  # (h, 1, 1)
        theta2 = ops.cast(self.others_to_cls, "float32")[:, None, None]
        # Row 0 wins over column 0, so (0, 0) gets θ1 as Eq. 9 says.
        return ops.where(is_cls_query, theta1, ops.where(is_cls_key, theta2, inputs))

    def compute_output_spec(self, inputs):
        return keras.KerasTensor(inputs.shape, "float32")

    def get_config(self):
        config = super().get_config()
        config.update(
            {
                "num_heads": self.num_heads,
                "theta_initializer": keras.initializers.serialize(self.theta_initializer),
            }
        )
        return config
