"""The TUPE authors' fairseq checkpoints: exact conversion, the fork's variant, refusals.

The decisive references are the outputs of the authors' own code (the fork at
4c64ff7) saved beside its checkpoints in `reference_checkpoints/tupe/`
(see its README, sections 4-6).
"""

import argparse
import copy
import json
import os
import shutil
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest

from keras_tupe import TupeBackbone, layers
import keras_tupe  # noqa: F401  (registers the family with keras-hub)
from keras_tupe.convert import fairseq
from keras_tupe.convert.common import ConversionError, sha256
from keras_tupe.convert.fairseq import convert_fairseq
from keras_tupe.convert.torch_files import load_torch_file
from keras_tupe.layers.cls_reset import reset_cls_buckets, reset_cls_from_reserved_rows
from keras_tupe.models.tupe_masked_lm import TupeMaskedLM
from keras_tupe_base.presets import PRESETS
from tests.layer_test_case import run_layer_test

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
REFERENCE = DATA_DIR / "reference_checkpoints" / "tupe"
DICTIONARY = REFERENCE / "dict.txt"
VARIANTS = ("tupe_r", "tupe_a")
PRECISIONS = ("fp16", "fp32")
ATOL = 1e-5

# Only the tests that read the authors' files skip without them (through this mark or
# the fixtures below); the presets, layers and refusals run anywhere.
HAVE_REFERENCE = (REFERENCE / "input_tokens.npy").is_file()
MISSING = f"reference checkpoints not found under {REFERENCE}"
needs_reference = pytest.mark.skipif(not HAVE_REFERENCE, reason=MISSING)


def require_reference():
    """The mark, for the fixtures that read the authors' files (a fixture takes no mark)."""
    if not HAVE_REFERENCE:
        pytest.skip(MISSING)


def reference_inputs():
    tokens = np.load(REFERENCE / "input_tokens.npy").astype("int32")  # (3, 20)
    return {
        "token_ids": tokens,
        "padding_mask": (tokens != fairseq.PAD_ID).astype("int32"),
        "segment_ids": np.zeros_like(tokens),
    }


def reference(variant, name):
    return np.load(REFERENCE / variant / f"{name}.npy")


def lm_logits(model, inputs):
    """The LM head at every position (the fork's `model(tokens)[0]`)."""
    batch, length = inputs["token_ids"].shape
    positions = np.tile(np.arange(length, dtype="int32"), (batch, 1))
    return keras.ops.convert_to_numpy(model({**inputs, "mask_positions": positions}))


def sequence_output(backbone, inputs):
    return keras.ops.convert_to_numpy(backbone(inputs)["sequence_output"])


@pytest.fixture(scope="module")
def converted(tmp_path_factory):
    """{(variant, precision): preset folder}. TUPE-A fp32 goes through the folder form."""
    require_reference()
    root = tmp_path_factory.mktemp("fairseq")
    folders = {}
    for variant in VARIANTS:
        for precision in PRECISIONS:
            checkpoint = REFERENCE / variant / f"checkpoint_{precision}.pt"
            out = root / f"{variant}_{precision}"
            if (variant, precision) == ("tupe_a", "fp32"):
                source = root / "fairseq_run"  # a training folder: model.pt + dict.txt
                source.mkdir()
                shutil.copy(checkpoint, source / "model.pt")
                shutil.copy(DICTIONARY, source / "dict.txt")
                folders[variant, precision] = convert_fairseq(source, out)
            else:
                folders[variant, precision] = convert_fairseq(checkpoint, out,
                                                              dictionary=DICTIONARY)
    return folders


@pytest.fixture(scope="module")
def loaded(converted):
    return {key: keras_hub.models.MaskedLM.from_preset(folder)
            for key, folder in converted.items()}


# --- exactness against the authors' outputs ------------------------------------------


