"""SavedModel export: TF-Hub encoder API parity, preprocessor, serving, versions, reuse."""

import dataclasses
import hashlib
import itertools
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tupe import data
from keras_tupe.data import glue
from keras_tupe.export import (
    export_classifier,
    export_encoder,
    export_preprocessor,
    next_version,
    write_version,
)
from keras_tupe.export.tfhub_names import from_tfhub
from keras_tupe.hub import load_encoder, load_saved_model
from keras_tupe.models import (
    TupeBackbone,
    TupeMaskedLM,
    TupeMaskedLMPreprocessor,
    TupeTextClassifier,
    TupeTokenizer,
)
from tests.packing_oracle import pack_texts, packed_batches
from keras_tupe_cli import export as export_cli

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
VARIANTS = sorted({preset.rsplit("_", 1)[0] for preset in TupeBackbone.presets})
SIZES = sorted({preset.rsplit("_", 1)[1] for preset in TupeBackbone.presets})
BATCH_SIZES, SEQUENCE_LENGTHS = (1, 3), (5, 19)
TOLERANCE = 1e-5
# Under `--dist loadgroup` (Makefile) the tests that share an export fixture run on one
# worker, which makes it once; the other sizes' parity tests, each on its own, spread.
TINY_EXPORTS = pytest.mark.xdist_group("test_export_tiny")
MASKED_LM = pytest.mark.xdist_group("test_export_masked_lm")
SST2 = pytest.mark.xdist_group("test_export_sst2")


def random_inputs(rng, batch, length, vocabulary_size):
    lengths = rng.integers(1, length + 1, batch)
    lengths[0] = length  # one full row, the others padded
    mask = (np.arange(length)[None, :] < lengths[:, None]).astype("int32")
    return {
        "input_word_ids": (rng.integers(5, vocabulary_size, (batch, length)) * mask).astype("int32"),
        "input_mask": mask,
        "input_type_ids": (rng.integers(0, 2, (batch, length)) * mask).astype("int32"),
    }


def keras_outputs(backbone, tfhub_inputs, training=False):
    """The backbone's outputs, per layer too, for TF-Hub-named inputs (the export's contract)."""
    return backbone.layer_outputs()(from_tfhub(tfhub_inputs), training=training)


def flat_outputs(outputs):
    flat = {k: keras.ops.convert_to_numpy(v) for k, v in outputs.items() if k != "encoder_outputs"}
    flat["default"] = flat["pooled_output"]
    for index, value in enumerate(outputs["encoder_outputs"]):
        flat[f"encoder_outputs_{index}"] = keras.ops.convert_to_numpy(value)
    return flat


def write_case(backbone, case):
    """Exports `backbone` to `case/saved_model`, beside its Keras outputs on random inputs."""
    os.replace(export_encoder(backbone, str(case / "export")), case / "saved_model")
    rng = np.random.default_rng(len(case.name))
    for batch, length in itertools.product(BATCH_SIZES, SEQUENCE_LENGTHS):
        inputs = random_inputs(rng, batch, length, backbone.vocabulary_size)
        np.savez(case / f"inputs_{batch}x{length}.npz", **inputs)
        np.savez(case / f"expected_{batch}x{length}.npz",
                 **flat_outputs(keras_outputs(backbone, inputs)))


def check_cases(root):
    """Every case under `root`, checked in one fresh process (`tests/saved_model_check.py`)."""
    result = subprocess.run([sys.executable, str(REPO / "tests" / "saved_model_check.py"), str(root)],
                            capture_output=True, text=True, cwd=root)
    assert result.returncode == 0, result.stderr[-3000:]
    return json.loads(result.stdout.strip().splitlines()[-1])


def run_parity(presets, root):
    """Exports each preset with its reference outputs; checks them in one fresh process."""
    for preset in presets:
        write_case(TupeBackbone.from_preset(preset), root / preset)
        keras.backend.clear_session()  # base models: one at a time in memory
    return check_cases(root)


def assert_parity(results, preset):
    assert results["__imported_keras_tupe__"] is False  # the checking process never imported it
    assert len(results[preset]["input_shapes"]) == len(BATCH_SIZES) * len(SEQUENCE_LENGTHS)
    assert results[preset]["max_abs_error"] <= TOLERANCE, results[preset]


# One variant of each attention path for `make test` (absolute; untied with the T5 bias and
# the untied [CLS]; Huang's method 4; rotary; disentangled); `make test-slow` exports the
# other variants at the tiny size, and these five at every other size (a size changes only
# widths and depth, not the exported graph's code).
QUICK_VARIANTS = ["bert_a", "tupe_r", "huang_m4", "rope", "deberta"]


