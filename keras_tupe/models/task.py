"""The base of keras_tupe's tasks, and the per-replica XLA training step it runs."""


import keras

from keras_tupe.models.preset_folders import StagedPresetSaving
from keras_tupe.models.saving import (
    WholeWeightsFiles,
    absent_optimizer_state_expected,
    without_training_state,
)
from keras_tupe.models.saving import write_weights
from keras_tupe.models.tupe_backbone import without_unused_segment_ids

_TENSORFLOW = keras.backend.backend() == "tensorflow"
if _TENSORFLOW:  # TensorFlow is optional: the per-replica step is tf.distribute's alone
    import tensorflow as tf
    # Private: Keras has no public inverse of its per-replica loss scaling.
    from keras.src.losses.loss import unscale_loss_for_distribution


class PerReplicaXLATrainStep:
    """Mixed in before a Keras model class: its training step is XLA-compiled per replica.

    Keras 3 jit-compiles the whole distributed step, `strategy.run` and the
    cross-replica reduction included, which fails with two or more replicas
    ("Trying to access resource .../replica_1"), and `jit_compile="auto"`
    silently turns XLA off under tf.distribute. With `jit_compile=True` and
    several replicas, this step instead compiles only each replica's forward
    and backward pass with XLA and leaves the all-reduce, the (aggregated)
    clipping and the optimizer update outside, in the replica context. With
    one replica Keras compiles the whole step, update included, as usual.

    The loss inside a replica is scaled by `1 / num_replicas` for the
    gradient sum; the reported loss is unscaled, so a step on a global batch
    reports the same loss under every strategy.

    On other backends (JAX) Keras's own step runs, and multi-device data
    parallelism is `keras.distribution.DataParallel`.
    """

    def compile(self, *args, jit_compile="auto", **kwargs):
        # tf.distribute exists on the TensorFlow backend only.
        strategy = getattr(self, "distribute_strategy", None)
        replicas = strategy.num_replicas_in_sync if strategy is not None else 1
        self.xla_per_replica = jit_compile is True and _TENSORFLOW and replicas > 1
        self._replica_step = None
        super().compile(
            *args, jit_compile=False if self.xla_per_replica else jit_compile, **kwargs
        )

    def compile_from_config(self, config):
        # Keras skips this for models with a custom `compile()`; ours takes the
        # same arguments, so a reloaded `.keras` task comes back compiled, with
        # its optimizer state.
        self.compile(**keras.saving.deserialize_keras_object(config))
        if self.built:
            self.optimizer.build(self.trainable_variables)

    # The TensorFlow trainer's steps. Other backends keep Keras's own (the JAX
    # trainer's `train_step(state, data)` is stateless; tf.distribute is TF-only).
    if _TENSORFLOW:

        def train_step(self, data):
            if not getattr(self, "xla_per_replica", False):
                return self._multiworker_safe(super().train_step(data))
            x, y, sample_weight = keras.utils.unpack_x_y_sample_weight(data)
            if self._replica_step is None:
                self._replica_step = tf.function(
                    self._forward_backward, jit_compile=True, reduce_retracing=True
                )
            loss, y_pred, gradients = self._replica_step(x, y, sample_weight)
            batch_size = tf.shape(tf.nest.flatten(x)[0])[0]
            # Private: the trainer's loss tracker (what `fit` logs as `loss`) has no
            # public handle; the step below replaces `train_step`, which feeds it.
            self._loss_tracker.update_state(
                unscale_loss_for_distribution(loss), sample_weight=batch_size
            )
            # The optimizer all-reduces (sums) the gradients, clips the aggregate
            # and updates the mirrored variables, outside XLA.
            self.optimizer.apply_gradients(zip(gradients, self.trainable_weights))
            return self._multiworker_safe(
                self.compute_metrics(x, y, y_pred, sample_weight=sample_weight)
            )

        def test_step(self, data):
            return self._multiworker_safe(super().test_step(data))

        def _multiworker_safe(self, logs):
            # Under MultiWorkerMirroredStrategy Keras reduces every logged value
            # with `strategy.reduce("MEAN", v, axis=0)`, which fails on the scalar
            # metric results ("Invalid reduction dimension 0 for input with 0
            # dimensions"). The results are already synchronized across replicas,
            # so shape (1,) makes that reduction return the same value.
            if not isinstance(self.distribute_strategy, tf.distribute.MultiWorkerMirroredStrategy):
                return logs
            return {name: tf.reshape(value, [1]) for name, value in logs.items()}

        def _maybe_symbolic_build(self, iterator=None, data_batch=None):
            # Keras learns the batch shapes by reducing the first (distributed)
            # batch across replicas; MultiWorkerMirroredStrategy cannot reduce a
            # dict ("Attempt to convert a value ({'token_ids': PerReplica...}
            # with an unsupported type dict"). One replica's local batch has the
            # same structure, which is all the symbolic build needs.
            # Private: Keras's symbolic-build hook and the strategy it holds; no public
            # route lets a model choose the batch it is built from.
            if iterator is not None and self._distribute_strategy is not None:
                for _, _, batches in iterator:
                    data_batch = tf.nest.map_structure(
                        lambda x: self.distribute_strategy.experimental_local_results(x)[0]
                        if isinstance(x, tf.distribute.DistributedValues)
                        else x,
                        next(batches),
                    )
                    break
                iterator = None
            return super()._maybe_symbolic_build(iterator=iterator, data_batch=data_batch)

        def _forward_backward(self, x, y, sample_weight):
            with tf.GradientTape() as tape:
                y_pred = self(x, training=True)
                # Private: `compute_loss` with the trainer's bookkeeping (tracked
                # losses, `training`), as Keras's own `train_step` calls it.
                loss = self._compute_loss(
                    x=x, y=y, y_pred=y_pred, sample_weight=sample_weight, training=True
                )
                scaled = self.optimizer.scale_loss(loss)
            return loss, y_pred, tape.gradient(scaled, self.trainable_weights)