@pytest.mark.parametrize("precision", PRECISIONS)
@pytest.mark.parametrize("variant", VARIANTS)
def test_outputs_match_the_authors_code(loaded, variant, precision):
    model = loaded[variant, precision]
    assert isinstance(model, TupeMaskedLM)
    inputs = reference_inputs()
    # Every position, padding included (the fork zeroes padded embeddings).
    np.testing.assert_allclose(sequence_output(model.backbone, inputs),
                               reference(variant, "hidden_fp32"), rtol=0, atol=ATOL)
    np.testing.assert_allclose(lm_logits(model, inputs),
                               reference(variant, "lm_logits_fp32"), rtol=0, atol=ATOL)


@pytest.mark.parametrize("variant", VARIANTS)
def test_positional_bias_matches_the_authors_attn_bias(loaded, variant):
    backbone = loaded[variant, "fp16"].backbone
    got = keras.ops.convert_to_numpy(backbone.positional_bias(20))
    np.testing.assert_allclose(got, reference(variant, "attn_bias_fp64"), rtol=0, atol=ATOL)


def test_float16_and_float32_checkpoints_give_the_same_float32_weights(loaded):
    for variant in VARIANTS:
        half, full = loaded[variant, "fp16"], loaded[variant, "fp32"]
        assert {w.dtype for w in half.weights} == {"float32"}
        for a, b in zip(half.weights, full.weights):
            np.testing.assert_array_equal(keras.ops.convert_to_numpy(a),
                                          keras.ops.convert_to_numpy(b), err_msg=a.path)


def test_converted_config_is_the_fairseq_variant(loaded):
    """The converter writes the presets' variant, at the checkpoint's sizes."""
    from keras_tupe_base.presets import VARIANTS as PRESET_VARIANTS

    sizes = dict(vocabulary_size=113, num_layers=2, num_heads=4, hidden_dim=32,
                 intermediate_dim=64, max_sequence_length=64)
    for variant, precision in (("tupe_r", "fp16"), ("tupe_a", "fp32")):
        config = loaded[variant, precision].backbone.get_config()
        expected = {**PRESET_VARIANTS[f"{variant}_fairseq"], **sizes}
        assert {key: config[key] for key in expected} == expected


def test_metadata_records_the_conversion(converted):
    with open(os.path.join(converted["tupe_r", "fp16"], "metadata.json")) as f:
        record = json.load(f)["keras_tupe_conversion"]
    assert record["kind"] == "fairseq" and record["variant"] == "tupe_r_fairseq"
    assert record["args"]["rel_pos"] is True and record["args"]["max_positions"] == 64
    checkpoint = REFERENCE / "tupe_r" / "checkpoint_fp16.pt"
    assert record["files"]["checkpoint"]["sha256"] == sha256(checkpoint)
    assert record["files"]["dictionary"]["sha256"] == sha256(DICTIONARY)
    assert record["tokenizer"] is None
    assert any("no tokenizer" in note for note in record["notes"])
    assert not os.path.exists(os.path.join(converted["tupe_r", "fp16"], "tokenizer.json"))
    with open(os.path.join(converted["tupe_a", "fp32"], "metadata.json")) as f:
        record = json.load(f)["keras_tupe_conversion"]
    assert record["variant"] == "tupe_a_fairseq"
    assert record["source"].endswith(os.path.join("fairseq_run", "model.pt"))


# --- the fork's conventions, one at a time ---------------------------------------------


@pytest.mark.parametrize("variant", VARIANTS)
def test_numpy_reference_matches_the_authors_code(loaded, variant):
    """The float64 reference's fairseq branch, on the converted weights, is the fork."""
    from tests import numpy_reference
    from tests.reference_params import backbone_params

    backbone = loaded[variant, "fp32"].backbone
    params = {**backbone_params(backbone), "cls_reset_style": backbone.cls_reset_style,
              "mask_padding_embeddings": backbone.mask_padding_embeddings}
    inputs = reference_inputs()
    want = numpy_reference.encoder_forward(params, inputs["token_ids"], inputs["padding_mask"],
                                           inputs["segment_ids"])
    # The converted weights are the checkpoint's exactly (float16-representable).
    np.testing.assert_allclose(want["sequence_output"], reference(variant, "hidden_fp64"),
                               rtol=0, atol=1e-9)
    for layer, inner in enumerate(reference(variant, "inner_states_fp64")[1:]):
        np.testing.assert_allclose(want["encoder_outputs"][layer], inner, rtol=0, atol=1e-9)


