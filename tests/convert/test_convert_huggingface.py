"""Hugging Face BERT folders -> keras_tupe presets, checked against transformers' own outputs.

The reference folders (`reference_checkpoints/hf/<type>/`) were written by
transformers 4.57 with random, perturbed weights; their README lists the
outputs. Every comparison covers all positions, padding included.
"""

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import keras_hub
import numpy as np
import pytest
from safetensors.numpy import load_file, save_file

import keras_tupe  # noqa: F401  (registers the family with keras-hub)
from keras_tupe.convert.common import ConversionError
from keras_tupe.convert.huggingface import convert_huggingface, read_source
from keras_tupe.models import TupeBackbone, TupeTokenizer

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
HF = DATA_DIR / "reference_checkpoints" / "hf"
TYPES = ("absolute", "relative_key", "relative_key_query")
KINDS = ("bert_model", "bert_for_masked_lm")
FORMATS = {"safetensors": "model.safetensors", "pytorch": "pytorch_model.bin"}
VARIANTS = {"absolute": "bert_a", "relative_key": "shaw", "relative_key_query": "huang_m4"}
ATOL = 1e-5

pytestmark = pytest.mark.skipif(not HF.is_dir(), reason=f"no reference checkpoints at {HF}")


def reference_inputs():
    return {
        "token_ids": np.load(HF / "input_ids.npy").astype("int32"),
        "segment_ids": np.load(HF / "token_type_ids.npy").astype("int32"),
        "padding_mask": np.load(HF / "attention_mask.npy").astype("int32"),
    }


def all_positions(inputs):
    batch, length = inputs["token_ids"].shape
    return {**inputs, "mask_positions": np.tile(np.arange(length, dtype="int32"), (batch, 1))}


def expected(position_type, name):
    return np.load(HF / position_type / f"{name}_fp32.npy")


def assert_matches(actual, expected_value):
    np.testing.assert_allclose(np.asarray(actual), expected_value, rtol=0, atol=ATOL)


@pytest.fixture(scope="module")
def presets(tmp_path_factory):
    """Every reference folder converted from each weight format: {(type, kind, format): path}."""
    root = tmp_path_factory.mktemp("hf_presets")
    return {
        (position_type, kind, weights): convert_huggingface(
            HF / position_type / kind, root / f"{position_type}_{kind}_{weights}", weights=weights
        )
        for position_type in TYPES
        for kind in KINDS
        for weights in FORMATS
    }


def conversion_metadata(preset):
    with open(os.path.join(preset, "metadata.json")) as f:
        return json.load(f)["keras_tupe_conversion"]


@pytest.mark.parametrize("weights", sorted(FORMATS))
@pytest.mark.parametrize("position_type", TYPES)
def test_bert_model_reproduces_transformers(presets, position_type, weights):
    preset = presets[(position_type, "bert_model", weights)]
    backbone = keras_hub.models.Backbone.from_preset(preset)
    assert isinstance(backbone, TupeBackbone)
    outputs = backbone(reference_inputs())
    assert_matches(outputs["sequence_output"], expected(position_type, "last_hidden_state"))
    assert_matches(outputs["pooled_output"], expected(position_type, "pooler_output"))
    metadata = conversion_metadata(preset)
    assert metadata["variant"] == VARIANTS[position_type]
    assert metadata["position_embedding_type"] == position_type
    files = {role: os.path.basename(file["path"]) for role, file in metadata["files"].items()}
    assert files == {"config": "config.json", "weights": FORMATS[weights],
                     "vocabulary": "vocab.txt", "tokenizer_config": "tokenizer_config.json"}
    assert all(len(file["sha256"]) == 64 for file in metadata["files"].values())
    assert "no masked-LM head" in metadata["contents"]


@pytest.mark.parametrize("weights", sorted(FORMATS))
@pytest.mark.parametrize("position_type", TYPES)
def test_bert_for_masked_lm_reproduces_transformers(presets, position_type, weights):
    preset = presets[(position_type, "bert_for_masked_lm", weights)]
    masked_lm = keras_hub.models.MaskedLM.from_preset(preset)
    inputs = reference_inputs()
    hidden = masked_lm.backbone(inputs)["sequence_output"]
    assert_matches(hidden, expected(position_type, "last_hidden_state"))
    assert_matches(masked_lm(all_positions(inputs)), expected(position_type, "mlm_logits"))
    assert masked_lm.preprocessor.sequence_length == 64  # min(512, max_position_embeddings)
    metadata = conversion_metadata(preset)
    assert metadata["files"]["weights"]["path"].endswith(FORMATS[weights])
    assert any("no pooler" in note and "freshly initialized" in note for note in metadata["notes"])


