"""Optimization as in TUPE Table 1: AdamW, linear warm-up and decay, clipping.

Two Keras 3 traps are handled here:

- `global_clipnorm` clips each replica's gradient before the all-reduce under
  tf.distribute, so the applied step is not clipped to the norm asked for.
  `AggregatedClippingMixin` clips the global norm of the *aggregated* gradient,
  once, right after the all-reduce.
- `exclude_from_weight_decay(var_names=...)` matches short variable names, so
  BERT's `"LayerNorm"` patterns match nothing. `decay_exclusions` lists the
  variables themselves.
"""

import keras
import keras_hub
from keras import ops


@keras.saving.register_keras_serializable(package="keras_tupe")
class LinearWarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warm-up to `peak_learning_rate`, then linear decay to 0.

    The update at optimizer step `s` (0-based) uses

        peak * (s + 1) / warmup_steps                     if s < warmup_steps
        peak * (total_steps - s) / (total_steps - warmup_steps)   otherwise

    so no step is wasted at rate 0 and the rate reaches 0 after the last step.

    Args:
        peak_learning_rate: float. TUPE pre-training: `1e-4`.
        warmup_steps: int. TUPE: 1% of the steps; fine-tuning: 6%.
        total_steps: int. Steps of the whole run.
    """

    def __init__(self, peak_learning_rate, warmup_steps, total_steps):
        if total_steps < 1 or not 0 <= warmup_steps < total_steps or peak_learning_rate <= 0:
            raise ValueError(
                "Need peak_learning_rate > 0 and 0 <= warmup_steps < total_steps. Received: "
                f"peak_learning_rate={peak_learning_rate}, warmup_steps={warmup_steps}, "
                f"total_steps={total_steps}"
            )
        self.peak_learning_rate = peak_learning_rate
        self.warmup_steps = warmup_steps
        self.total_steps = total_steps

    def __call__(self, step):
        return self.peak_learning_rate * self.fraction(step)

    def fraction(self, step, steps=None):
        """The rate at `step` as a fraction of the peak (a grid scales it by each
        member's peak: `keras_tupe.grid`).

        `steps`: None, or `(warmup_steps, total_steps)` as float32 values (tensors) in place
        of the schedule's own numbers: the same arithmetic, with the schedule an input of a
        compiled program rather than constants in it, so one program serves any schedule
        (`keras_tupe.grid`: a calibration's program is the run's, from the compilation
        cache). Integers below 2**24 are exact in float32, so the values are the same.
        """
        step = ops.cast(step, "float32")
        if steps is None:
            warmup_steps, total_steps = self.warmup_steps, self.total_steps
            warmup = (step + 1.0) / max(warmup_steps, 1)
        else:
            warmup_steps, total_steps = steps
            warmup = (step + 1.0) / ops.maximum(warmup_steps, 1.0)
        decay = (total_steps - step) / (total_steps - warmup_steps)
        fraction = ops.where(step < warmup_steps, warmup, decay)
        return ops.clip(fraction, 0.0, 1.0)

    def get_config(self):
        return {
            "peak_learning_rate": self.peak_learning_rate,
            "warmup_steps": self.warmup_steps,
            "total_steps": self.total_steps,
        }


def clip_by_global_norm(gradients, clip_norm):
    """Scales `gradients` by `clip_norm / norm` when their global norm exceeds it."""
    present = [g for g in gradients if g is not None]
    norm = ops.sqrt(ops.sum(ops.stack([ops.sum(ops.square(ops.cast(g, "float32")))
                                       for g in present])))
    scale = ops.minimum(1.0, clip_norm / ops.maximum(norm, 1e-12))
    return [None if g is None else g * ops.cast(scale, g.dtype) for g in gradients]


class AggregatedClippingMixin:
    """Clips the global norm of the gradient *after* the cross-replica sum.

    Mix in before a Keras optimizer class. `global_clipnorm` keeps its meaning
    (the global norm of the gradient that is applied), but on the TensorFlow
    backend it is applied in `_all_reduce_sum_gradients`, after the all-reduce,
    rather than by Keras on each replica's partial gradient. Outside
    tf.distribute the all-reduce is the identity, so the result is the same.
    Other backends (single device) use Keras's own clipping.
    """

    def __init__(self, *args, global_clipnorm=None, **kwargs):
        aggregated = global_clipnorm if keras.backend.backend() == "tensorflow" else None
        super().__init__(
            *args, global_clipnorm=None if aggregated else global_clipnorm, **kwargs
        )
        self.aggregated_clipnorm = aggregated

    def _all_reduce_sum_gradients(self, grads_and_vars):
        # Private hook of Keras's TensorFlow optimizer: the only place that sees the
        # all-reduced gradient before the update (no public hook exists there).
        grads_and_vars = super()._all_reduce_sum_gradients(grads_and_vars)
        if not self.aggregated_clipnorm:
            return grads_and_vars
        grads, variables = zip(*grads_and_vars)
        return list(zip(clip_by_global_norm(list(grads), self.aggregated_clipnorm), variables))

    def get_config(self):
        config = super().get_config()
        if self.aggregated_clipnorm:
            config["global_clipnorm"] = self.aggregated_clipnorm
        return config


@keras.saving.register_keras_serializable(package="keras_tupe")
class AdamW(AggregatedClippingMixin, keras.optimizers.AdamW):
    """`keras.optimizers.AdamW` whose `global_clipnorm` clips the aggregated gradient."""


def decay_exclusions(model):
    """The variables that must not be weight-decayed, found by what they are.

    A layer declares its own as `decay_exempt_weights` (keras_tupe's: the T5 bias table,
    the [CLS] reset's θ1/θ2, the scalar tables of Huang's methods 1 and 2), so a new layer
    needs no change here. Standard layers follow generic rules: LayerNorm scales and
    offsets, `Dense`/`EinsumDense` biases, the output bias of keras-hub's `MaskedLMHead`.
    Kernels, embeddings, position tables and the vector relative tables are decayed.
    """
    excluded = []
    # No public recursive walk in Keras 3 (`Model.layers` is the top level only).
    for layer in model._flatten_layers(include_self=True, recursive=True):
        if "decay_exempt_weights" in dir(layer):
            # Not getattr(..., default): an unbuilt layer's AttributeError must surface.
            excluded += list(layer.decay_exempt_weights)
        if isinstance(layer, keras.layers.LayerNormalization):
            excluded += [w for w in (layer.gamma, layer.beta) if w is not None]
        elif isinstance(layer, (keras.layers.Dense, keras.layers.EinsumDense)):
            if layer.bias is not None:
                excluded.append(layer.bias)
        elif isinstance(layer, keras_hub.layers.MaskedLMHead):
            excluded.append(_masked_lm_head_output_bias(layer))
    unique = {id(variable): variable for variable in excluded}
    return list(unique.values())


def _masked_lm_head_output_bias(layer):
    # The head keeps it privately (`_bias`); among its weights it is the one named
    # `output_bias` (its sublayers' are `kernel`, `bias`, `gamma`, `beta`).
    found = [w for w in layer.weights if w.name == "output_bias"]
    if len(found) != 1:
        raise ValueError(
            f"Expected one `output_bias` weight in MaskedLMHead {layer.name!r} (a built "
            f"keras-hub head). Received weights: {[w.path for w in layer.weights]}"
        )
    return found[0]


def create_optimizer(
    model,
    learning_rate,
    total_steps,
    warmup_steps,
    weight_decay=0.01,
    beta_1=0.9,
    beta_2=0.999,
    epsilon=1e-6,
    clip_norm=1.0,
):
    """AdamW with the paper's defaults and the right variables excluded from decay.

    Call it inside the distribution strategy's scope, after the model is built.
    """
    return adamw(model, LinearWarmupLinearDecay(learning_rate, warmup_steps, total_steps),
                 weight_decay, beta_1, beta_2, epsilon, clip_norm)


def adamw(model, learning_rate, weight_decay=0.01, beta_1=0.9, beta_2=0.999, epsilon=1e-6,
          clip_norm=1.0):
    """`AdamW` at `learning_rate` (a float or a schedule) with `model`'s decay exclusions."""
    optimizer = AdamW(
        learning_rate=learning_rate,
        weight_decay=weight_decay,
        beta_1=beta_1,
        beta_2=beta_2,
        epsilon=epsilon,
        global_clipnorm=clip_norm,
    )
    optimizer.exclude_from_weight_decay(var_list=decay_exclusions(model))
    return optimizer