@needs_reference
def test_reset_buckets_equal_the_forks_rp_bucket():
    """The fork's saved `rp_bucket` (64 x 64, after both [CLS] resets)."""
    distance = np.arange(64)[None, :] - np.arange(64)[:, None]  # j - i
    buckets = layers.t5_relative_position_bucket(distance, num_buckets=32, max_distance=128)
    got = keras.ops.convert_to_numpy(reset_cls_buckets(buckets, 32))
    np.testing.assert_array_equal(got, np.load(REFERENCE / "rel_pos_bucket.npy"))
    assert got[0, 0] == 16 and got[5, 0] == 32 and got[0, 5] == 16


def test_reset_from_reserved_rows_by_hand():
    full = np.arange(2 * 4 * 4, dtype="float32").reshape(2, 4, 4)  # (h, n + 1, n + 1)
    got = keras.ops.convert_to_numpy(reset_cls_from_reserved_rows(full))
    want = full[:, 1:, 1:].copy()
    want[:, :, 0] = full[:, 1, 1][:, None]
    want[:, 0, :] = full[:, 0, 0][:, None]
    np.testing.assert_array_equal(got, want)


def test_paper_cls_reset_is_measurably_different(loaded):
    """Negative control: the paper's reset, θ from the same table rows, on TUPE-R.

    Positions keep their rows (t + 1) and θ1 = A_00, θ2 = A_11 as the fork,
    but the [CLS] logits are θ alone: the fork's b[16] / b[32] are missing.
    """
    converted = loaded["tupe_r", "fp16"].backbone
    config = {**converted.get_config(), "cls_reset_style": "paper"}
    paper = TupeBackbone.from_config(config)
    values = {w.path: keras.ops.convert_to_numpy(w) for w in converted.weights}
    correlation = "untied_positional_correlation/"
    table = values.pop(correlation + "position_embeddings")  # (65, d)
    values[correlation + "position_embeddings"] = table[1:]
    values["relative_bucket_bias/relative_attention_bias"] = values[
        "relative_bucket_bias/relative_attention_bias"][:32]
    # θ from rows 0 and 1, as the fork computes them.
    mean = table[:2].mean(-1, keepdims=True)
    normed = (table[:2] - mean) / np.sqrt(table[:2].var(-1, keepdims=True) + 1e-5)
    normed = normed * values[correlation + "position_layer_norm/gamma"] + values[
        correlation + "position_layer_norm/beta"]
    pq = np.einsum("nd,dhk->nhk", normed, values[correlation + "query_projection/kernel"]) + (
        values[correlation + "query_projection/bias"])
    pk = np.einsum("nd,dhk->nhk", normed, values[correlation + "key_projection/kernel"]) + (
        values[correlation + "key_projection/bias"])
    scale = (2 * converted.hidden_dim // converted.num_heads) ** -0.5  # (2 d_h)^-1/2
    values["cls_reset/cls_to_others"] = (pq[0] * pk[0]).sum(-1) * scale
    values["cls_reset/others_to_cls"] = (pq[1] * pk[1]).sum(-1) * scale
    for weight in paper.weights:
        weight.assign(values[weight.path])
    # Only row 0 and column 0 of the positional term differ: by b[16] and b[32].
    bias = keras.ops.convert_to_numpy(paper.positional_bias(20))
    want = reference("tupe_r", "attn_bias_fp64")
    np.testing.assert_allclose(bias[:, 1:, 1:], want[:, 1:, 1:], atol=ATOL)
    table33 = keras.ops.convert_to_numpy(converted.relative_bias.relative_attention_bias)
    np.testing.assert_allclose(bias[:, 0, :] + table33[16][:, None], want[:, 0, :], atol=ATOL)
    np.testing.assert_allclose(bias[:, 1:, 0] + table33[32][:, None], want[:, 1:, 0], atol=ATOL)
    got = sequence_output(paper, reference_inputs())
    assert np.abs(got - reference("tupe_r", "hidden_fp32")).max() > 1e-3


def test_unmasked_padding_embeddings_change_only_padded_outputs(loaded):
    """Control for `mask_padding_embeddings`: it matters at padding, never at tokens."""
    converted = loaded["tupe_r", "fp16"].backbone
    unmasked = TupeBackbone.from_config(
        {**converted.get_config(), "mask_padding_embeddings": False})
    unmasked.set_weights(converted.get_weights())
    inputs = reference_inputs()
    real = inputs["padding_mask"].astype(bool)
    got, want = sequence_output(unmasked, inputs), reference("tupe_r", "hidden_fp32")
    np.testing.assert_allclose(got[real], want[real], atol=ATOL)
    assert np.abs(got[~real] - want[~real]).max() > 1e-3


# --- the variant as a preset, trained from scratch -------------------------------------


@pytest.mark.parametrize("variant", ["tupe_r_fairseq", "tupe_a_fairseq"])
def test_fairseq_preset_shapes(variant):
    backbone = TupeBackbone.from_preset(f"{variant}_tiny")
    shapes = {w.path: tuple(w.shape) for w in backbone.weights}
    assert shapes["untied_positional_correlation/position_embeddings"] == (129, 64)
    relative = shapes.get("relative_bucket_bias/relative_attention_bias")
    assert relative == ((33, 4) if variant == "tupe_r_fairseq" else None)
    assert backbone.cls_reset_layer is None and backbone.segment_embedding is None
    assert not any("cls_reset" in path or "segment" in path for path in shapes)


def test_tupe_r_fairseq_tiny_trains_and_round_trips(tmp_path):
    model = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_fairseq_tiny"))
    # One eager step: tracing the task's graph takes ~25 s on a busy 2-core CPU. The
    # XLA step of the two layers with reserved rows / buckets is in run_layer_test.
    model.compile(optimizer=keras.optimizers.AdamW(1e-3), run_eagerly=True)
    rng = np.random.default_rng(0)
    tokens = rng.integers(7, 1024, (4, 24)).astype("int32")
    tokens[:, 0] = 0
    tokens[2:, 18:] = fairseq.PAD_ID
    inputs = {
        "token_ids": tokens,
        "padding_mask": (tokens != fairseq.PAD_ID).astype("int32"),
        "segment_ids": np.zeros_like(tokens),
        "mask_positions": np.tile(np.array([2, 5, 9], "int32"), (4, 1)),
    }
    targets = rng.integers(7, 1024, (4, 3)).astype("int32")
    before = [keras.ops.convert_to_numpy(w).copy() for w in model.backbone.trainable_weights]
    loss = model.train_on_batch(inputs, targets, sample_weight=np.ones((4, 3), "float32"))
    assert np.isfinite(np.ravel(loss)[0])
    after = [keras.ops.convert_to_numpy(w) for w in model.backbone.trainable_weights]
    assert all(not np.array_equal(b, a) for b, a in zip(before, after))
    preset = str(tmp_path / "preset")
    model.save_to_preset(preset)
    restored = keras_hub.models.MaskedLM.from_preset(preset)
    assert restored.backbone.get_config() == model.backbone.get_config()
    np.testing.assert_array_equal(
        keras.ops.convert_to_numpy(restored(inputs)), keras.ops.convert_to_numpy(model(inputs)))


def test_old_configs_keep_the_paper_reset():
    """A config.json written before the new fields loads as it computed then."""
    config = TupeBackbone.from_preset("tupe_r_tiny").get_config()
    assert config["cls_reset_style"] == "paper" and config["mask_padding_embeddings"] is False
    del config["cls_reset_style"], config["mask_padding_embeddings"]
    backbone = TupeBackbone.from_config(config)
    assert backbone.cls_reset_layer is not None
    assert backbone.untied_correlation.position_embeddings.shape == (128, 64)


@pytest.mark.parametrize(
    "make, message",
    [
        (lambda: TupeBackbone(**{**PRESETS["tupe_r_tiny"], "cls_reset_style": "authors"}),
         r"`cls_reset_style` must be one of \('paper', 'fairseq'\). "
         r"Received: cls_reset_style='authors'"),
        (lambda: TupeBackbone(**{**PRESETS["tupe_r_fairseq_tiny"], "cls_reset": False}),
         "cls_reset_style='fairseq' needs cls_reset=True. Received: cls_reset=False"),
        (lambda: layers.UntiedPositionalCorrelation(4, 8, output_mode="projections",
                                                    reserved_cls_rows=True),
         "needs output_mode='correlation'. Received: output_mode='projections'"),
        (lambda: layers.RelativeBucketBias(4, bidirectional=False, reserved_cls_buckets=True),
         "needs bidirectional=True. Received: bidirectional=False"),
    ],
)
def test_bad_fairseq_options_are_refused_clearly(make, message):
    with pytest.raises(ValueError, match=message):
        make()


def test_layers_with_reserved_cls_rows_and_buckets():
    x = np.random.default_rng(0).normal(size=(2, 7, 16)).astype("float32")
    run_layer_test(
        layers.UntiedPositionalCorrelation,
        dict(num_heads=4, max_sequence_length=10, reserved_cls_rows=True),
        dict(inputs=x),
        expected_output_shape=(1, 4, 7, 7),
        mixed_output_dtype="float32",
    )
    run_layer_test(
        layers.RelativeBucketBias,
        dict(num_heads=4, num_buckets=8, max_distance=16, reserved_cls_buckets=True),
        dict(query=x),
        expected_output_shape=(1, 4, 7, 7),
        mixed_output_dtype="float32",
        symbolic_output_shapes=[(1, 4, None, None)],
    )


# --- refusals: a clear message, nothing written ----------------------------------------


@pytest.fixture(scope="module")
def reference_checkpoint():
    require_reference()
    return load_torch_file(REFERENCE / "tupe_r" / "checkpoint_fp32.pt")


def assert_nothing_written(out):
    assert not os.path.exists(out)
    assert not os.path.exists(f"{out}.partial")


def test_missing_dictionary_is_refused(tmp_path):
    source = tmp_path / "run"
    source.mkdir()
    # Refused before the checkpoint is read: any file of that name will do.
    (source / "checkpoint_best.pt").write_bytes(b"not read")
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=r"run: no fairseq dictionary \(expected dict.txt\)"):
        convert_fairseq(source, out)
    assert_nothing_written(out)