def test_relative_tables_are_hf_tables_reversed(presets):
    backbone = keras_hub.models.Backbone.from_preset(
        presets[("relative_key", "bert_model", "safetensors")])
    tensors = load_file(HF / "relative_key" / "bert_model" / "model.safetensors")
    for i, block in enumerate(backbone.transformer_layers):
        table = tensors[f"encoder.layer.{i}.attention.self.distance_embedding.weight"]  # (127, 8)
        ours = block.attention.relative_embeddings.numpy()
        # Our row r + 63 (r = j - i) is HF's row i - j + 63.
        np.testing.assert_array_equal(ours[63 + 5], table[63 - 5])
        np.testing.assert_array_equal(ours, table[::-1])
    assert backbone.position_embedding is None  # the perturbed absolute table is not used


def test_negative_controls_differ(presets):
    """A table left in HF's order, or relative_key read as method 4, gives other numbers."""
    backbone = keras_hub.models.Backbone.from_preset(
        presets[("relative_key", "bert_model", "safetensors")])
    inputs = reference_inputs()
    want = expected("relative_key", "last_hidden_state")
    as_method4 = TupeBackbone.from_config(
        {**backbone.get_config(), "relative_position": "method4"})
    as_method4.set_weights(backbone.get_weights())
    assert np.max(np.abs(as_method4(inputs)["sequence_output"] - want)) > 1e-2
    for block in backbone.transformer_layers:
        table = block.attention.relative_embeddings
        table.assign(table.numpy()[::-1])
    assert np.max(np.abs(backbone(inputs)["sequence_output"] - want)) > 1e-2


ROUND_TRIP = textwrap.dedent(
    """
    import json, sys
    import numpy as np
    import keras_hub
    import keras_tupe  # noqa: F401

    hf, presets = sys.argv[1], json.loads(sys.argv[2])
    inputs = {
        "token_ids": np.load(f"{hf}/input_ids.npy").astype("int32"),
        "segment_ids": np.load(f"{hf}/token_type_ids.npy").astype("int32"),
        "padding_mask": np.load(f"{hf}/attention_mask.npy").astype("int32"),
    }
    positions = np.tile(np.arange(inputs["token_ids"].shape[1], dtype="int32"), (3, 1))
    error = lambda got, name: float(np.max(np.abs(np.asarray(got) - np.load(name))))
    results = {}
    for position_type, (model_preset, mlm_preset) in presets.items():
        reference = f"{hf}/{position_type}"
        backbone = keras_hub.models.Backbone.from_preset(model_preset)
        outputs = backbone(inputs)
        masked_lm = keras_hub.models.MaskedLM.from_preset(mlm_preset)
        logits = masked_lm({**inputs, "mask_positions": positions})
        classifier = keras_hub.models.TextClassifier.from_preset(model_preset, num_classes=2)
        pooled = classifier.backbone(inputs)["pooled_output"]
        mlm_classifier = keras_hub.models.TextClassifier.from_preset(mlm_preset, num_classes=2)
        results[position_type] = {
            "hidden": error(outputs["sequence_output"], f"{reference}/last_hidden_state_fp32.npy"),
            "pooled": error(outputs["pooled_output"], f"{reference}/pooler_output_fp32.npy"),
            "logits": error(logits, f"{reference}/mlm_logits_fp32.npy"),
            "classifier_pooled": error(pooled, f"{reference}/pooler_output_fp32.npy"),
            "classifier_shape": list(
                classifier(classifier.preprocessor(["the city was new ."])).shape),
            "mlm_classifier_shape": list(
                mlm_classifier(mlm_classifier.preprocessor(["the school"])).shape),
            "classes": [type(backbone).__name__, type(masked_lm).__name__,
                        type(classifier).__name__],
        }
    print(json.dumps(results))
    """
)


