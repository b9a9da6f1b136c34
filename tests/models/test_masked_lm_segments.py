"""A backbone without a segment embedding, and its tasks, take no `segment_ids`.

As keras-hub's `RobertaBackbone` and `RobertaMaskedLM`: the converted TUPE (fairseq)
presets have `num_segments=0`, and `MaskedLM.from_preset` (issue 49), then
`Backbone.from_preset` (issue 59) on one asked for `segment_ids` the model ignores.
"""

import warnings

import keras
import keras_hub
import numpy as np
import pytest

from keras_tupe import data
from keras_tupe.models import (
    TupeBackbone,
    TupeMaskedLM,
    TupeMaskedLMPreprocessor,
    TupeSpanQA,
    TupeSpanQAPreprocessor,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)
from tests.training.test_pretrain import ENWIKI_TRAIN

# The tasks below are fitted to check which inputs they take: they compile with SGD (Adam's
# update, traced for every weight, costs most of the graph) and without XLA on TensorFlow
# (fine-tuning trains them with AdamW under XLA, its default).
CHEAP_COMPILE = {"optimizer": "sgd", **({"jit_compile": False}
                                       if keras.backend.backend() == "tensorflow" else {})}


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return TupeTokenizer(vocabulary=data.train_vocabulary(str(ENWIKI_TRAIN), 200, str(path),
                                                          max_lines=300))


def _inputs(with_segments):
    x = {"token_ids": np.full((2, 16), 7, "int32"), "padding_mask": np.ones((2, 16), bool),
         "mask_positions": np.array([[1, 2, 3]] * 2, "int32")}
    if with_segments:
        x["segment_ids"] = np.ones((2, 16), "int32")
    return x


def test_a_masked_lm_without_segments_takes_no_segment_ids(tokenizer, tmp_path):
    backbone = TupeBackbone.from_preset("tupe_r_fairseq_tiny",
                                        vocabulary_size=tokenizer.vocabulary_size())
    # A preprocessor made as before the flag (segment_ids=True): the model corrects it.
    model = TupeMaskedLM(backbone, TupeMaskedLMPreprocessor(tokenizer, sequence_length=16))
    assert sorted(model.input) == ["mask_positions", "padding_mask", "token_ids"]
    x, _, _ = model.preprocessor(["the cat sat on the mat"])
    assert sorted(x) == ["mask_positions", "padding_mask", "token_ids"]

    model.save_to_preset(str(tmp_path / "preset"))
    loaded = keras_hub.models.MaskedLM.from_preset(str(tmp_path / "preset"))
    assert sorted(loaded.input) == ["mask_positions", "padding_mask", "token_ids"]
    assert loaded.preprocessor.segment_ids is False
    loaded.preprocessor = None  # token ids in
    logits = loaded.predict(_inputs(with_segments=False), verbose=0)
    assert logits.shape == (2, 3, tokenizer.vocabulary_size())
    # A batch made for every preset still holds them: accepted, and ignored.
    np.testing.assert_array_equal(loaded.predict(_inputs(with_segments=True), verbose=0), logits)


def test_a_masked_lm_with_segments_keeps_them(tokenizer):
    backbone = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=tokenizer.vocabulary_size())
    model = TupeMaskedLM(backbone, TupeMaskedLMPreprocessor(tokenizer, sequence_length=16))
    assert sorted(model.input) == ["mask_positions", "padding_mask", "segment_ids", "token_ids"]
    x, _, _ = model.preprocessor(["the cat sat on the mat"])
    assert "segment_ids" in x


def test_a_backbone_without_segments_takes_no_segment_ids(tmp_path):
    """Was `Missing data for input "segment_ids"` from `Backbone.from_preset` of a converted
    fairseq TUPE, an input no layer reads."""
    TupeBackbone.from_preset("tupe_r_fairseq_tiny", vocabulary_size=64).save_to_preset(
        str(tmp_path / "preset"))
    backbone = keras_hub.models.Backbone.from_preset(str(tmp_path / "preset"))
    x = {"token_ids": np.random.default_rng(0).integers(5, 64, (2, 16)).astype("int32"),
         "padding_mask": np.ones((2, 16), "int32")}
    outputs = backbone.predict(x, verbose=0)
    assert sorted(backbone.input) == ["padding_mask", "token_ids"]
    assert outputs["sequence_output"].shape == (2, 16, backbone.hidden_dim)
    # A batch made for every preset: ignored, without a warning. (Keras itself would take
    # a dict with a key too many by position: token_ids given the segment ids.)
    x_with_segments = {**x, "segment_ids": np.ones((2, 16), "int32")}
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with_segments = [backbone(x_with_segments),
                         backbone.layer_outputs()(x_with_segments)]  # the export's view
    for result in with_segments:
        np.testing.assert_allclose(result["sequence_output"], outputs["sequence_output"],
                                   atol=1e-6)
    assert sorted(TupeBackbone.from_preset("tupe_r_tiny").input) == [
        "padding_mask", "segment_ids", "token_ids"]


def test_a_classifier_and_a_span_qa_without_segments_fit_and_predict(tokenizer):
    """The classifier's preprocessor leaves `segment_ids` out, as keras-hub's RoBERTa one;
    SQuAD windows (one packer for every preset) hold them, and the task ignores them."""
    def backbone():
        return TupeBackbone.from_preset("tupe_r_fairseq_tiny",
                                        vocabulary_size=tokenizer.vocabulary_size())

    classifier = TupeTextClassifier(
        backbone(), num_classes=2,
        preprocessor=TupeTextClassifierPreprocessor(tokenizer, sequence_length=16))
    assert sorted(classifier.input) == ["padding_mask", "token_ids"]
    assert sorted(classifier.preprocessor(["the cat sat"])) == ["padding_mask", "token_ids"]
    classifier.compile(**CHEAP_COMPILE)
    classifier.fit(x=["the cat sat", "a dog ran"], y=[0, 1], batch_size=2, verbose=0)
    assert classifier.predict(["the cat sat", "a dog"], verbose=0).shape == (2, 2)

    qa = TupeSpanQA(backbone(), preprocessor=TupeSpanQAPreprocessor(
        tokenizer, sequence_length=24, doc_stride=8, max_query_length=8))
    assert sorted(qa.input) == ["padding_mask", "token_ids"]
    features = qa.preprocessor.featurize(["where did it sit ?"], ["the cat sat on the mat"],
                                         answers=["the mat"], answer_starts=[15])
    assert "segment_ids" in features.inputs
    qa.compile(**CHEAP_COMPILE)
    qa.fit(features.inputs, {"start_positions": features.start_positions,
                             "end_positions": features.end_positions}, verbose=0)
    assert len(qa.answer(["where did it sit ?"], ["the cat sat on the mat"])) == 1
