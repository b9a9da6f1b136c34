"""Small helpers shared by the keras_tupe layers and backbones."""

import keras
from keras import ops

# Added to the logits of padded keys. Applied in float32 only (a float16 -1e9 overflows).
MASK_NEGATIVE = -1e9


def length_error_message(maximum, what):
    """The message of every "sequence too long for the absolute table" error."""
    return (
        f"The input sequence is longer than the {what} allows: this encoder has "
        f"an absolute position table of max_sequence_length={maximum} rows, so "
        f"sequences can have at most {maximum} tokens. Truncate the input, or "
        f"use an encoder with relative positions only (e.g. the `shaw` or "
        f"`huang_m4` presets), which accept any length."
    )


def check_sequence_length(length, maximum, what):
    """Raises a clear error when `length` exceeds an absolute position table.

    Static lengths are checked in Python at trace time. A dynamic length under a
    TensorFlow graph gets a runtime assertion with the same message, so a
    `tf.function` without a fixed shape still fails loudly rather than slicing the
    table short.

    Args:
        length: int, or a scalar tensor, the sequence length of the input.
        maximum: int, the number of rows of the absolute table.
        what: str, the name of the table for the message.
    """
    message = length_error_message(maximum, what)
    if isinstance(length, int):
        if length > maximum:
            raise ValueError(f"{message} Received: sequence length {length}.")
        return
    if keras.backend.backend() == "tensorflow":
        import tensorflow as tf

        if not tf.executing_eagerly():
            tf.debugging.assert_less_equal(
                tf.cast(length, "int32"), maximum, message=message
            )
            return
    if int(length) > maximum:  # Eager dynamic value (any backend).
        raise ValueError(f"{message} Received: sequence length {int(length)}.")


# How the random weights start, recorded in every pre-training run's `run_config.json`:
# "independent" (`clone_initializer`: each weight draws its own values, since commit
# 91812fc); runs before it are recorded as "shared" (some weights started equal).
INITIALIZATION = "independent"


def clone_initializer(initializer):
    """A new initializer with the same config, for one more weight.

    Keras 3 draws an unseeded initializer's seed when the object is made, so one
    object handed to several weights fills them all with the same numbers. Each
    weight gets its own clone (keras-hub's BERT does the same); a clone of an
    unseeded initializer draws a seed of its own, reproducible under
    `keras.utils.set_random_seed`.
    """
    initializer = keras.initializers.get(initializer)
    return initializer.__class__.from_config(initializer.get_config())


def initializer_or_default(initializer):
    """`keras.initializers.get(initializer)`; `None` is BERT's truncated normal, stddev 0.02."""
    return keras.initializers.get(initializer or keras.initializers.TruncatedNormal(stddev=0.02))


def head_dim(hidden_dim, num_heads):
    """`hidden_dim // num_heads`, or a clear error when the heads do not divide it."""
    if hidden_dim % num_heads:
        raise ValueError(
            "The hidden size must be divisible by `num_heads`. Received: "
            f"hidden size {hidden_dim}, num_heads={num_heads}"
        )
    return hidden_dim // num_heads


def relative_positions(query_length, key_length):
    """Relative distance `j - i` (key minus query), shape `(query_length, key_length)`."""
    query = ops.arange(query_length, dtype="int32")
    key = ops.arange(key_length, dtype="int32")
    return key[None, :] - query[:, None]  # (q, k)


def attention_mask_to_bias(padding_mask, negative=MASK_NEGATIVE):
    """`(B, k)` padding mask (1 = token) → additive float32 bias `(B, 1, 1, k)`."""
    keep = ops.cast(padding_mask, "float32")
    return (1.0 - keep)[:, None, None, :] * negative


def mask_negative(dtype):
    """The padding bias for a tensor that will be cast to `dtype`.

    `MASK_NEGATIVE`, except for float16, whose range ends at 65504: there
    -1e9 would become -inf, and a row of padding only would turn the softmax
    NaN. Keras's own attention uses the same 70 % of the float16 maximum.
    """
    if keras.backend.standardize_dtype(dtype) == "float16":
        return -0.7 * 65504.0
    return MASK_NEGATIVE


class Float32BiasCallMixin:
    """Keeps float32 keyword arguments (positional bias, projections) float32.

    Keras casts every floating call argument to the layer's compute dtype, which
    would round a float32 positional bias to float16 under mixed precision. A
    layer with this mixin turns that off and casts `inputs` itself in `call`;
    `__call__` still turns array inputs into tensors so shapes can be inferred.
    """

    def _keep_float32_arguments(self):
        self._convert_input_args = False

    def __call__(self, inputs, *args, **kwargs):
        if not (keras.backend.is_keras_tensor(inputs) or ops.is_tensor(inputs)):
            inputs = ops.convert_to_tensor(inputs, dtype=self.compute_dtype)
        return super().__call__(inputs, *args, **kwargs)
