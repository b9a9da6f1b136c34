"""The shared layer test, in the spirit of keras-hub's `run_layer_test`."""

import keras
import numpy as np
from keras import ops


def _as_tuple(x):
    return tuple(x) if isinstance(x, (list, tuple)) else (x,)


def _symbolic(value):
    """A KerasTensor with dynamic batch and sequence axes for an array input."""
    value = np.asarray(value)
    shape = (None, None) + value.shape[2:] if value.ndim >= 2 else value.shape
    return keras.KerasTensor(shape, dtype=str(value.dtype))


def run_layer_test(
    layer_cls,
    init_kwargs,
    call_kwargs,
    expected_output_shape,
    expected_output_dtype="float32",
    mixed_output_dtype=None,
    symbolic_output_shapes=None,
):
    """Checks what every keras_tupe layer must do.

    - `get_config` round trip (also through Keras serialization);
    - eager call: output shapes and dtypes;
    - symbolic call with dynamic batch and sequence axes;
    - one jit-compiled (XLA) training step that changes the trainable weights;
    - `mixed_float16` and `mixed_bfloat16`: float32 variables, finite outputs in
      `mixed_output_dtype` (the compute dtype when `None`).

    Args:
        layer_cls: the layer class.
        init_kwargs: constructor arguments.
        call_kwargs: dict of call arguments (arrays); the first is the input.
        expected_output_shape: a shape, or a tuple of shapes for tuple outputs.
        expected_output_dtype: dtype of the float32 outputs.
        mixed_output_dtype: `None` (compute dtype) or a fixed dtype.
        symbolic_output_shapes: list of the expected shapes of the symbolic call.
    """
    shapes = (
        expected_output_shape
        if isinstance(expected_output_shape[0], tuple)
        else (expected_output_shape,)
    )

    # Config round trip.
    layer = layer_cls(**init_kwargs)
    config = layer.get_config()
    assert layer_cls.from_config(config).get_config() == config
    revived = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(layer))
    assert type(revived) is layer_cls and revived.get_config() == config

    # Eager call.
    outputs = _as_tuple(layer(**call_kwargs))
    assert layer.built
    assert [tuple(o.shape) for o in outputs] == [tuple(s) for s in shapes]
    for output in outputs:
        assert keras.backend.standardize_dtype(output.dtype) == expected_output_dtype
        assert np.all(np.isfinite(ops.convert_to_numpy(output)))

    # Symbolic call, dynamic batch and length.
    symbolic_inputs = {name: _symbolic(value) for name, value in call_kwargs.items()}
    symbolic = _as_tuple(layer_cls(**init_kwargs)(**symbolic_inputs))
    if symbolic_output_shapes is not None:
        assert [tuple(o.shape) for o in symbolic] == [tuple(s) for s in symbolic_output_shapes]

    _run_training_step(layer_cls, init_kwargs, call_kwargs)

    for policy in ("mixed_float16", "mixed_bfloat16"):
        mixed = layer_cls(**init_kwargs, dtype=policy)
        outputs = _as_tuple(mixed(**call_kwargs))
        dtype = mixed_output_dtype or mixed.compute_dtype
        for output in outputs:
            assert keras.backend.standardize_dtype(output.dtype) == dtype, policy
            assert np.all(np.isfinite(ops.convert_to_numpy(ops.cast(output, "float32"))))
        for weight in mixed.weights:
            assert keras.backend.standardize_dtype(weight.dtype) == "float32", weight.path


class LossModel(keras.Model):
    """Wraps a layer so `fit` can take one step on the mean square of its outputs."""

    def __init__(self, layer, **kwargs):
        super().__init__(**kwargs)
        self.inner = layer

    def call(self, inputs):
        outputs = _as_tuple(self.inner(**inputs))
        return ops.sum([ops.mean(ops.square(ops.cast(o, "float32"))) for o in outputs])


def _run_training_step(layer_cls, init_kwargs, call_kwargs):
    layer = layer_cls(**init_kwargs)
    model = LossModel(layer, name="loss_model")
    model.compile(
        optimizer=keras.optimizers.SGD(1.0),
        loss=lambda y_true, y_pred: y_pred,
        jit_compile=True,
    )
    batch = {name: np.asarray(value) for name, value in call_kwargs.items()}
    model(batch)  # build
    before = [ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert before, "the layer has no trainable weights"
    batch_size = len(next(iter(batch.values())))
    loss = model.train_on_batch(batch, np.zeros((batch_size,)))
    assert np.isfinite(loss)
    after = [ops.convert_to_numpy(w) for w in model.trainable_weights]
    assert any(not np.allclose(b, a) for b, a in zip(before, after)), "no weight was trained"