@needs_reference
def test_wrong_dictionary_size_is_refused(tmp_path):
    short = tmp_path / "dict.txt"
    short.write_text("".join(DICTIONARY.read_text().splitlines(keepends=True)[:-1]))
    out = tmp_path / "out"
    with pytest.raises(ConversionError,
                       match=r"7 specials \+ 104 words of dict.txt \+ <mask> = 112 tokens, "
                             r"but embed_tokens has 113 rows"):
        convert_fairseq(REFERENCE / "tupe_r" / "checkpoint_fp16.pt", out, dictionary=short)
    assert_nothing_written(out)


@needs_reference
def test_a_dictionary_that_lists_mask_keeps_its_row(tmp_path):
    # masked_lm's `add_symbol("<mask>")` adds no row when dict.txt lists `<mask>`, so the
    # checkpoint's 113 rows are 7 specials + 106 lines (the tokenizer always counted so).
    listed = tmp_path / "dict.txt"
    listed.write_text(DICTIONARY.read_text() + "<mask> 0\n")
    out = convert_fairseq(REFERENCE / "tupe_a" / "checkpoint_fp32.pt", tmp_path / "out",
                          dictionary=listed)
    with open(os.path.join(out, "metadata.json")) as f:
        notes = json.load(f)["keras_tupe_conversion"]["notes"]
    assert any("<mask>=112." in note for note in notes)