@pytest.fixture(scope="module")
def tiny_exports(tmp_path_factory):
    """The five tiny encoders, exported and checked in one fresh process, with a case whose
    reference is off by 1e-3 (`test_parity_check_detects_a_wrong_output`): `(results,
    {preset: (backbone, saved_model path)})`, for the tests that need a tiny export."""
    root = tmp_path_factory.mktemp("tiny")
    backbones = {}
    for variant in QUICK_VARIANTS:
        preset = f"{variant}_tiny"
        backbones[preset] = TupeBackbone.from_preset(preset)
        write_case(backbones[preset], root / preset)
    wrong = root / "bert_a_tiny_wrong"
    shutil.copytree(root / "bert_a_tiny", wrong)
    expected = dict(np.load(wrong / "expected_3x19.npz"))
    expected["encoder_outputs_1"][0, 0, 0] += 1e-3
    np.savez(wrong / "expected_3x19.npz", **expected)
    return check_cases(root), {preset: (backbone, str(root / preset / "saved_model"))
                               for preset, backbone in backbones.items()}


@TINY_EXPORTS
@pytest.mark.parametrize("variant", QUICK_VARIANTS)
def test_exported_encoder_equals_keras_in_a_fresh_process(tiny_exports, variant):
    assert_parity(tiny_exports[0], f"{variant}_tiny")


@pytest.mark.slow
@pytest.mark.parametrize("size", [size for size in SIZES if size != "small"])
def test_every_variant_and_every_size_exports_with_parity(size, tmp_path):
    # At the tiny size, QUICK_VARIANTS are `make test`'s (`tiny_exports`). `mini` takes the
    # sizes' 512 positions with one variant per attention path (QUICK_VARIANTS); `small` and
    # `base` add only width and depth to it (the same positions, the same code paths): `base`
    # with TUPE-R alone, the variant with the most paths (untied positions, the relative
    # bias, the [CLS] reset), and `small`, between the two, not again.
    variants = (sorted(set(VARIANTS) - set(QUICK_VARIANTS)) if size == "tiny" else
                ["tupe_r"] if size == "base" else QUICK_VARIANTS)
    presets = [f"{variant}_{size}" for variant in variants]
    results = run_parity(presets, tmp_path)
    for preset in presets:
        assert_parity(results, preset)
    shutil.rmtree(tmp_path, ignore_errors=True)  # base models take ~0.4 GB each


@TINY_EXPORTS
def test_parity_check_detects_a_wrong_output(tiny_exports):
    """The checker itself: a perturbed reference must show up as an error (a copy of the
    bert_a_tiny case, one number of one layer's output off by 1e-3)."""
    assert tiny_exports[0]["bert_a_tiny_wrong"]["max_abs_error"] == pytest.approx(1e-3, rel=1e-2)
    assert tiny_exports[0]["bert_a_tiny"]["max_abs_error"] <= TOLERANCE


# The TF-Hub encoder API ----------------------------------------------------------------

@pytest.fixture(scope="module")
def exported_mlm(tmp_path_factory):
    masked_lm = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny", dropout=0.3))
    path = export_encoder(masked_lm, str(tmp_path_factory.mktemp("mlm") / "encoder"))
    return masked_lm, tf.saved_model.load(path)


@MASKED_LM
def test_encoder_api_attributes_and_dropout(exported_mlm):
    masked_lm, loaded = exported_mlm
    backbone = masked_lm.backbone
    assert not backbone.pooled_dense.trainable  # frozen by the masked LM ...
    # ... and trainable in the export, with every other weight of the encoder.
    assert len(loaded.trainable_variables) == len(backbone.trainable_weights) + 2
    assert len(loaded.variables) == len(backbone.variables)  # weights and dropout seeds
    assert list(loaded.regularization_losses) == []
    inputs = random_inputs(np.random.default_rng(1), 2, 9, backbone.vocabulary_size)
    inference = [loaded(inputs, training=False)["sequence_output"].numpy() for _ in range(2)]
    np.testing.assert_array_equal(inference[0], inference[1])
    training = [loaded(inputs, training=True)["sequence_output"].numpy() for _ in range(2)]
    assert np.abs(training[0] - training[1]).max() > 1e-3  # dropout, new masks each call
    assert np.abs(training[0] - inference[0]).max() > 1e-3
    assert len(loaded(inputs)["encoder_outputs"]) == backbone.num_layers


@MASKED_LM
def test_mlm_sub_object_equals_the_masked_lm(exported_mlm):
    masked_lm, loaded = exported_mlm
    rng = np.random.default_rng(2)
    inputs = random_inputs(rng, 3, 12, masked_lm.backbone.vocabulary_size)
    positions = rng.integers(0, 12, (3, 4)).astype("int32")
    expected = keras.ops.convert_to_numpy(
        masked_lm({**from_tfhub(inputs), "mask_positions": positions}))
    outputs = loaded.mlm({**inputs, "masked_lm_positions": positions}, training=False)
    np.testing.assert_allclose(outputs["mlm_logits"].numpy(), expected, atol=TOLERANCE, rtol=0)
    assert outputs["mlm_logits"].shape == (3, 4, masked_lm.backbone.vocabulary_size)
    # The pooler, frozen in the masked LM (no MLM gradient reaches it), trains when reused.
    assert len(loaded.mlm.trainable_variables) == len(masked_lm.trainable_weights) + len(
        masked_lm.backbone.pooled_dense.weights)


