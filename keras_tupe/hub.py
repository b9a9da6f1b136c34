"""Reuse of TF-Hub-style encoder SavedModels in Keras 3 (TensorFlow backend).

`tensorflow_hub.KerasLayer` is a tf-keras layer that Keras 3 refuses, and
`keras.layers.TFSMLayer` cannot be fine-tuned with Adam-type optimizers (its variables
keep `:0` in their names), takes no dict inputs through signatures and fails inside
functional models in `fit`. `SavedModelEncoder` wraps the reloaded object's own
`__call__(inputs, training=...)` and exposes its variables (the same `tf.Variable`s,
under clean names) as the layer's weights, so optimizers, checkpoints and
`tf.distribute` see them.
"""

import os
import re

import keras
import tensorflow as tf

# A TensorFlow route: keras_tupe.export requires the `tensorflow` extra at its door.
from keras_tupe.export.tfhub_names import ENCODER_INPUTS, to_tfhub

ENCODER_OUTPUTS = ("sequence_output", "pooled_output", "default", "encoder_outputs")


def _clean_name(name):
    """`encoder/layer_0/kernel:0` -> `encoder_layer_0_kernel` (a valid Keras name)."""
    return re.sub(r"[^A-Za-z0-9_.-]", "_", name.split(":")[0])


@keras.saving.register_keras_serializable(package="keras_tupe")
class SavedModelEncoder(keras.layers.Layer):
    """A TF-Hub-style encoder SavedModel as a Keras 3 layer that can be fine-tuned.

    Works with the SavedModels of `keras_tupe.export.export_encoder` and with other
    encoders of the TF-Hub BERT API (a `__call__(inputs, training)` plus `variables`
    and `trainable_variables`). Build it inside `strategy.scope()` to use it under
    `tf.distribute` (its variables are then created by the strategy).

    Args:
        handle: str. The SavedModel directory (a version directory,
            `saved_models/<name>/<version>`).
        trainable: bool. Fine-tune the encoder's weights. Defaults to `True`.
        output_key: str or None. Return only this output (e.g. `"pooled_output"`);
            None returns the whole dict.

    Call arguments:
        inputs: a dict of int `token_ids`, `padding_mask`, `segment_ids` (or TF-Hub's
            `input_word_ids`, `input_mask`, `input_type_ids`)
            `(batch, seq_length)`.
        training: bool. Dropout is active when `True` and the layer is trainable.
    """

    def __init__(self, handle, trainable=True, output_key=None, **kwargs):
        if keras.backend.backend() != "tensorflow":
            raise RuntimeError("SavedModelEncoder needs the TensorFlow backend (KERAS_BACKEND="
                               f"tensorflow); the backend is {keras.backend.backend()!r}.")
        if output_key is not None and output_key not in ENCODER_OUTPUTS:
            raise ValueError(f"`output_key` must be one of {ENCODER_OUTPUTS} or None. "
                             f"Received: output_key={output_key!r}")
        if not tf.saved_model.contains_saved_model(handle):
            raise FileNotFoundError(
                f"No SavedModel at {handle!r}. Pass a version directory such as "
                f"saved_models/<name>/1 (one with saved_model.pb); found: "
                f"{sorted(os.listdir(handle)) if os.path.isdir(handle) else 'nothing'}")
        super().__init__(trainable=trainable, **kwargs)
        self.handle = handle
        self.output_key = output_key
        self._loaded = tf.saved_model.load(handle)
        for attribute in ("variables", "trainable_variables"):
            if not hasattr(self._loaded, attribute):
                raise ValueError(f"{handle} is not a reusable encoder: it has no `{attribute}` "
                                 "(export it with keras_tupe.export.export_encoder).")
        trainable_ids = {id(v) for v in self._loaded.trainable_variables}
        for variable in self._loaded.variables:
            # The same tf.Variable under a Keras variable: updates reach the SavedModel's
            # functions; the clean name lets optimizers name their slots after it.
            self._track_variable(keras.Variable(
                initializer=variable, trainable=id(variable) in trainable_ids,
                dtype=variable.dtype, shape=variable.shape, name=_clean_name(variable.name)))
        self.built = True

    def call(self, inputs, training=False):
        # Keras-side inputs carry keras-hub's names (keras_tupe's data pipelines);
        # TF-Hub's names are taken too. The SavedModel speaks TF-Hub's.
        inputs = to_tfhub(inputs)
        missing = [name for name in ENCODER_INPUTS if name not in inputs]
        if missing:
            raise ValueError(
                "SavedModelEncoder takes token_ids, padding_mask and segment_ids (or TF-Hub's "
                f"input_word_ids, input_mask, input_type_ids). Missing: {missing}"
            )
        inputs = {name: tf.cast(inputs[name], tf.int32) for name in ENCODER_INPUTS}
        outputs = self._loaded(inputs, training=bool(training) and self.trainable)
        return outputs if self.output_key is None else outputs[self.output_key]

    def get_config(self):
        return {**super().get_config(), "handle": self.handle, "output_key": self.output_key}


def load_encoder(handle, trainable=True, output_key=None, name="encoder"):
    """Loads an encoder SavedModel as a Keras 3 layer (`SavedModelEncoder`).

    Example:
    >>> encoder = load_encoder("saved_models/tupe_r_mini_encoder/1")
    >>> inputs = {k: keras.Input((None,), dtype="int32", name=k)
    ...           for k in ("token_ids", "padding_mask", "segment_ids")}
    >>> logits = keras.layers.Dense(2)(encoder(inputs)["pooled_output"])
    >>> model = keras.Model(inputs, logits)
    """
    return SavedModelEncoder(handle, trainable=trainable, output_key=output_key, name=name)


def load_saved_model(handle):
    """`tf.saved_model.load` after registering the tensorflow-text ops that the
    preprocessor and classifier SavedModels use."""
    # Optional (the `tensorflow` extra); only the preprocessor and classifier need its ops.
    import tensorflow_text  # noqa: F401  (registers the WordPiece ops)

    return tf.saved_model.load(handle)
