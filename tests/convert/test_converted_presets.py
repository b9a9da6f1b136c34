"""Converted checkpoints used like any preset: fine-tuned, exported to the TF-Hub encoder API.

The exported SavedModels are compared with the papers' own outputs (the reference
checkpoints' saved hidden states), not with keras_tupe's.
"""

import os
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

import keras_tupe  # noqa: F401  (registers the family with keras-hub)
from keras_tupe.convert import convert_fairseq, convert_huggingface
from keras_tupe.export import export_encoder

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
REFERENCE = DATA_DIR / "reference_checkpoints"
ATOL = 1e-5

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not REFERENCE.is_dir(), reason=f"no reference checkpoints at {REFERENCE}"),
]


def exported_sequence_output(model, export_dir, token_ids, padding_mask, segment_ids):
    path = export_encoder(model, str(export_dir))
    loaded = tf.saved_model.load(path)
    outputs = loaded.signatures["serving_default"](
        input_word_ids=tf.constant(token_ids, tf.int32),
        input_mask=tf.constant(padding_mask, tf.int32),
        input_type_ids=tf.constant(segment_ids, tf.int32),
    )
    return outputs["sequence_output"].numpy()


def test_converted_huang_m4_exports_with_the_papers_outputs(tmp_path):
    preset = convert_huggingface(
        REFERENCE / "hf" / "relative_key_query" / "bert_for_masked_lm", tmp_path / "preset")
    masked_lm = keras_hub.models.MaskedLM.from_preset(preset)
    hf = REFERENCE / "hf"
    got = exported_sequence_output(
        masked_lm, tmp_path / "export",
        np.load(hf / "input_ids.npy"), np.load(hf / "attention_mask.npy"),
        np.load(hf / "token_type_ids.npy"))
    want = np.load(hf / "relative_key_query" / "last_hidden_state_fp32.npy")
    np.testing.assert_allclose(got, want, atol=ATOL, rtol=0)


def test_converted_tupe_r_exports_with_the_authors_outputs(tmp_path):
    tupe = REFERENCE / "tupe"
    preset = convert_fairseq(tupe / "tupe_r" / "checkpoint_fp16.pt", tmp_path / "preset",
                             dictionary=tupe / "dict.txt")
    backbone = keras_hub.models.Backbone.from_preset(preset)
    tokens = np.load(tupe / "input_tokens.npy")
    got = exported_sequence_output(backbone, tmp_path / "export", tokens,
                                   (tokens != 1).astype("int32"), np.zeros_like(tokens))
    np.testing.assert_allclose(got, np.load(tupe / "tupe_r" / "hidden_fp32.npy"),
                               atol=ATOL, rtol=0)


def test_converted_relative_bert_fine_tunes_on_raw_strings(tmp_path):
    preset = convert_huggingface(
        REFERENCE / "hf" / "relative_key" / "bert_model", tmp_path / "preset")
    classifier = keras_hub.models.TextClassifier.from_preset(preset, num_classes=2)
    before = {w.path: keras.ops.convert_to_numpy(w) for w in classifier.backbone.trainable_weights}
    x = ["the city was new", "a state university", "the first time", "which school"] * 2
    y = np.array([1, 0, 1, 0] * 2)
    history = classifier.fit(x=x, y=y, batch_size=4, epochs=2, verbose=0)
    losses = history.history["loss"]
    assert np.all(np.isfinite(losses))
    moved = [path for path, value in before.items()
             if not np.array_equal(value, keras.ops.convert_to_numpy(
                 next(w for w in classifier.backbone.trainable_weights if w.path == path)))]
    # Every encoder weight takes part (the relative tables included), so all move.
    assert any("relative_embeddings" in path for path in moved)
    assert len(moved) == len(before), sorted(set(before) - set(moved))
