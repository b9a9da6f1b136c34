"""The grid's one call into Keras outside its documented API, held to what the grid assumes.

`keras_tupe.grid.GridTrainer` differentiates `Model.compute_loss_and_updates` (what Keras's
JAX trainer runs in `fit`: the task's own loss, its metrics state, loss scaling) with
`jax.value_and_grad(..., has_aux=True)`, passes it `(trainable, non_trainable, metrics, x, y,
sample_weight, training=..., optimizer_variables=...)` and unpacks `(scaled loss, (loss,
y_pred, non_trainable, metrics))`. Keras documents `stateless_call` but not this method; the
day its signature or result changes, this test fails before a grid trains on a wrong loss.
"""

import inspect

import numpy as np
import pytest

pytestmark = pytest.mark.jax


def test_compute_loss_and_updates_takes_and_returns_what_the_grid_uses():
    import jax
    import keras

    assert keras.backend.backend() == "jax"  # the `jax` phase runs it under JAX
    assert list(inspect.signature(keras.Model.compute_loss_and_updates).parameters) == [
        "self", "trainable_variables", "non_trainable_variables", "metrics_variables", "x",
        "y", "sample_weight", "training", "optimizer_variables"]

    model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(2),
                              keras.layers.BatchNormalization()])
    model.compile(optimizer=keras.optimizers.SGD(0.1), loss="mse", metrics=["mae"])
    model.optimizer.build(model.trainable_variables)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(4, 3)).astype("float32")
    y = rng.normal(size=(4, 2)).astype("float32")
    weight = np.array([1.0, 0.5, 2.0, 0.0], "float32")
    values = lambda variables: [v.value for v in variables]  # noqa: E731
    grad_fn = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
    (scaled, (loss, y_pred, non_trainable, metrics)), grads = grad_fn(
        values(model.trainable_variables), values(model.non_trainable_variables),
        values(model.metrics_variables), x, y, weight, training=True,
        optimizer_variables=values(model.optimizer.variables))

    # The reference, in NumPy float64: Dense, then BatchNormalization in training mode (the
    # batch's statistics; gamma 1, beta 0, epsilon 1e-3), then Keras's weighted mean of the
    # squared error ("sum_over_batch_size": the weighted sum over the batch size).
    kernel, bias = (np.asarray(v, np.float64) for v in model.layers[0].weights)
    dense = x.astype(np.float64) @ kernel + bias
    mean, variance = dense.mean(0), dense.var(0)
    out = (dense - mean) / np.sqrt(variance + 1e-3)
    want = (((out - y) ** 2).mean(1) * weight).sum() / len(x)
    np.testing.assert_allclose(loss, want, rtol=1e-5)
    np.testing.assert_allclose(scaled, want, rtol=1e-5)  # SGD scales no loss
    np.testing.assert_allclose(y_pred, out, rtol=1e-4, atol=1e-5)
    # The new non-trainable state is the step's: BatchNormalization's moving mean moved.
    moving_mean = [i for i, v in enumerate(model.non_trainable_variables)
                   if v.path.endswith("moving_mean")]
    assert len(non_trainable) == len(model.non_trainable_variables) and moving_mean
    np.testing.assert_allclose(non_trainable[moving_mean[0]], 0.01 * mean, rtol=1e-4, atol=1e-7)
    assert len(metrics) == len(model.metrics_variables)
    assert [g.shape for g in grads] == [tuple(v.shape) for v in model.trainable_variables]
    # The kernel's gradient, by central differences of the float64 reference's loss.
    step, numeric = 1e-4, np.zeros_like(kernel)
    for i, j in np.ndindex(kernel.shape):
        for sign in (1, -1):
            moved = kernel.copy()
            moved[i, j] += sign * step
            d = x.astype(np.float64) @ moved + bias
            o = (d - d.mean(0)) / np.sqrt(d.var(0) + 1e-3)
            numeric[i, j] += sign * (((o - y) ** 2).mean(1) * weight).sum() / len(x) / (2 * step)
    np.testing.assert_allclose(grads[0], numeric, rtol=1e-3, atol=1e-5)