@pytest.mark.slow  # about 25 s: a second TensorFlow start
def test_presets_load_in_a_fresh_process_through_keras_hub_base_classes(presets):
    chosen = {t: [presets[(t, "bert_model", "safetensors")],
                  presets[(t, "bert_for_masked_lm", "pytorch")]] for t in TYPES}
    result = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(HF), json.dumps(chosen)],
        capture_output=True, text=True, cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    results = json.loads(result.stdout.strip().splitlines()[-1])
    for position_type in TYPES:
        row = results[position_type]
        for name in ("hidden", "pooled", "logits", "classifier_pooled"):
            assert row[name] <= ATOL, (position_type, name, row)
        assert row["classifier_shape"] == [1, 2] and row["mlm_classifier_shape"] == [1, 2]
        assert row["classes"] == ["TupeBackbone", "TupeMaskedLM", "TupeTextClassifier"]


# Tokenizer ------------------------------------------------------------------------------

TEXTS = ["The city, which was NEW.", "Thé schooling (first) time", "Zebra states' university"]
# By hand from vocab.txt: lowercased, accents stripped, punctuation split, WordPiece.
EXPECTED_TOKENS = [
    ["the", "city", ",", "which", "was", "new", "."],
    ["the", "school", "##ing", "(", "first", ")", "time"],
    ["[UNK]", "state", "##s", "'", "university"],
]


def test_tokenizer_gives_the_reference_wordpiece_ids(presets):
    vocabulary = (HF / "vocab.txt").read_text(encoding="utf-8").splitlines()
    tokenizer = TupeTokenizer.from_preset(presets[("absolute", "bert_model", "safetensors")])
    assert tokenizer.lowercase and tokenizer.strip_accents
    for text, tokens in zip(TEXTS, EXPECTED_TOKENS):
        ids = np.asarray(tokenizer(text)).tolist()
        assert ids == [vocabulary.index(token) for token in tokens], text
    # transformers' own (Rust) BERT WordPiece, where installed.
    tokenizers = pytest.importorskip("tokenizers")
    reference = tokenizers.BertWordPieceTokenizer(str(HF / "vocab.txt"), lowercase=True)
    for text in TEXTS:
        want = reference.encode(text, add_special_tokens=False).ids
        assert np.asarray(tokenizer(text)).tolist() == want, text


# Refusals: a clear message, and nothing written -----------------------------------------

def copy_reference(tmp_path, position_type="relative_key", kind="bert_model"):
    folder = tmp_path / "source"
    shutil.copytree(HF / position_type / kind, folder)
    return folder


def edit_config(folder, **changes):
    config = json.loads((folder / "config.json").read_text())
    config.update(changes)
    (folder / "config.json").write_text(json.dumps(config))


def assert_refused(source, out, *patterns):
    with pytest.raises(ConversionError) as error:
        convert_huggingface(source, out)
    for pattern in patterns:
        assert pattern in str(error.value), str(error.value)
    assert not os.path.exists(str(out) + ".partial")
    return str(error.value)


@pytest.mark.parametrize("model_type", ["roberta", "electra"])
def test_refuses_other_model_families(tmp_path, model_type):
    source = copy_reference(tmp_path)
    edit_config(source, model_type=model_type)
    assert_refused(source, tmp_path / "out", "config.json", f"model_type={model_type!r}",
                   "model_type 'bert'")
    assert not (tmp_path / "out").exists()


def test_refuses_unknown_position_embedding_type(tmp_path):
    source = copy_reference(tmp_path)
    edit_config(source, position_embedding_type="rotary")
    assert_refused(source, tmp_path / "out", "config.json", "position_embedding_type='rotary'",
                   "'relative_key_query'")
    assert not (tmp_path / "out").exists()


def test_refuses_missing_vocabulary(tmp_path):
    source = copy_reference(tmp_path)
    (source / "vocab.txt").unlink()
    assert_refused(source, tmp_path / "out", str(source), "no WordPiece vocabulary",
                   "vocab.txt")
    assert not (tmp_path / "out").exists()


def test_refuses_vocabulary_of_another_size(tmp_path):
    source = copy_reference(tmp_path)
    lines = (source / "vocab.txt").read_text(encoding="utf-8").splitlines()
    (source / "vocab.txt").write_text("\n".join(lines[:-1]) + "\n", encoding="utf-8")
    assert_refused(source, tmp_path / "out", "vocab.txt", "99 tokens", "vocab_size=100")
    assert not (tmp_path / "out").exists()