@TINY_EXPORTS
def test_length_limits_survive_export(tiny_exports):
    (absolute, absolute_path), (relative, relative_path) = (
        tiny_exports[1][preset] for preset in ("tupe_r_tiny", "huang_m4_tiny"))
    limit = absolute.max_sequence_length
    rng = np.random.default_rng(3)
    long_inputs = random_inputs(rng, 2, limit + 40, absolute.vocabulary_size)
    loaded_absolute = tf.saved_model.load(absolute_path)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_sequence_length=128"):
        loaded_absolute(long_inputs)
    with pytest.raises(tf.errors.InvalidArgumentError, match="max_sequence_length=128"):
        loaded_absolute.signatures["serving_default"](
            **{key: tf.constant(value) for key, value in long_inputs.items()})
    loaded_relative = tf.saved_model.load(relative_path)
    np.testing.assert_allclose(loaded_relative(long_inputs)["sequence_output"].numpy(),
                               keras.ops.convert_to_numpy(relative(from_tfhub(long_inputs))["sequence_output"]),
                               atol=TOLERANCE, rtol=0)


@TINY_EXPORTS
def test_keras_save_and_load_still_work_after_export(tiny_exports, tmp_path):
    backbone, _ = tiny_exports[1]["tupe_r_tiny"]  # exported by the fixture
    inputs = random_inputs(np.random.default_rng(4), 2, 7, backbone.vocabulary_size)
    backbone.save(tmp_path / "backbone.keras")
    reloaded = keras.saving.load_model(tmp_path / "backbone.keras")
    inputs = from_tfhub(inputs)
    np.testing.assert_allclose(keras.ops.convert_to_numpy(reloaded(inputs)["pooled_output"]),
                               keras.ops.convert_to_numpy(backbone(inputs)["pooled_output"]),
                               atol=1e-6, rtol=0)


# Versions: nothing is replaced silently --------------------------------------------------

def _write_marker(text):
    def write(path):
        Path(path, "saved_model.pb").write_text(text)
    return write


def test_versions_count_up_and_existing_ones_are_refused(tmp_path):
    base = tmp_path / "model"
    assert write_version(str(base), _write_marker("one")) == str(base / "1")
    assert write_version(str(base), _write_marker("two")) == str(base / "2")
    assert next_version(str(base)) == 3
    with pytest.raises(FileExistsError, match=r"version 1.*version 3.*overwrite"):
        write_version(str(base), _write_marker("clobber"), version=1)
    assert (base / "1" / "saved_model.pb").read_text() == "one"
    write_version(str(base), _write_marker("replaced"), version=1, overwrite=True)
    assert (base / "1" / "saved_model.pb").read_text() == "replaced"
    assert sorted(os.listdir(base)) == ["1", "2"]  # no staging directory left behind
    umask = os.umask(0)
    os.umask(umask)
    assert os.stat(base / "2").st_mode & 0o777 == 0o777 & ~umask  # not mkdtemp's private 0700
    for bad in (0, -1, "2", 1.5, True):
        with pytest.raises(ValueError, match="positive int"):
            write_version(str(base), _write_marker("x"), version=bad)


def test_a_failed_export_leaves_nothing(tmp_path):
    def broken(path):
        Path(path, "partial").write_text("half")
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        write_version(str(tmp_path), broken)
    assert os.listdir(tmp_path) == []


def test_export_refuses_an_existing_version(tmp_path):
    backbone = TupeBackbone.from_preset("bert_a_tiny")
    path = export_encoder(backbone, str(tmp_path), version=4)
    digest = hashlib.sha256(Path(path, "saved_model.pb").read_bytes()).hexdigest()
    with pytest.raises(FileExistsError, match="already exists"):
        export_encoder(TupeBackbone.from_preset("shaw_tiny"), str(tmp_path), version=4)
    assert hashlib.sha256(Path(path, "saved_model.pb").read_bytes()).hexdigest() == digest
    with pytest.raises(ValueError, match="TupeBackbone or a TupeMaskedLM"):
        export_encoder(keras.Sequential([keras.layers.Dense(2)]), str(tmp_path / "x"))


# Preprocessor and serving (real GLUE text) ------------------------------------------------

SPECIAL_TEXTS = ["", "   ", "Ünïcödé façade — naïve café 日本語のテキスト 🙂",
                 "word " * 5000, "x" * 3000, "A perfectly ordinary sentence."]


@pytest.fixture(scope="module")
def sst2_vocab(tmp_path_factory):
    """A 600-token WordPiece vocabulary trained on SST-2 training sentences."""
    root = tmp_path_factory.mktemp("sst2_vocab")
    sentences = glue.load_glue("sst2", "train", DATA_DIR).sentence1[:3000]
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(sentences) + "\n")
    return data.train_vocabulary(str(corpus), 600, str(root / "vocab.txt"))


@pytest.fixture(scope="module")
def sst2_preprocessor(sst2_vocab, tmp_path_factory):
    """The SST-2 vocabulary's preprocessor SavedModel (seq_length=32): its path."""
    return export_preprocessor(sst2_vocab, str(tmp_path_factory.mktemp("sst2_preprocessor")),
                               seq_length=32)


