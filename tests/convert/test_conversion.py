"""Huang's drop-in: method-4 tables added to absolute encoders reproduce their outputs."""

import keras
import keras_hub
import numpy as np
import pytest

from keras_tupe.models import TupeBackbone
from keras_tupe.models.conversion import add_relative_method4, from_keras_hub_bert, keras_hub_inputs
from tests.reference_params import assert_close, randomize_weights
from tests.models.test_backbone import make_inputs

INPUTS = make_inputs(3, 24, real=17, vocabulary_size=1000)


def _relative_tables(backbone):
    return [block.attention.relative_embeddings for block in backbone.transformer_layers]


def test_keras_tupe_bert_a_gains_zero_method4_tables_with_same_outputs():
    source = TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=1000)
    randomize_weights(source)
    converted = add_relative_method4(source, max_relative_distance=16)
    assert converted.relative_position == "method4" and converted.absolute_position == "added"
    assert all(np.all(t.numpy() == 0) for t in _relative_tables(converted))
    want, got = source(INPUTS), converted(INPUTS)
    assert_close(got["sequence_output"], want["sequence_output"].numpy())
    assert_close(got["pooled_output"], want["pooled_output"].numpy())
    # Not a no-op: with non-zero tables the outputs change.
    _relative_tables(converted)[0].assign(np.full(_relative_tables(converted)[0].shape, 0.5))
    assert np.max(np.abs(converted(INPUTS)["sequence_output"] - want["sequence_output"])) > 1e-3


def test_keras_hub_bert_converts_with_same_outputs():
    bert = keras_hub.models.BertBackbone(vocabulary_size=1000, num_layers=2, num_heads=4,
                                         hidden_dim=64, intermediate_dim=128,
                                         max_sequence_length=128)
    randomize_weights(bert)
    converted = from_keras_hub_bert(bert, max_relative_distance=32)
    assert converted.relative_position == "method4"
    want, got = bert(keras_hub_inputs(INPUTS)), converted(INPUTS)
    assert_close(got["sequence_output"], want["sequence_output"].numpy())
    assert_close(got["pooled_output"], want["pooled_output"].numpy())


def test_converted_encoder_trains_its_relative_tables(tmp_path):
    source = TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=1000)
    converted = add_relative_method4(source)
    path = tmp_path / "converted.keras"
    converted.save(path)
    restored = keras.saving.load_model(path)
    from keras_tupe.models import TupeTextClassifier

    classifier = TupeTextClassifier(restored, num_classes=2)
    classifier.compile(optimizer=keras.optimizers.Adam(1e-2), jit_compile=True)
    classifier.train_on_batch(INPUTS, np.array([0, 1, 1]))
    assert any(np.any(t.numpy() != 0) for t in _relative_tables(restored))


def test_drop_in_refuses_encoders_that_are_not_absolute():
    with pytest.raises(ValueError, match="absolute positions only.*relative_position='t5_bias'"):
        add_relative_method4(TupeBackbone.from_preset("bert_r_tiny"))