@needs_reference
def test_fine_tuning_a_preset_converted_without_bpe_codes_says_convert_with_them(tmp_path):
    """The converter's record (`metadata.json`) is what fine-tuning reads to say so."""
    from keras_tupe.finetuning import default_vocabulary

    checkpoint = REFERENCE / "tupe_a" / "checkpoint_fp32.pt"
    out = convert_fairseq(checkpoint, tmp_path / "out", dictionary=DICTIONARY)
    with pytest.raises(ValueError) as refused:
        default_vocabulary(str(out))
    assert str(refused.value).startswith(f"{out} is a fairseq checkpoint converted without BPE "
                                         "codes: the preset has no tokenizer")
    assert str(refused.value).endswith(
        f"Convert {checkpoint} again, giving the converter the BPE codes it was pre-trained "
        "with (`bpe_codes=`), and pass that preset.")


def test_non_empty_output_folder_is_refused(tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    (out / "keep.txt").write_text("mine")
    # Refused before the checkpoint or the dictionary is looked at.
    with pytest.raises(ConversionError, match="already exists and is not an empty folder"):
        convert_fairseq(tmp_path / "checkpoint_best.pt", out, dictionary=tmp_path / "dict.txt")
    assert os.listdir(out) == ["keep.txt"]
    assert not os.path.exists(f"{out}.partial")


def test_a_file_that_is_not_a_checkpoint_is_refused(tmp_path):
    fake = tmp_path / "checkpoint_best.pt"
    fake.write_text("not a checkpoint\n")
    dictionary = tmp_path / "dict.txt"
    dictionary.write_text("the 10\nfilm 7\n")  # fairseq's "<word> <count>" lines
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match="checkpoint_best.pt: not a fairseq checkpoint"):
        convert_fairseq(fake, out, dictionary=dictionary)
    assert_nothing_written(out)