@SST2
def test_preprocessor_gives_the_training_pipelines_ids(sst2_vocab, sst2_preprocessor):
    tokenizer = data.load_tokenizer(sst2_vocab)
    preprocessor = load_saved_model(sst2_preprocessor)
    # Single sentences: the default call against the packing oracle's batches.
    examples = glue.load_glue("sst2", "validation", DATA_DIR)
    examples = dataclasses.replace(examples, sentence1=examples.sentence1[:200],
                                   labels=examples.labels[:200])
    dataset = packed_batches(examples, tokenizer, 32, 200)
    features, _ = next(iter(dataset))
    packed = from_tfhub(preprocessor(tf.constant(examples.sentence1[:200])))
    assert set(packed) == set(features) == {"token_ids", "padding_mask", "segment_ids"}
    for key in features:
        np.testing.assert_array_equal(packed[key].numpy(), features[key].numpy()[:200])
    # Pairs (MRPC) through tokenize + bert_pack_inputs with another seq_length.
    mrpc = glue.load_glue("mrpc", "validation", DATA_DIR)
    first, second = mrpc.sentence1[:100], mrpc.sentence2[:100]
    segments = [preprocessor.tokenize(tf.constant(first)), preprocessor.tokenize(tf.constant(second))]
    packed = from_tfhub(preprocessor.bert_pack_inputs(segments, seq_length=24))
    expected = pack_texts(tokenizer, 24, first, second)
    for key in expected:
        np.testing.assert_array_equal(packed[key].numpy(), expected[key].numpy())
    # Empty, very long and non-ASCII text: the same ids, truncated, never a crash.
    packed = from_tfhub(preprocessor(tf.constant(SPECIAL_TEXTS)))
    expected = pack_texts(tokenizer, 32, SPECIAL_TEXTS)
    for key in expected:
        np.testing.assert_array_equal(packed[key].numpy(), expected[key].numpy())
    assert packed["padding_mask"].numpy()[0].sum() == 2  # [CLS] [SEP] for ""
    assert packed["padding_mask"].numpy()[3].sum() == 32  # truncated
    # The vocabulary travels as an asset.
    assert Path(preprocessor.vocab_file.asset_path.numpy().decode()).read_bytes() == \
        Path(sst2_vocab).read_bytes()
    assert bool(preprocessor.do_lower_case.numpy()) is True


@SST2
def test_preprocessor_rejects_a_too_short_seq_length(sst2_vocab, sst2_preprocessor, tmp_path):
    with pytest.raises(ValueError, match="seq_length"):
        export_preprocessor(sst2_vocab, str(tmp_path), seq_length=2)
    assert os.listdir(tmp_path) == []
    preprocessor = load_saved_model(sst2_preprocessor)
    tokens = preprocessor.tokenize(tf.constant(["a b"]))
    with pytest.raises(tf.errors.InvalidArgumentError, match="seq_length"):
        preprocessor.bert_pack_inputs([tokens, tokens], seq_length=3)


@pytest.fixture(scope="module")
def sst2_classifier(sst2_vocab):
    size = data.load_tokenizer(sst2_vocab).vocabulary_size()
    return TupeTextClassifier(TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size),
                          num_classes=2)


def keras_probabilities(classifier, tokenizer, first, second=None, seq_length=32):
    logits = classifier(pack_texts(tokenizer, seq_length, first, second), training=False)
    return keras.ops.convert_to_numpy(keras.ops.softmax(logits, axis=-1))


@SST2
@pytest.mark.slow  # two fresh processes: TensorFlow's saved_model_cli and ours
def test_serving_model_answers_saved_model_cli(sst2_vocab, sst2_classifier, tmp_path):
    tokenizer = data.load_tokenizer(sst2_vocab)
    path = export_classifier(sst2_classifier, sst2_vocab, str(tmp_path / "sst2"), seq_length=32,
                             label_names=("negative", "positive"))
    assert path == str(tmp_path / "sst2" / "1")  # TensorFlow Serving's layout
    shown = subprocess.run(
        [str(Path(sys.executable).parent / "saved_model_cli"), "show", "--dir", path,
         "--tag_set", "serve", "--signature_def", "serving_default"],
        capture_output=True, text=True)
    assert shown.returncode == 0, shown.stderr[-2000:]
    for text in ("inputs['sentence']", "DT_STRING", "outputs['probabilities']",
                 "outputs['label']", "outputs['class_id']"):
        assert text in shown.stdout
    # The console script (keras-tupe-saved-model-cli, through its `training.` module) answers
    # as the Keras model does, without TensorFlow's INFO lines and deprecation warnings
    # (issue 23), the answer on stdout as well as in --outdir.
    texts = SPECIAL_TEXTS + ["a gorgeous , witty , seductive movie .", "dull and lifeless"]
    answer = subprocess.run(
        [sys.executable, "-m", "training.saved_model_cli", "run", "--dir", path,
         "--tag_set", "serve", "--signature_def", "serving_default",
         "--input_exprs", f"sentence={json.dumps(texts, ensure_ascii=False)}", "--outdir", str(tmp_path / "answer")],
        capture_output=True, text=True, cwd=REPO)
    assert answer.returncode == 0, answer.stderr[-3000:]
    probabilities = np.load(tmp_path / "answer" / "probabilities.npy")
    np.testing.assert_allclose(probabilities, keras_probabilities(sst2_classifier, tokenizer, texts),
                               atol=TOLERANCE, rtol=0)
    np.testing.assert_allclose(probabilities.sum(axis=-1), 1.0, atol=1e-6)
    labels = np.load(tmp_path / "answer" / "label.npy", allow_pickle=True)
    expected = np.array(["negative", "positive"])[probabilities.argmax(-1)]
    assert [label.decode() for label in labels] == list(expected)
    assert "Result for output key label:" in answer.stdout
    assert "deprecated" not in answer.stderr and "INFO:tensorflow" not in answer.stderr
    assert "Restoring parameters" not in answer.stderr, answer.stderr