class TupeTask(PerReplicaXLATrainStep, WholeWeightsFiles, StagedPresetSaving):
    """Mixed in before a keras-hub task class: what every keras_tupe task adds to it.

    - its training step is XLA-compiled per replica (`PerReplicaXLATrainStep`);
    - `save_to_preset` writes through `write_preset_folder` (`StagedPresetSaving`)
      and leaves the optimizer's state out (`without_training_state`);
    - its weights files are made in memory and written whole (`WholeWeightsFiles`,
      and `save_task_weights`);
    - `load_task_weights` does not warn about that absent state;
    - `fit_preprocessor` (called by each text task's `__init__`) gives a backbone
      without a segment embedding a preprocessor without `segment_ids`, and refuses
      a preprocessor whose `sequence_length` exceeds an absolute encoder's position
      table (`check_preprocessor_length`);
    - a batch holding `segment_ids` is taken by a task whose backbone has no
      segment embedding, the values ignored (`without_unused_segment_ids`).
    """

    def call(self, inputs, training=None, mask=None):
        return super().call(without_unused_segment_ids(self, inputs), training=training,
                            mask=mask)

    def fit_preprocessor(self):
        """The preprocessor made to fit the backbone: no `segment_ids` where it takes none
        (a preset written before that flag existed too); its length checked."""
        preprocessor = getattr(self, "preprocessor", None)
        if preprocessor is not None and not self.backbone.num_segments:
            preprocessor.segment_ids = False
        self.check_preprocessor_length()

    def check_preprocessor_length(self):
        preprocessor = getattr(self, "preprocessor", None)
        length = getattr(preprocessor, "sequence_length", None)
        if length is None:
            return
        try:
            self.backbone.check_sequence_length(length)
        except ValueError as error:
            raise ValueError(
                f"The preprocessor's sequence_length={length} exceeds this encoder's "
                f"absolute position table ({self.backbone.max_sequence_length} rows). Pass a "
                f"shorter one, e.g. `{type(self).__name__}.from_preset(preset, ..., "
                f"preprocessor={type(preprocessor).__name__}.from_preset(preset, "
                f"sequence_length={self.backbone.max_sequence_length}))`, or set "
                "`preprocessor.sequence_length` before building the task."
            ) from error

    def save_to_preset(self, preset_dir, max_shard_size=10, overwrite=False):
        """Writes the task, its backbone and its preprocessor into `preset_dir`, without
        the optimizer's state (`write_preset_folder`: refused where a saved model is,
        unless `overwrite`)."""
        with without_training_state(self):
            return super().save_to_preset(preset_dir, max_shard_size=max_shard_size,
                                          overwrite=overwrite)

    def save_task_weights(self, filepath):
        """keras-hub's: the weights outside the backbone, written by `write_weights`."""
        if not self.has_task_weights():
            raise ValueError(f"Task {self.name} has no weights outside its backbone; "
                             "`save_task_weights()` has nothing to save.")
        # `_flatten_layers`, as keras-hub's own `save_task_weights` skips the backbone.
        write_weights(self, filepath, objects_to_skip=list(self.backbone._flatten_layers()))

    def load_task_weights(self, filepath):
        """keras-hub's, without the optimizer warning of `load_saved_model` (same cause)."""
        with absent_optimizer_state_expected():
            super().load_task_weights(filepath)