def test_refuses_vocabulary_without_special_tokens(tmp_path):
    source = copy_reference(tmp_path)
    text = (source / "vocab.txt").read_text(encoding="utf-8")
    (source / "vocab.txt").write_text(text.replace("[MASK]", "<mask>"), encoding="utf-8")
    assert_refused(source, tmp_path / "out", "vocab.txt", "no ['[MASK]']")
    assert not (tmp_path / "out").exists()


def test_read_source_checks_a_folder_and_builds_nothing(tmp_path):
    source = copy_reference(tmp_path, kind="bert_model")
    checked = read_source(source)
    config = json.loads((source / "config.json").read_text())
    assert checked["position_embedding_type"] == "relative_key"
    assert checked["config"] == config and checked["head"] is None
    assert len(checked["vocabulary"]) == config["vocab_size"]
    assert checked["backbone_config"]["num_layers"] == config["num_hidden_layers"]
    assert checked["weights_path"] == checked["files"]["weights"]
    assert sorted(os.listdir(tmp_path)) == ["source"]
    edit_config(source, model_type="roberta")
    with pytest.raises(ConversionError, match="model_type='roberta'"):
        read_source(source)


def test_refuses_non_empty_output_folder(tmp_path):
    source = copy_reference(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    assert_refused(source, out, str(out), "already exists")
    assert os.listdir(out) == ["notes.txt"] and (out / "notes.txt").read_text() == "mine"


def test_convert_refuses_an_unknown_kind_and_dispatches_a_known_one(tmp_path):
    from keras_tupe.convert import KINDS, convert

    with pytest.raises(ConversionError, match=r"Unknown checkpoint kind 'roberta'. "
                                              r"Valid kinds: \['huggingface', 'fairseq'\]"):
        convert("roberta", HF / "absolute" / "bert_model", tmp_path / "out")
    assert not (tmp_path / "out").exists()
    assert KINDS == ("huggingface", "fairseq")
    out = convert("huggingface", HF / "absolute" / "bert_model", tmp_path / "out")
    assert json.loads((Path(out) / "metadata.json").read_text())[
        "keras_tupe_conversion"]["kind"] == "huggingface"
    assert not list(tmp_path.glob(".*.lock"))  # the lock is let go


def test_refuses_missing_weights_and_unknown_tensors(tmp_path):
    source = copy_reference(tmp_path)
    tensors = load_file(source / "model.safetensors")
    (source / "model.safetensors").unlink()
    (source / "pytorch_model.bin").unlink()
    assert_refused(source, tmp_path / "out", "no weight file",
                   "model.safetensors or pytorch_model.bin")
    tensors["classifier.weight"] = np.zeros((2, 32), "float32")
    save_file(tensors, str(source / "model.safetensors"))
    assert_refused(source, tmp_path / "out", "model.safetensors", "['classifier.weight']")
    assert not (tmp_path / "out").exists()


def test_dropout_rates_must_agree_or_be_chosen(tmp_path):
    source = copy_reference(tmp_path)
    edit_config(source, hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.2)
    assert_refused(source, tmp_path / "out", "attention_probs_dropout_prob=0.2",
                   "hidden_dropout_prob=0.1", "dropout=RATE")
    assert not (tmp_path / "out").exists()
    out = convert_huggingface(source, tmp_path / "out", dropout=0.1)
    assert keras_hub.models.Backbone.from_preset(out).dropout == 0.1
    assert any("dropout=0.1 chosen" in note for note in conversion_metadata(out)["notes"])


def test_tanh_gelu_converts_without_a_head_and_is_refused_with_one(tmp_path):
    source = copy_reference(tmp_path)
    edit_config(source, hidden_act="gelu_new")
    out = convert_huggingface(source, tmp_path / "out")
    assert keras_hub.models.Backbone.from_preset(out).activation == "gelu_approximate"
    mlm_source = tmp_path / "mlm"
    shutil.copytree(HF / "relative_key" / "bert_for_masked_lm", mlm_source)
    edit_config(mlm_source, hidden_act="gelu_pytorch_tanh")
    assert_refused(mlm_source, tmp_path / "mlm_out", "gelu_pytorch_tanh", "exact GELU")
    assert not (tmp_path / "mlm_out").exists()