@pytest.fixture(scope="module")
def sst2_served(sst2_vocab, sst2_classifier, tmp_path_factory):
    """The classifier's serving SavedModel (seq_length=24): its version folder."""
    return Path(export_classifier(sst2_classifier, sst2_vocab,
                                  str(tmp_path_factory.mktemp("sst2_served")), seq_length=24))


def export_with_a_cut_copy(sst2_served, model):
    """`model/1`, a copy of the classifier export, and `model/2`, which the test fills from
    it as a copy cut short would; returns version 1's folder."""
    first = model / "1"
    shutil.copytree(sst2_served, first)
    (model / "2").mkdir()
    return first


@SST2
def test_predict_skips_a_version_holding_only_its_graph(sst2_served, tmp_path, capsys):
    """Was: two TensorFlow error lines, one a wrong `experimental_io_device` hint."""
    from keras_tupe_cli import predict

    model = tmp_path / "sst2"
    first = export_with_a_cut_copy(sst2_served, model)
    shutil.copy(first / "saved_model.pb", model / "2")
    assert predict.main([str(model), "a gorgeous film"]) == 0
    out, err = capsys.readouterr()
    note, answer, _ = out.splitlines()
    assert note == ("(skipping the incomplete version 2 (no variables/variables.index); using "
                    f"version 1: {first})")
    assert answer.endswith("  'a gorgeous film'") and err == ""


@SST2
def test_predict_names_a_version_whose_variables_are_cut_as_corrupt(sst2_served, tmp_path,
                                                                    capsys):
    """Was: a 32-line traceback ending `IndexError: Read less bytes than requested`."""
    from keras_tupe_cli import predict

    model = tmp_path / "sst2"
    first = export_with_a_cut_copy(sst2_served, model)
    shutil.copytree(first, model / "2", dirs_exist_ok=True)
    [data_file] = (model / "2" / "variables").glob("variables.data-*")
    os.truncate(data_file, data_file.stat().st_size // 2)
    assert predict.main([str(model), "a gorgeous film"]) == 2
    out, err = capsys.readouterr()
    assert out == f"(using the newest version of 2: {model / '2'})\n"
    assert err == (f"error: {model / '2'} is corrupt: TensorFlow cannot read it (Read less "
                   f"bytes than requested). Export it again, or pass {first}.\n")


@SST2
def test_pair_serving_model_takes_two_sentences(sst2_vocab, sst2_classifier, tmp_path):
    tokenizer = data.load_tokenizer(sst2_vocab)
    path = export_classifier(sst2_classifier, sst2_vocab, str(tmp_path), seq_length=24,
                             num_segments=2)
    serving = load_saved_model(path).signatures["serving_default"]
    assert sorted(serving.structured_input_signature[1]) == ["sentence1", "sentence2"]
    mrpc = glue.load_glue("mrpc", "validation", DATA_DIR)
    first, second = mrpc.sentence1[:16] + ["", "ünï"], mrpc.sentence2[:16] + ["x " * 900, ""]
    outputs = serving(sentence1=tf.constant(first), sentence2=tf.constant(second))
    assert "label" not in outputs
    np.testing.assert_allclose(
        outputs["probabilities"].numpy(),
        keras_probabilities(sst2_classifier, tokenizer, first, second, seq_length=24),
        atol=TOLERANCE, rtol=0)


@SST2
def test_serving_export_rejects_bad_settings(sst2_vocab, sst2_classifier, tmp_path):
    with pytest.raises(ValueError, match="num_segments"):
        export_classifier(sst2_classifier, sst2_vocab, str(tmp_path), num_segments=3)
    with pytest.raises(ValueError, match="label_names"):
        export_classifier(sst2_classifier, sst2_vocab, str(tmp_path), label_names=("a",))
    with pytest.raises(ValueError, match="max_sequence_length"):
        export_classifier(sst2_classifier, sst2_vocab, str(tmp_path), seq_length=4096)
    assert not (tmp_path / "1").exists()


def test_a_cased_serving_model_keeps_case_as_its_training_pipeline_did(tmp_path):
    """The serving graph tokenizes as fine-tuning did: cased (`lowercase=False`) "Good" and
    "good" are other ids, so other probabilities, each those of the Keras classifier on the
    training pipeline's packing; lowercased, the two are one input. (In process: the graph
    `export_classifier` saves, not saved.)"""
    from keras_tupe.export.classifier import classifier_module
    from keras_tupe.models import TupeTextClassifierPreprocessor

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "good", "Good",
                                "film"]) + "\n")
    keras.utils.set_random_seed(0)
    backbone = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=8)
    classifier = TupeTextClassifier(backbone, num_classes=2, preprocessor=None)
    texts = ["Good film", "good film"]
    for lowercase in (False, True):
        module, _ = classifier_module(classifier, str(vocab), seq_length=8, lowercase=lowercase)
        served = module.predict(tf.constant(texts))["probabilities"].numpy()
        packer = TupeTextClassifierPreprocessor(
            TupeTokenizer(vocabulary=str(vocab), lowercase=lowercase), sequence_length=8)
        trained = keras.ops.softmax(classifier.predict_on_batch(packer(texts)), axis=-1)
        np.testing.assert_allclose(served, keras.ops.convert_to_numpy(trained), atol=1e-6)
        assert (np.abs(served[0] - served[1]).max() > 1e-6) == (not lowercase), lowercase


