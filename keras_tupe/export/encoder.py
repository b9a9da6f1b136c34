"""The encoder as a TF-Hub-style reusable SavedModel (the TF-Hub BERT encoder API)."""

import json

import tensorflow as tf

from keras_tupe.export.tfhub_names import ENCODER_INPUTS, from_tfhub
from keras_tupe.export.versions import save_version
from keras_tupe.layers.utils import length_error_message
from keras_tupe.models import TupeBackbone, TupeMaskedLM
from keras_tupe.models.saving import arrays_bytes


def encoder_input_spec():
    """int32 `(batch, seq_length)` for each of the three inputs, any batch and length."""
    return {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in ENCODER_INPUTS}


def _encoder_outputs(backbone, inputs, training, layer_outputs=None):
    """TF-Hub's encoder outputs; `layer_outputs` is `backbone.layer_outputs()`."""
    inputs = {name: inputs[name] for name in ENCODER_INPUTS}
    limit = backbone.absolute_length_limit
    if limit is not None:
        # Fail on long inputs with the backbone's message before any op runs: the
        # length assertion gates the inputs, and the length is hidden from shape
        # inference (a reloaded function is re-specialized to each input shape, where
        # a static 'position table vs input' mismatch would fail first, unclearly).
        check = tf.debugging.assert_less_equal(
            tf.shape(inputs["input_word_ids"])[1], limit,
            message=length_error_message(limit, "absolute position table"))
        with tf.control_dependencies([check]):
            inputs = {name: tf.compat.v1.placeholder_with_default(value, [None, None])
                      for name, value in inputs.items()}
    outputs = (layer_outputs or backbone.layer_outputs())(from_tfhub(inputs), training=training)
    return {
        "sequence_output": outputs["sequence_output"],
        "pooled_output": outputs["pooled_output"],
        "default": outputs["pooled_output"],
        "encoder_outputs": list(outputs["encoder_outputs"]),
    }


def flatten_outputs(outputs):
    """Signature outputs are flat: `encoder_outputs` becomes `encoder_outputs_0`, ...."""
    flat = {key: value for key, value in outputs.items() if key != "encoder_outputs"}
    for index, value in enumerate(outputs.get("encoder_outputs", ())):
        flat[f"encoder_outputs_{index}"] = value
    return flat


def encoder_module(backbone, masked_lm=None):
    """The reusable-SavedModel API of TF-Hub's BERT encoders: `(root, signatures)`.

    - `__call__(inputs, training=False)`: `inputs` a dict of int32 `input_word_ids`,
      `input_mask`, `input_type_ids` `(batch, seq_length)`; returns `sequence_output`,
      `pooled_output`, `default` (= pooled) and the list `encoder_outputs`. With
      `training=True` dropout is active (for fine-tuning).
    - `variables`, `trainable_variables`, `regularization_losses` (empty).
    - `signatures["serving_default"]`: the same, flat (`encoder_outputs_0`, ...).
    - with `masked_lm`: `mlm(inputs, training=False)`, whose inputs also take int32
      `masked_lm_positions` `(batch, P)`; adds `mlm_logits` `(batch, P, vocab)`.
    """
    root = _reusable(backbone)
    call = root.__call__

    @tf.function(input_signature=list(encoder_input_spec().values()))
    def serve(input_word_ids, input_mask, input_type_ids):
        inputs = dict(input_word_ids=input_word_ids, input_mask=input_mask,
                      input_type_ids=input_type_ids)
        return flatten_outputs(call(inputs, training=False))

    if masked_lm is not None:
        root.mlm = _reusable(backbone, masked_lm)
    return root, {"serving_default": serve}


def export_encoder(model, export_dir, version=None, overwrite=False):
    """Exports a `TupeBackbone` (or a `MaskedLM`, adding `.mlm`) as `export_dir/<version>/`.

    The SavedModel follows the TF-Hub BERT encoder API (`encoder_module`); load it with
    `tf.saved_model.load`, `keras_tupe.hub.load_encoder` (Keras 3) or
    `tensorflow_hub.KerasLayer` (tf-keras). Encoders with an absolute position table
    refuse sequences longer than `max_sequence_length` at run time; relative-only ones
    take any length.

    Args:
        model: a `TupeBackbone`, or a `TupeMaskedLM` whose head is exported as `mlm`.
        export_dir: str. The model's directory; the SavedModel goes in a new version
            directory under it (`keras_tupe.export.write_version`).
        version: int or None (the next free version).
        overwrite: bool. Replace an existing `version`.

    Returns:
        The path of the written version.
    """
    if isinstance(model, TupeMaskedLM):
        backbone, masked_lm = model.backbone, model
    elif isinstance(model, TupeBackbone):
        backbone, masked_lm = model, None
    else:
        raise ValueError("export_encoder takes a TupeBackbone or a TupeMaskedLM. "
                         f"Received: {type(model).__name__}")
    root, signatures = encoder_module(backbone, masked_lm)
    metadata = {"mlm": masked_lm is not None, "backbone_config": _jsonable(backbone.get_config())}
    return save_version(export_dir, root, signatures, "encoder", metadata, version, overwrite,
                        needed=arrays_bytes((masked_lm or backbone).weights))


def _jsonable(config):
    return json.loads(json.dumps(config, default=str))


def _reusable(backbone, masked_lm=None):
    """An object with TF-Hub's `__call__(inputs, training)`, traced for both `training`
    values (the two calls TF-Hub makes), and the variables it reads; with `masked_lm`, the
    head's too (fine-tuning `mlm` trains both) and `mlm_logits` at `masked_lm_positions`."""
    models = [backbone] if masked_lm is None else [backbone, masked_lm]
    module = _with_variables(tf.__internal__.tracking.AutoTrackable(), models)
    layer_outputs = backbone.layer_outputs()
    spec = encoder_input_spec()

    @tf.function
    def call(inputs, training=False):
        outputs = _encoder_outputs(backbone, inputs, training, layer_outputs)
        if masked_lm is None:
            return outputs
        logits = masked_lm.mlm_head(outputs["sequence_output"],
                                    mask_positions=inputs["masked_lm_positions"])
        return {**outputs, "mlm_logits": tf.cast(logits, tf.float32)}

    if masked_lm is not None:
        spec["masked_lm_positions"] = tf.TensorSpec([None, None], tf.int32,
                                                    name="masked_lm_positions")
    for training in (False, True):
        call.get_concrete_function(spec, training=training)
    module.__call__ = call
    return module


def _with_variables(trackable, models):
    """`variables`, `trainable_variables`, `regularization_losses`: what TF-Hub reads.

    A `TupeMaskedLM` freezes its backbone's pooler (the masked-LM loss never reaches
    it); the exported encoder is for fine-tuning, where the pooler trains, so its
    variables are listed as trainable.
    """
    def unique(variables):  # in order, each once
        return list({id(v.value): v.value for v in variables}.values())

    trackable.variables = unique(v for model in models for v in model.variables)
    pooler = [v for model in models if hasattr(model, "pooled_dense")
              for v in model.pooled_dense.variables]
    trackable.trainable_variables = unique(
        [v for model in models for v in model.trainable_variables] + pooler)
    trackable.regularization_losses = []
    return trackable