def _with_args(checkpoint, **changes):
    modified = dict(checkpoint)
    args = copy.deepcopy(checkpoint["args"])
    for key, value in changes.items():
        setattr(args, key, value)
    modified["args"] = args
    return modified


@pytest.mark.parametrize(
    "change, message",
    [
        (lambda c: _with_args(c, encoder_normalize_before=True),
         r"args.encoder_normalize_before=True cannot be reproduced \(pre-LayerNorm"),
        (lambda c: _with_args(c, arch="roberta_base"),
         r"arch='roberta_base' is not one of the TUPE fork's BERT architectures"),
        (lambda c: _with_args(c, activation_fn="relu"),
         r"args.activation_fn='relu' cannot be reproduced.*Only activation_fn='gelu'"),
        (lambda c: _with_args(c, embedding_normalize=False),
         r"args.embedding_normalize=False cannot be reproduced"),
        (lambda c: {key: value for key, value in c.items() if key != "args"},
         r"the checkpoint has no `args`"),
        (lambda c: {**c, "model": {**c["model"], "decoder.lm_head.weight":
                                   c["model"]["decoder.lm_head.weight"] + 1}},
         r"decoder.lm_head.weight differs from embed_tokens.weight"),
        (lambda c: {**c, "model": {**c["model"], "decoder.sentence_encoder.extra.weight":
                                   np.zeros(3, "float32")}},
         r"state-dict tensors this converter does not know.*extra.weight"),
    ],
    ids=["normalize_before", "arch", "activation", "no_embedding_normalize", "no_args",
         "untied_head", "unknown_tensor"],
)
def test_checkpoints_it_cannot_reproduce_are_refused(
    tmp_path, monkeypatch, reference_checkpoint, change, message
):
    modified = change(reference_checkpoint)
    monkeypatch.setattr(fairseq, "load_torch_file", lambda path: modified)
    out = tmp_path / "out"
    with pytest.raises(ConversionError, match=message):
        convert_fairseq(REFERENCE / "tupe_r" / "checkpoint_fp32.pt", out, dictionary=DICTIONARY)
    assert_nothing_written(out)
    assert isinstance(reference_checkpoint["args"], argparse.Namespace)
    assert reference_checkpoint["args"].encoder_normalize_before is False  # not modified


# --- with the authors' tokenizer, in a fresh process -----------------------------------

# Three merges: "the" becomes one word, "ex" the dictionary's "ex@@" piece.
CODES = "#version: 0.2\nt h\nth e</w>\ne x\n"