# Reuse: fine-tuning a reloaded encoder -------------------------------------------------

def sst2_batches(vocab, count=128, seq_length=32, batch_size=32):
    tokenizer = data.load_tokenizer(vocab)
    examples = glue.load_glue("sst2", "train", DATA_DIR)
    features = pack_texts(tokenizer, seq_length, examples.sentence1[:count])
    features = {k: v.numpy() for k, v in features.items()}
    return features, np.asarray(examples.labels[:count])


def reuse_model(handle):
    encoder = load_encoder(handle)
    inputs = {name: keras.Input((None,), dtype="int32", name=name)
              for name in ("token_ids", "padding_mask", "segment_ids")}
    logits = keras.layers.Dense(2, name="logits")(encoder(inputs)["pooled_output"])
    model = keras.Model(inputs, logits)
    model.compile(optimizer=keras.optimizers.AdamW(3e-3, weight_decay=0.01),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    return model, encoder


@pytest.fixture(scope="module")
def sst2_encoder(sst2_vocab, tmp_path_factory):
    size = data.load_tokenizer(sst2_vocab).vocabulary_size()
    backbone = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size)
    return export_encoder(backbone, str(tmp_path_factory.mktemp("sst2_encoder")))


@SST2
def test_reloaded_encoder_fine_tunes_with_adamw(sst2_vocab, sst2_encoder):
    features, labels = sst2_batches(sst2_vocab)
    model, encoder = reuse_model(sst2_encoder)
    assert encoder.trainable_weights and all(":" not in w.name for w in encoder.trainable_weights)
    before = [w.numpy().copy() for w in encoder.trainable_weights]
    loss_before = model.evaluate(features, labels, verbose=0)
    model.fit(features, labels, batch_size=32, epochs=4, verbose=0)
    assert model.evaluate(features, labels, verbose=0) < loss_before - 0.02
    changed = [np.abs(w.numpy() - b).max() > 0 for w, b in zip(encoder.trainable_weights, before)]
    assert np.mean(changed) > 0.9
    small = {k: v[:4] for k, v in features.items()}
    dropped = [keras.ops.convert_to_numpy(encoder(small, training=True)["pooled_output"])
               for _ in range(2)]
    assert np.abs(dropped[0] - dropped[1]).max() > 1e-4  # dropout active when training


@SST2
def test_frozen_reloaded_encoder_does_not_move(sst2_vocab, sst2_encoder):
    features, labels = sst2_batches(sst2_vocab, count=64)
    encoder = load_encoder(sst2_encoder, trainable=False)
    assert encoder.trainable_weights == [] and encoder.non_trainable_weights
    inputs = {name: keras.Input((None,), dtype="int32", name=name) for name in features}
    model = keras.Model(inputs, keras.layers.Dense(2)(encoder(inputs)["pooled_output"]))
    model.compile("adamw", keras.losses.SparseCategoricalCrossentropy(from_logits=True))
    before = [w.numpy().copy() for w in encoder.weights]
    model.fit(features, labels, epochs=1, verbose=0)
    for weight, value in zip(encoder.weights, before):
        if "seed_generator" not in weight.name:
            np.testing.assert_array_equal(weight.numpy(), value)


