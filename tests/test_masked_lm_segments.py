"""A masked LM whose backbone has no segment embedding takes no `segment_ids` (issue 49).

As keras-hub's `RobertaMaskedLM`: the converted TUPE (fairseq) presets have
`num_segments=0`, and `MaskedLM.from_preset` on one used to ask for `segment_ids`
the model ignores.
"""

import keras_hub
import numpy as np
import pytest

from keras_tupe import data
from keras_tupe.models import TupeBackbone, TupeMaskedLM, TupeMaskedLMPreprocessor, TupeTokenizer
from tests.test_pretrain import ENWIKI_TRAIN


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
