"""A fine-tuned classifier as a TensorFlow Serving model that takes raw strings."""

import tensorflow as tf

from keras_tupe.data.packing import pack_segments
from keras_tupe.export.encoder import _jsonable
from keras_tupe.export.preprocessor import _tokenizer_and_specials
from keras_tupe.export.versions import save_version
from keras_tupe.models.saving import arrays_bytes
from keras_tupe.models.tupe_bpe_tokenizer import TupeBpeTokenizer


def classifier_module(classifier, vocabulary_file, seq_length=128, num_segments=1,
                      lowercase=True, label_names=None):
    """Strings in, probabilities out: tokenizer + packing + `TupeTextClassifier` in one graph.

    The `serving_default` signature takes `[batch]` strings: `sentence` for single
    sentence tasks, `sentence1` and `sentence2` for pairs. It returns `probabilities`
    `(batch, classes)` (softmax of the float32 logits), `class_id` `(batch,)` int32 and,
    with `label_names`, `label` `(batch,)` strings; a regressor (`num_classes=1`)
    returns `score` `(batch,)`. Texts longer than `seq_length` tokens are truncated
    (round-robin for pairs), as in fine-tuning.
    """
    if num_segments not in (1, 2):
        raise ValueError(f"`num_segments` must be 1 (sentences) or 2 (pairs). "
                         f"Received: {num_segments!r}")
    regression = classifier.num_classes == 1
    if label_names is not None and (regression or len(label_names) != classifier.num_classes):
        raise ValueError(f"`label_names` must name the {classifier.num_classes} classes of the "
                         f"classifier (none for a regressor). Received: {label_names!r}")
    classifier.backbone.check_sequence_length(seq_length)
    tokenize, (cls_id, sep_id, pad_id) = _tokenizer_and_specials(vocabulary_file, lowercase)
    root = tf.__internal__.tracking.AutoTrackable()
    root.variables = [v.value for v in classifier.variables]
    root.vocab_file = tf.saved_model.Asset(vocabulary_file)
    names = ["sentence"] if num_segments == 1 else ["sentence1", "sentence2"]

    def predict(*texts):
        inputs = pack_segments([tokenize(text) for text in texts], seq_length,
                               cls_id, sep_id, pad_id)
        logits = tf.cast(classifier(inputs, training=False), tf.float32)
        if regression:
            return {"score": logits}
        probabilities = tf.nn.softmax(logits, axis=-1)
        class_id = tf.argmax(logits, axis=-1, output_type=tf.int32)
        outputs = {"probabilities": probabilities, "class_id": class_id}
        if label_names is not None:
            outputs["label"] = tf.gather(tf.constant(list(label_names)), class_id)
        return outputs

    serve = tf.function(predict, input_signature=[
        tf.TensorSpec([None], tf.string, name=name) for name in names])
    root.predict = serve
    return root, {"serving_default": serve}


def export_classifier(classifier, vocabulary_file, export_dir, seq_length=128, num_segments=1,
                      lowercase=True, label_names=None, version=None, overwrite=False):
    """Exports `classifier_module` for TensorFlow Serving as `export_dir/<version>/`.

    `saved_model_cli show --dir PATH --all` describes it; `saved_model_cli run --dir PATH
    --tag_set serve --signature_def serving_default --input_exprs 'sentence=["..."]'`
    answers. Loading it in Python needs `import tensorflow_text` first.

    Returns:
        The path of the written version.
    """
    tokenizer = getattr(getattr(classifier, "preprocessor", None), "tokenizer", None)
    if isinstance(tokenizer, TupeBpeTokenizer):
        # Its Moses + BPE pipeline is Python (tf.py_function), which a SavedModel
        # cannot hold; the serving model would need TensorFlow-only string ops.
        raise ValueError(
            "This classifier tokenizes with TupeBpeTokenizer (the TUPE authors' Moses + BPE "
            "pipeline, Python code), which cannot go into a string-input SavedModel. Export "
            "the encoder instead (training.export encoder) and tokenize beside it, or use a "
            "WordPiece vocabulary (TupeTokenizer) for a model that serves raw strings."
        )
    root, signatures = classifier_module(classifier, vocabulary_file, seq_length, num_segments,
                                         lowercase, label_names)
    metadata = {"inputs": [spec.name for spec in signatures["serving_default"].input_signature],
                "seq_length": seq_length, "lowercase": lowercase,
                "num_classes": classifier.num_classes,
                "label_names": None if label_names is None else list(label_names),
                "backbone_config": _jsonable(classifier.backbone.get_config())}
    return save_version(export_dir, root, signatures, "classifier", metadata, version, overwrite,
                        needed=arrays_bytes(classifier.weights))