MIRRORED_SCRIPT = """
import json, os, sys
os.environ["TF_CPP_MIN_LOG_LEVEL"] = "3"
import keras, numpy as np, tensorflow as tf
keras.utils.set_random_seed(1234)
tf.config.set_logical_device_configuration(
    tf.config.list_physical_devices("CPU")[0], [tf.config.LogicalDeviceConfiguration()] * 2)
sys.path.insert(0, sys.argv[3])
from tests.export.test_export import reuse_model
data = np.load(sys.argv[2])
features = {k: data[k] for k in ("token_ids", "padding_mask", "segment_ids")}
strategy = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
with strategy.scope():
    model, encoder = reuse_model(sys.argv[1])
before = [w.numpy().copy() for w in encoder.trainable_weights]
loss_before = model.evaluate(features, data["labels"], batch_size=32, verbose=0)
model.fit(features, data["labels"], batch_size=32, epochs=4, verbose=0)
print(json.dumps({
    "replicas": strategy.num_replicas_in_sync,
    "mirrored": all(isinstance(w.value, tf.distribute.DistributedValues)
                    for w in encoder.trainable_weights),
    "loss_before": loss_before,
    "loss_after": model.evaluate(features, data["labels"], batch_size=32, verbose=0),
    "changed": float(np.mean([np.abs(w.numpy() - b).max() > 0
                              for w, b in zip(encoder.trainable_weights, before)])),
}))
"""