ROUND_TRIP = r"""
import json, sys
import numpy as np
import keras_hub
import keras_tupe  # registers the family (a user's process: no command, so at import)
preset, reference = sys.argv[1], sys.argv[2]
tokens = np.load(reference + "/input_tokens.npy").astype("int32")
inputs = {"token_ids": tokens, "padding_mask": (tokens != 1).astype("int32"),
          "segment_ids": np.zeros_like(tokens)}
backbone = keras_hub.models.Backbone.from_preset(preset)
hidden = np.asarray(backbone(inputs)["sequence_output"])
masked_lm = keras_hub.models.MaskedLM.from_preset(preset)
positions = np.tile(np.arange(tokens.shape[1], dtype="int32"), (tokens.shape[0], 1))
logits = np.asarray(masked_lm({**inputs, "mask_positions": positions}))
packed = masked_lm.preprocessor.generate_preprocess(["The example"]) \
    if hasattr(masked_lm.preprocessor, "generate_preprocess") else None
classifier = keras_hub.models.TextClassifier.from_preset(preset, num_classes=2)
probabilities = np.asarray(classifier.predict(["the example", "an ex"], verbose=0))
x = classifier.preprocessor(["the example"])
x = x[0] if isinstance(x, tuple) else x
print(json.dumps({
    "classes": [type(m).__name__ for m in (backbone, masked_lm, classifier)],
    "tokenizer": type(classifier.preprocessor.tokenizer).__name__,
    "hidden": float(np.abs(hidden - np.load(reference + "/tupe_r/hidden_fp32.npy")).max()),
    "logits": float(np.abs(logits - np.load(reference + "/tupe_r/lm_logits_fp32.npy")).max()),
    "classifier_shape": list(probabilities.shape),
    "token_ids": np.asarray(x["token_ids"])[0, :8].tolist(),
}))
"""


@pytest.mark.slow
@needs_reference
def test_preset_with_the_bpe_tokenizer_round_trips_in_a_fresh_process(tmp_path):
    import subprocess
    import sys

    codes = tmp_path / "bpe-code"
    codes.write_text(CODES)
    out = convert_fairseq(REFERENCE / "tupe_r" / "checkpoint_fp16.pt", tmp_path / "preset",
                          dictionary=DICTIONARY, bpe_codes=codes)
    metadata = json.loads((Path(out) / "metadata.json").read_text())
    assert metadata["keras_tupe_conversion"]["files"]["bpe_codes"]["sha256"] == sha256(codes)
    result = subprocess.run(
        [sys.executable, "-c", ROUND_TRIP, str(out), str(REFERENCE)],
        capture_output=True, text=True, cwd=REPO,
        env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2", "KERAS_BACKEND": "tensorflow"},
    )
    assert result.returncode == 0, result.stderr[-3000:]
    row = json.loads(result.stdout.strip().splitlines()[-1])
    assert row["classes"] == ["TupeBackbone", "TupeMaskedLM", "TupeTextClassifier"]
    assert row["tokenizer"] == "TupeBpeTokenizer"
    assert row["hidden"] <= ATOL and row["logits"] <= ATOL, row
    assert row["classifier_shape"] == [2, 2]
    # <s> the ex@@ a@@ m@@ p@@ l@@ e </s>: ids from dict.txt (7 specials first),
    # pieces not in it are <unk> (3).
    words = [line.rsplit(" ", 1)[0] for line in DICTIONARY.read_text().splitlines()]
    vocab = {word: 7 + i for i, word in enumerate(words)}
    expected = [0, vocab["the"], vocab["ex@@"]] + [vocab.get(p, 3) for p in
                                                  ("a@@", "m@@", "p@@", "l@@", "e")]
    assert row["token_ids"] == expected


@needs_reference
def test_a_bpe_classifier_is_refused_by_the_string_input_export(tmp_path):
    from keras_tupe.export.classifier import export_classifier

    codes = tmp_path / "bpe-code"
    codes.write_text(CODES)
    out = convert_fairseq(REFERENCE / "tupe_a" / "checkpoint_fp32.pt", tmp_path / "preset",
                          dictionary=DICTIONARY, bpe_codes=codes)
    classifier = keras_hub.models.TextClassifier.from_preset(out, num_classes=2)
    with pytest.raises(ValueError, match="TupeBpeTokenizer.*cannot go into a string-input"):
        export_classifier(classifier, str(DICTIONARY), str(tmp_path / "serving"))
    assert not (tmp_path / "serving").exists()