@SST2
@pytest.mark.slow
def test_reloaded_encoder_fine_tunes_under_mirrored_strategy(sst2_vocab, sst2_encoder, tmp_path):
    # A process of its own: TensorFlow numbers the collective all-reduces of every
    # MirroredStrategy from the same key, so on logical CPUs a second strategy in one
    # process can meet the first one's collectives (plain Keras models show it too).
    features, labels = sst2_batches(sst2_vocab)
    np.savez(tmp_path / "data.npz", labels=labels, **features)
    script = tmp_path / "mirrored_check.py"
    script.write_text(MIRRORED_SCRIPT)
    result = subprocess.run([sys.executable, str(script), sst2_encoder, str(tmp_path / "data.npz"),
                             str(REPO)], capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["replicas"] == 2 and report["mirrored"] is True
    assert report["loss_after"] < report["loss_before"] - 0.02
    assert report["changed"] > 0.9


@SST2
def test_load_encoder_errors_name_the_problem(tmp_path, sst2_preprocessor):
    with pytest.raises(FileNotFoundError, match="No SavedModel"):
        load_encoder(str(tmp_path))
    import tensorflow_text  # noqa: F401
    with pytest.raises(ValueError, match="not a reusable encoder"):
        load_encoder(sst2_preprocessor)
    with pytest.raises(ValueError, match="output_key"):
        load_encoder(sst2_preprocessor, output_key="logits")


TF_HUB_SCRIPT = """
import json, os, sys
os.environ["TF_USE_LEGACY_KERAS"] = "1"
import numpy as np, tensorflow as tf, tensorflow_hub as hub, tf_keras
tf_keras.utils.set_random_seed(1234)
handle, data = sys.argv[1], np.load(sys.argv[2])
# TF-Hub's names: the SavedModel's contract (keras_tupe's pipelines use keras-hub's).
features = {tfhub: data[k] for tfhub, k in (("input_word_ids", "token_ids"),
            ("input_mask", "padding_mask"), ("input_type_ids", "segment_ids"))}
layer = hub.KerasLayer(handle, trainable=True)
inputs = {k: tf_keras.Input((None,), dtype=tf.int32, name=k) for k in features}
model = tf_keras.Model(inputs, tf_keras.layers.Dense(2)(layer(inputs)["pooled_output"]))
pooled = tf_keras.Model(inputs, layer(inputs)["pooled_output"])(features, training=False).numpy()
model.compile(tf_keras.optimizers.Adam(3e-3),
              tf_keras.losses.SparseCategoricalCrossentropy(from_logits=True))
before = [w.numpy().copy() for w in layer.trainable_weights]
loss_before = model.evaluate(features, data["labels"], verbose=0)
model.fit(features, data["labels"], batch_size=32, epochs=4, verbose=0)
print(json.dumps({
    "pooled_error": float(np.abs(pooled - data["pooled"]).max()),
    "loss_before": loss_before, "loss_after": model.evaluate(features, data["labels"], verbose=0),
    "trainable": len(layer.trainable_weights),
    "changed": float(np.mean([np.abs(w.numpy() - b).max() > 0
                              for w, b in zip(layer.trainable_weights, before)])),
    "keras_tupe_imported": any(m.startswith("keras_tupe") for m in sys.modules),
}))
"""


@SST2
def test_tf_keras_hub_keras_layer_loads_and_fine_tunes(sst2_vocab, sst2_encoder, tmp_path):
    """Users of tf-keras + tensorflow_hub load the same SavedModel (separate process)."""
    features, labels = sst2_batches(sst2_vocab)
    encoder = load_encoder(sst2_encoder)
    pooled = keras.ops.convert_to_numpy(encoder(features, training=False)["pooled_output"])
    np.savez(tmp_path / "data.npz", labels=labels, pooled=pooled, **features)
    script = tmp_path / "hub_check.py"
    script.write_text(TF_HUB_SCRIPT)
    result = subprocess.run([sys.executable, str(script), sst2_encoder, str(tmp_path / "data.npz")],
                            capture_output=True, text=True, cwd=tmp_path)
    assert result.returncode == 0, result.stderr[-3000:]
    report = json.loads(result.stdout.strip().splitlines()[-1])
    assert report["keras_tupe_imported"] is False
    assert report["pooled_error"] <= TOLERANCE
    assert report["trainable"] == len(encoder.trainable_weights)
    assert report["changed"] > 0.9
    assert report["loss_after"] < report["loss_before"] - 0.02


# The command line ----------------------------------------------------------------------

def test_export_cli_writes_all_three_and_refuses_overwrites(sst2_vocab, tmp_path, capsys):
    from keras_tupe.finetuning import save_classifier

    size = data.load_tokenizer(sst2_vocab).vocabulary_size()
    run = tmp_path / "run"  # a pre-training run folder: its model is its preset/
    masked_lm = TupeMaskedLM(
        TupeBackbone.from_preset("huang_m4_tiny", vocabulary_size=size),
        preprocessor=TupeMaskedLMPreprocessor(TupeTokenizer(vocabulary=sst2_vocab)))
    masked_lm.save_to_preset(str(run / "preset"))
    out = tmp_path / "saved_models"
    assert export_cli.main(["encoder", "--init", str(run), "--out", str(out / "enc"),
                            "--with-mlm"]) == 0
    assert hasattr(tf.saved_model.load(str(out / "enc" / "1")), "mlm")
    assert export_cli.main(["preprocessor", "--init", str(run), "--out", str(out / "pre"),
                            "--seq-len", "64"]) == 0
    preprocessor = load_saved_model(str(out / "pre" / "1"))
    assert preprocessor(tf.constant(["a b"]))["input_word_ids"].shape == (1, 64)
    classifier = TupeTextClassifier(masked_lm.backbone, num_classes=2)
    save_classifier(classifier, str(tmp_path / "clf"), sst2_vocab,
                    {"task": "sst2", "seq_len": 32, "lowercase": True, "num_segments": 1,
                     "label_names": ["negative", "positive"]})
    assert export_cli.main(["classifier", "--init", str(tmp_path / "clf"),
                            "--out", str(out / "sst2")]) == 0
    answer = load_saved_model(str(out / "sst2" / "1")).signatures["serving_default"](
        sentence=tf.constant(["fine"]))
    assert answer["label"].numpy()[0] in (b"negative", b"positive")
    capsys.readouterr()
    assert export_cli.main(["encoder", "--init", str(run), "--out", str(out / "enc"),
                            "--version", "1"]) == 2
    assert "already exists" in capsys.readouterr().err
    assert export_cli.main(["encoder", "--init", str(tmp_path / "nothing"),
                            "--out", str(out / "x")]) == 2
    assert "nothing does not exist" in capsys.readouterr().err  # checked before TensorFlow
    assert not (out / "x").exists()


@SST2
def test_save_classifier_never_replaces_a_directory(sst2_vocab, sst2_classifier, tmp_path):
    from keras_tupe.finetuning import load_classifier, save_classifier

    info = {"task": "sst2", "seq_len": 32, "lowercase": True, "num_segments": 1,
            "label_names": ["negative", "positive"]}
    path = save_classifier(sst2_classifier, str(tmp_path / "clf"), sst2_vocab, info)
    model, vocab, loaded_info = load_classifier(path)
    assert loaded_info == info and Path(vocab).read_bytes() == Path(sst2_vocab).read_bytes()
    inputs = pack_texts(data.load_tokenizer(vocab), 32, ["a fine film"])
    np.testing.assert_allclose(keras.ops.convert_to_numpy(model(inputs)),
                               keras.ops.convert_to_numpy(sst2_classifier(inputs)), atol=1e-6)
    with pytest.raises(FileExistsError, match="already exists"):
        save_classifier(sst2_classifier, path, sst2_vocab, info)
    with pytest.raises(FileNotFoundError, match="holds no fine-tuned classifier"):
        load_classifier(str(tmp_path))


@pytest.mark.slow
def test_demo_runs_end_to_end(tmp_path):
    """`make demo`, shortened: pre-train, fine-tune, export, predict in a fresh process."""
    result = subprocess.run(
        [sys.executable, "-m", "training.demo", "--data-dir", str(DATA_DIR),
         "--out", str(tmp_path / "runs"), "--export-dir", str(tmp_path / "saved_models"),
         "--steps", "3", "--vocab-lines", "200", "--vocabulary-size", "300",
         "--finetune-examples", "64", "--epochs", "1"],
        capture_output=True, text=True, cwd=REPO)
    assert result.returncode == 0, result.stderr[-3000:]
    for kind in ("encoder", "preprocessor", "sst2"):
        assert (tmp_path / "saved_models" / f"demo_tupe_r_tiny_{kind}" / "1" /
                "saved_model.pb").exists()
    predictions = [line for line in result.stdout.splitlines()
                   if line.startswith(("positive", "negative"))]
    assert len(predictions) == 5
    assert "keras_tupe modules loaded: none" in result.stdout
