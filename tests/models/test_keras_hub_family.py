"""The keras-hub model family: keras-hub's own harness, then what it does not check.

keras-hub's `TestCase` (`keras_hub/src/tests/test_case.py`), called as keras-hub
calls it on BERT: `run_backbone_test` with its precision and quantization checks,
`run_task_test`, `run_model_saving_test`, `run_preset_test` and
`run_preprocessor_test`, on every variant's tiny preset. Then behaviour it does
not check: preprocessing against hand-packed ids and the GLUE packing, BERT's
masking statistics, task outputs computed by hand, preset folders read back in a
fresh process that imports nothing of keras_tupe but its registration, and the
exact messages of bad input.
"""

import functools
import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

# keras-hub's test harness has no public name; its own model tests import it from here
# (as a module: a `TestCase` name here would be collected by pytest).
from keras_hub.src.tests import test_case

from keras_tupe.data import load_tokenizer
from tests.backends import backends
from tests.packing_oracle import pack_texts
from keras_tupe.models import (
    TupeBackbone,
    TupeMaskedLM,
    TupeMaskedLMPreprocessor,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)
from keras_tupe_base.presets import PRESETS, VARIANTS

REPO = Path(__file__).resolve().parents[2]
ALL_VARIANTS = sorted(VARIANTS)
SPECIALS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
PAD, CLS, SEP, UNK, MASK = range(5)
WORDS = (
    "the a an film movie fine dull good bad great is was not very and or but this that it "
    "of to in on for with by at as be are were has had do did play plays story actor actors "
    "plot scene scenes music long short funny sad boring brilliant awful nice cast ending "
    "script"
).split()
VOCABULARY = SPECIALS + WORDS
V = len(VOCABULARY)
HIDDEN = 64  # SIZES["tiny"]["hidden_dim"], written out
# The tasks compile with `jit_compile="auto"`, XLA on TensorFlow too: a compile of most of a
# minute for each traced function on CPU. The tests below check what the tasks compute and
# save, not XLA, so they compile without it; fine-tuning and pre-training train the tasks
# under XLA, their default (tests/finetuning/test_finetuning.py, tests/training/test_pretrain.py), and JAX always
# compiles.
NO_XLA = {"jit_compile": False} if keras.backend.backend() == "tensorflow" else {}

SENTENCES = ["a fine film", "a dull film", "the plot was long", "a great cast and a nice ending"]
LABELS = [1, 0, 0, 1]


def ids(text):
    """Token ids of a text made of vocabulary words, looked up by hand (lowercase)."""
    return [VOCABULARY.index(word) for word in text.lower().split()]


def to_numpy(tree):
    return keras.tree.map_structure(lambda x: np.asarray(keras.ops.convert_to_numpy(x)), tree)


def assert_outputs_close(got, want, atol=1e-6):
    got, want = to_numpy(got), to_numpy(want)
    assert sorted(got) == sorted(want)
    for key in want:
        assert got[key].shape == want[key].shape, key
        np.testing.assert_allclose(got[key], want[key], atol=atol, rtol=0, err_msg=key)


def backbone_inputs(batch=2, length=12, vocabulary_size=1024, seed=0):
    """[CLS] first, random tokens, the second row padded over its last 4 positions."""
    rng = np.random.default_rng(seed)
    token_ids = rng.integers(5, vocabulary_size, (batch, length)).astype("int32")
    token_ids[:, 0] = CLS
    mask = np.ones((batch, length), "int32")
    mask[1, length - 4:] = 0
    token_ids[mask == 0] = PAD
    segment_ids = np.zeros((batch, length), "int32")
    segment_ids[:, length // 2:] = 1
    segment_ids[mask == 0] = 0
    return {"token_ids": token_ids, "padding_mask": mask, "segment_ids": segment_ids}


def randomize(model, seed):
    """Every trainable weight random, so that none (e.g. a zero-initialized table) hides."""
    rng = np.random.default_rng(seed)
    for variable in model.trainable_weights:
        variable.assign(rng.normal(0.0, 0.05, variable.shape).astype(variable.dtype))
    return model


@functools.lru_cache(maxsize=None)
def variant_backbone(variant):
    """One randomized tiny backbone per variant, built once for the whole module."""
    keras.utils.set_random_seed(ALL_VARIANTS.index(variant))
    backbone = TupeBackbone.from_preset(f"{variant}_tiny")
    return randomize(backbone, seed=ALL_VARIANTS.index(variant))


@pytest.fixture(scope="module")
def vocab_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocabulary.txt"
    path.write_text("".join(token + "\n" for token in VOCABULARY), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="module")
def vocab_list():
    return list(VOCABULARY)


@pytest.fixture(scope="module")
def tokenizer(vocab_list):
    return TupeTokenizer(vocabulary=vocab_list)


def small_backbone(variant, seed=0):
    """A tiny backbone whose vocabulary is the test vocabulary (a preset folder's check)."""
    keras.utils.set_random_seed(seed)
    return randomize(TupeBackbone.from_preset(f"{variant}_tiny", vocabulary_size=V), seed)


def classifier(tokenizer, variant="bert_a", num_classes=2, seed=0, sequence_length=16):
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=sequence_length)
    model = TupeTextClassifier(small_backbone(variant, seed), num_classes,
                               preprocessor=preprocessor)
    randomize(model, seed)  # the head too
    return model


def masked_lm(tokenizer, variant="tupe_r", seed=0):
    preprocessor = TupeMaskedLMPreprocessor(tokenizer, sequence_length=16)
    model = TupeMaskedLM(small_backbone(variant, seed), preprocessor=preprocessor)
    return randomize(model, seed)


# --- keras-hub's harness (keras_hub/src/tests/test_case.py), called on every variant ----------

# One variant per attention path in the fast suite: dot-product logits with TUPE's
# untied correlation, T5 bias and [CLS] reset (tupe_r), with BERT-A^d's projections
# (bert_a_d), rotary, DeBERTa's disentangled attention, Huang's query-key-relative
# product (huang_m4). The other variants are in `make test-slow`.
FAST_VARIANTS = ("tupe_r", "bert_a_d", "rope", "deberta", "huang_m4")
# The task checks exercise the task classes, which are the same code on every backbone (a
# backbone's sequence and pooled outputs, each variant's in keras-hub's backbone checks
# above): tupe_r's. Every variant's classifier and masked LM are saved and reloaded through
# keras-hub's base classes with the same outputs in test_keras_hub_preset_checks.
TASK_VARIANTS = ("tupe_r",)


def variants(fast, among=ALL_VARIANTS, on_jax=()):
    """Every variant of `among`: `fast` ones in `make test` (those of `on_jax` again under JAX),
    the others in `make test-slow`."""
    return [pytest.param(v, marks=(backends,) * (v in on_jax) if v in fast else pytest.mark.slow)
            for v in among]


class KerasHubHarness(test_case.TestCase):
    """keras-hub's own TestCase: its checks are its methods, called by the tests below."""

    __test__ = False  # not collected itself (TensorFlow's TestCase has a `test_session`)

    def runTest(self):
        pass


@pytest.fixture
def harness():
    case = KerasHubHarness()
    case.setUp()
    yield case
    case.tearDown()


def tiny(variant, **changes):
    """The constructor arguments of the variant's tiny preset."""
    return {**PRESETS[f"{variant}_tiny"], **changes}


OUTPUT_SHAPES = {"sequence_output": (2, 12, HIDDEN), "pooled_output": (2, HIDDEN)}


@pytest.mark.parametrize("variant", variants(FAST_VARIANTS, on_jax=("tupe_r", "deberta")))
def test_keras_hub_backbone_checks(variant, harness):
    # Serialization, eager and variable-length calls, compiled predict on arrays and
    # tf.data, the name; mixed_float16 / mixed_bfloat16 / bfloat16 reach every sublayer;
    # int8 and float8 DTypePolicyMaps reach every Dense, EinsumDense and Embedding.
    harness.run_backbone_test(cls=TupeBackbone, init_kwargs=tiny(variant),
                              input_data=backbone_inputs(), expected_output_shape=OUTPUT_SHAPES)
    harness.run_model_saving_test(cls=TupeBackbone, init_kwargs=tiny(variant),
                                  input_data=backbone_inputs())


TRAIN_DATA = (SENTENCES[:2], LABELS[:2])
# Every token masked, always by [MASK], with a slot for each of the 6 a sequence of 8 holds:
# the same masks on every call.
DETERMINISTIC_MASKING = dict(mask_selection_rate=1.0, mask_token_rate=1.0, random_token_rate=0.0,
                             mask_selection_length=6)


def task_kwargs(variant, tokenizer, task):
    backbone = TupeBackbone(**tiny(variant, vocabulary_size=V))
    if task is TupeTextClassifier:
        preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=8)
        return dict(backbone=backbone, preprocessor=preprocessor, num_classes=2)
    # predict on arrays and on tf.data agree only with the same masks.
    preprocessor = TupeMaskedLMPreprocessor(tokenizer, sequence_length=8, **DETERMINISTIC_MASKING)
    return dict(backbone=backbone, preprocessor=preprocessor)


# Under JAX the classifier's (pre-training under JAX trains the masked LM: tests/training/test_jax_training.py).
@pytest.mark.parametrize("task", [pytest.param(TupeTextClassifier, marks=backends, id="classifier"),
                                  pytest.param(TupeMaskedLM, id="mlm")])
@pytest.mark.parametrize("variant", TASK_VARIANTS)
def test_keras_hub_task_checks(variant, task, harness, tokenizer):
    # Predict and fit on raw strings, on tf.data and with split preprocessing (the
    # same outputs), compile=False refused by fit; then a .keras round trip.
    init_kwargs = task_kwargs(variant, tokenizer, task)
    if task is TupeTextClassifier:
        train_data, output_shape = TRAIN_DATA, (2, 2)
    else:
        train_data, output_shape = (TRAIN_DATA[0],), (2, 6, V)
    harness.run_task_test(cls=task, init_kwargs=init_kwargs, train_data=train_data,
                          expected_output_shape=output_shape, compile_kwargs=NO_XLA)
    input_data = init_kwargs["preprocessor"](*train_data)[0]
    harness.run_model_saving_test(cls=task, init_kwargs=init_kwargs, input_data=input_data)


@pytest.mark.parametrize("variant", variants(FAST_VARIANTS, on_jax=("tupe_r",)))
def test_keras_hub_preset_checks(variant, harness, tokenizer, tmp_path):
    # The built-in name: the architecture (no published weights), "clowntown" refused.
    harness.run_preset_test(cls=TupeBackbone, preset=f"{variant}_tiny",
                            input_data=backbone_inputs(), expected_output_shape=OUTPUT_SHAPES)
    # Folders written by save_to_preset, read through keras-hub's base classes: the same
    # outputs, and load_weights=False builds the architecture.
    backbone = variant_backbone(variant)
    inputs = backbone_inputs()
    folder = str(tmp_path / "backbone")
    backbone.save_to_preset(folder)
    harness.run_preset_test(cls=keras_hub.models.Backbone, preset=folder, input_data=inputs,
                            expected_output=backbone(inputs))
    assert type(keras_hub.models.Backbone.from_preset(folder)) is TupeBackbone
    # What the harness leaves out: load_weights=False draws fresh weights.
    fresh = TupeBackbone.from_preset(folder, load_weights=False)
    assert not np.allclose(to_numpy(fresh(inputs))["pooled_output"],
                           to_numpy(backbone(inputs))["pooled_output"], atol=1e-3)

    inputs = backbone_inputs(vocabulary_size=V)
    mlm_inputs = {**inputs, "mask_positions": np.array([[1, 3], [2, 5]], "int32")}
    for model, base, x in ((classifier(tokenizer, variant, seed=3),
                            keras_hub.models.TextClassifier, inputs),
                           (masked_lm(tokenizer, variant, seed=5), keras_hub.models.MaskedLM,
                            mlm_inputs)):
        folder = str(tmp_path / base.__name__)
        model.save_to_preset(folder)
        harness.run_preset_test(cls=base, preset=folder, input_data=x, expected_output=model(x))
        restored = base.from_preset(folder)
        assert type(restored) is type(model)
        assert type(restored.preprocessor) is type(model.preprocessor)
        assert restored.preprocessor.sequence_length == 16


def test_keras_hub_preprocessor_checks(harness, tokenizer, vocab_list):
    # Direct calls, tf.data (batched or not) and Grain agree; a new sequence_length holds.
    harness.run_preprocessing_layer_test(cls=TupeTokenizer,
                                         init_kwargs=dict(vocabulary=vocab_list),
                                         input_data=["a fine film", "the plot was long"])
    for cls, extra, input_data in (
        (TupeTextClassifierPreprocessor, {}, (SENTENCES, LABELS, [1.0] * 4)),
        (TupeMaskedLMPreprocessor, DETERMINISTIC_MASKING, SENTENCES),
    ):
        # run_preprocessor_test builds a second one from the case's `init_kwargs`.
        harness.init_kwargs = dict(tokenizer=tokenizer, sequence_length=8, **extra)
        harness.run_preprocessor_test(cls=cls, init_kwargs=harness.init_kwargs,
                                      input_data=input_data)


# --- what the harness does not check --------------------------------------------------------


@pytest.mark.parametrize("variant", ALL_VARIANTS)
def test_backbone_config_holds_the_variant(variant):
    config = variant_backbone(variant).get_config()
    for key, value in VARIANTS[variant].items():
        assert config[key] == value, key
    assert config["vocabulary_size"] == 1024 and config["max_sequence_length"] == 128


def test_text_classifier_from_preset_with_num_classes_keeps_backbone_new_head(tokenizer,
                                                                              tmp_path):
    model = classifier(tokenizer, "tupe_r", num_classes=2, seed=3)
    preset = str(tmp_path / "classifier")
    model.save_to_preset(preset)
    # num_classes given: the saved backbone, a new 3-way head (task weights not loaded).
    fresh_head = keras_hub.models.TextClassifier.from_preset(preset, num_classes=3)
    assert type(fresh_head) is TupeTextClassifier and fresh_head.num_classes == 3
    inputs = backbone_inputs(vocabulary_size=V)
    assert_outputs_close(fresh_head.backbone(inputs), model.backbone(inputs))
    assert tuple(fresh_head.logits_dense.kernel.shape) == (HIDDEN, 3)
    assert tuple(fresh_head(fresh_head.preprocessor(["a fine film"])).shape) == (1, 3)


# --- preprocessors -------------------------------------------------------------------------


def packed(*segments, length=16):
    """Hand-packed `[CLS] a [SEP] (b [SEP])`, padded: ids, mask, segment ids."""
    token_ids, segment_ids = [CLS], [0]
    for index, segment in enumerate(segments):
        token_ids += segment + [SEP]
        segment_ids += [index] * (len(segment) + 1)
    real = len(token_ids)
    return (token_ids + [PAD] * (length - real), [1] * real + [0] * (length - real),
            segment_ids + [0] * (length - real))


def test_classifier_preprocessor_packs_single_and_pair(tokenizer):
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=16)
    out = to_numpy(preprocessor(["a fine film", "The plot was DULL"]))
    for row, text in enumerate(["a fine film", "the plot was dull"]):
        token_ids, mask, segment_ids = packed(ids(text))
        np.testing.assert_array_equal(out["token_ids"][row], token_ids)
        np.testing.assert_array_equal(out["padding_mask"][row].astype(int), mask)
        np.testing.assert_array_equal(out["segment_ids"][row], segment_ids)
    assert out["padding_mask"].dtype == bool and not out["padding_mask"][0, 5:].any()

    # A pair: keras-hub reads a bare 2-tuple as (x, y), so the pair is passed as x.
    first, second = ["a fine film", "the cast"], ["the plot was nice", "a sad ending"]
    out = to_numpy(preprocessor(x=(first, second)))
    for row in range(2):
        token_ids, mask, segment_ids = packed(ids(first[row]), ids(second[row]))
        np.testing.assert_array_equal(out["token_ids"][row], token_ids)
        np.testing.assert_array_equal(out["padding_mask"][row].astype(int), mask)
        np.testing.assert_array_equal(out["segment_ids"][row], segment_ids)


def test_classifier_preprocessor_matches_glue_packing(tokenizer, vocab_file):
    long_first = "the film was very long and the plot was dull but the music was nice"
    long_second = "a great cast a brilliant script and a funny ending for this movie"
    first = ["a fine film", long_first, "the cast", long_first]
    second = ["the plot was nice", long_second, long_second, "a sad ending"]
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=16)
    glue_tokenizer = load_tokenizer(vocab_file)
    for pair in (None, second):
        got = to_numpy(preprocessor(first) if pair is None else preprocessor(x=(first, pair)))
        want = to_numpy(pack_texts(glue_tokenizer, 16, first, pair))
        for key in ("token_ids", "padding_mask", "segment_ids"):
            np.testing.assert_array_equal(got[key].astype("int32"), want[key], err_msg=key)
    # Round robin on the long pair: 13 slots, 7 from the first segment and 6 from the second.
    got = to_numpy(preprocessor(x=(first, second)))
    token_ids, mask, segment_ids = packed(ids(long_first)[:7], ids(long_second)[:6])
    np.testing.assert_array_equal(got["token_ids"][1], token_ids)
    np.testing.assert_array_equal(got["padding_mask"][1].astype(int), mask)
    np.testing.assert_array_equal(got["segment_ids"][1], segment_ids)
    # A long first and a short second: the short one is kept whole.
    token_ids, _, _ = packed(ids(long_first)[:10], ids("a sad ending"))
    np.testing.assert_array_equal(got["token_ids"][3], token_ids)


def random_sentences(count, seed, min_words=3, max_words=20):
    rng = np.random.default_rng(seed)
    return [" ".join(rng.choice(WORDS, rng.integers(min_words, max_words + 1)))
            for _ in range(count)]


@pytest.fixture(scope="module")
def mlm_runs(tokenizer):
    """500 sentences of 1-20 words through one preprocessor, eagerly and in tf.data."""
    keras.utils.set_random_seed(5)
    preprocessor = TupeMaskedLMPreprocessor(tokenizer, sequence_length=16)
    strings = random_sentences(500, seed=1, min_words=1, max_words=20)
    dataset = tf.data.Dataset.from_tensor_slices(strings).batch(len(strings)).map(preprocessor)
    return {"eager": (strings, to_numpy(preprocessor(strings))),
            "tf_data": (strings, to_numpy(next(iter(dataset))))}


@pytest.mark.parametrize("path", ["eager", "tf_data"])
def test_mlm_preprocessor_masks_only_real_tokens(mlm_runs, path):
    strings, (x, y, weights) = mlm_runs[path]
    count = len(strings)
    assert x["mask_positions"].shape == (count, math.ceil(0.15 * 15)) == (count, 3)
    assert y.shape == weights.shape == (count, 3)
    selected_total = 0
    for row, text in enumerate(strings):
        original, mask, _ = packed(ids(text)[:14])
        original = np.array(original)
        real = weights[row] > 0
        # Real slots come first; padded slots point at 0 with weight 0.
        assert list(real) == sorted(real, reverse=True)
        assert np.all(x["mask_positions"][row][~real] == 0) and np.all(y[row][~real] == 0)
        positions = x["mask_positions"][row][real]
        selected_total += len(positions)
        assert len(set(positions)) == len(positions)
        assert np.all(~np.isin(original[positions], [CLS, SEP, PAD]))
        np.testing.assert_array_equal(y[row][real], original[positions])
        untouched = np.setdiff1d(np.arange(16), positions)
        np.testing.assert_array_equal(x["token_ids"][row][untouched], original[untouched])
        np.testing.assert_array_equal(x["padding_mask"][row].astype(int), mask)
        np.testing.assert_array_equal(x["segment_ids"][row], np.zeros(16))
    assert selected_total > count  # about 2 per sentence, not none


def test_mlm_preprocessor_selects_ceil_15_percent(mlm_runs):
    # The class's contract in tf.data (fit's path): exactly ceil(15%) of the selectable
    # tokens of each example, which mask_selection_length = ceil(0.15 * 15) = 3 never
    # truncates. Eagerly keras-hub masks each token with probability 15%, at most 3.
    strings, (_, _, weights) = mlm_runs["tf_data"]
    got = (weights > 0).sum(axis=1)
    want = [math.ceil(0.15 * min(len(ids(text)), 14)) for text in strings]
    np.testing.assert_array_equal(got, want)
    strings, (_, _, weights) = mlm_runs["eager"]
    eager = (weights > 0).sum(axis=1)
    assert eager.max() <= 3 and 0.10 < eager.sum() / sum(min(len(ids(t)), 14) for t in strings) < 0.2


def test_mlm_preprocessor_80_10_10(mlm_runs):
    _, (x, y, weights) = mlm_runs["tf_data"]  # the path fit() takes
    real = weights > 0
    rows = np.nonzero(real)[0]
    new = x["token_ids"][rows, x["mask_positions"][real]]
    old = y[real]
    assert len(old) > 900
    masked = np.mean(new == MASK)
    unchanged = np.mean(new == old)
    replaced = np.mean((new != MASK) & (new != old))
    # About 1000 selections: binomial standard errors about 0.013 and 0.0095.
    assert 0.74 < masked < 0.86, masked
    assert 0.05 < unchanged < 0.16, unchanged
    assert 0.05 < replaced < 0.16, replaced
    assert np.all((new >= 0) & (new < V))


# --- fit and predict on raw strings --------------------------------------------------------


@backends
def test_text_classifier_fits_and_predicts_raw_strings(tokenizer):
    model = classifier(tokenizer, "tupe_r", num_classes=2, seed=7)
    model.compile(**NO_XLA)  # keras-hub's defaults otherwise
    kernel_before = np.array(model.logits_dense.kernel)
    history = model.fit(x=SENTENCES, y=LABELS, batch_size=2, epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert not np.allclose(np.array(model.logits_dense.kernel), kernel_before)
    prediction = model.predict(["a fine film"], verbose=0)
    assert prediction.shape == (1, 2) and prediction.dtype == np.float32


@backends
def test_text_regressor_predicts_scalars(tokenizer):
    model = classifier(tokenizer, "huang_m4", num_classes=1, seed=8)
    assert isinstance(model.loss, keras.losses.MeanSquaredError)
    strings = ["a fine film", "the plot was long and very boring"]
    prediction = model.predict(strings, verbose=0)
    assert prediction.shape == (2,) and prediction.dtype == np.float32
    # The score is the head's kernel and bias on the pooled [CLS] output, no dropout.
    pooled = to_numpy(model.backbone(model.preprocessor(strings)))["pooled_output"]
    kernel, bias = (np.asarray(w, "float64") for w in model.logits_dense.get_weights())
    assert abs(bias[0]) > 0.01  # randomized: a dropped bias would show
    np.testing.assert_allclose(prediction, (pooled @ kernel + bias)[:, 0], rtol=0, atol=1e-5)


# --- bad input -----------------------------------------------------------------------------


@pytest.fixture
def saved_classifier(tokenizer, tmp_path):
    preset = str(tmp_path / "classifier_preset")
    classifier(tokenizer, "bert_a", seed=11).save_to_preset(preset)
    return preset


def test_missing_weights_file(tmp_path):
    preset = str(tmp_path / "no_weights")
    variant_backbone("bert_a").save_to_preset(preset)
    os.remove(os.path.join(preset, "model.weights.h5"))
    with pytest.raises(FileNotFoundError, match=r"has no model\.weights\.h5: the weights are "
                                                r"missing"):
        TupeBackbone.from_preset(preset)
    # The architecture alone still loads.
    assert type(TupeBackbone.from_preset(preset, load_weights=False)) is TupeBackbone


def test_every_model_class_is_registered_under_keras_tupe():
    """A saved preset names each object `keras_tupe>Class`; an unregistered class saves a
    bare name that no loader finds."""
    import keras_tupe.models

    classes = [getattr(keras_tupe.models, name) for name in keras_tupe.models.__all__]
    classes = [cls for cls in classes if isinstance(cls, type) and issubclass(cls, keras.Layer)]
    assert len(classes) == 9
    for cls in classes:
        assert keras.saving.get_registered_name(cls) == f"keras_tupe>{cls.__name__}"
        assert keras.saving.get_registered_object(f"keras_tupe>{cls.__name__}") is cls


def test_foreign_registered_name(tmp_path):
    preset = str(tmp_path / "foreign")
    variant_backbone("bert_a").save_to_preset(preset)
    config_path = os.path.join(preset, "config.json")
    # A class of no package is a damaged file, not another family's model (issue 67).
    for registered, message in (
            ("keras_hub>BertBackbone", r"holds a 'keras_hub>BertBackbone' model, not a keras_tupe"),
            ("nosuchpackage>Thing", r"^Preset folder .* is damaged: the registered_name of its "
                                    r"config.json, nosuchpackage>Thing, is no class")):
        with open(config_path, encoding="utf-8") as f:
            config = json.load(f)
        config["registered_name"] = registered
        with open(config_path, "w", encoding="utf-8") as f:
            json.dump(config, f)
        with pytest.raises(ValueError, match=message):
            TupeBackbone.from_preset(preset)


def test_vocabulary_size_mismatch(saved_classifier):
    vocabulary = os.path.join(saved_classifier, "assets", "tokenizer", "vocabulary.txt")
    with open(vocabulary, "a", encoding="utf-8") as f:  # a vocabulary from another run
        f.write("".join(f"extra{i}\n" for i in range(40)))
    message = rf"the vocabulary has {V + 40} tokens but the backbone's config\.json says " \
              rf"vocabulary_size={V}"
    with pytest.raises(ValueError, match=message):
        TupeBackbone.from_preset(saved_classifier)
    # keras-hub's own entry point for the task must refuse the folder too: the tokenizer
    # would emit ids beyond the embedding table.
    with pytest.raises(ValueError, match=message):
        keras_hub.models.TextClassifier.from_preset(saved_classifier)


def test_unknown_preset_name():
    with pytest.raises(ValueError, match=r"^Unknown preset tupe_r_tiyn\. The nearest: "
                                         r"tupe_r_tiny, "):
        TupeBackbone.from_preset("tupe_r_tiyn")
    with pytest.raises(ValueError) as refused:
        TupeBackbone.from_preset("clowntown")
    message = str(refused.value)  # no list of all 64 names: how names are made
    assert message.startswith("Unknown preset clowntown. A preset is a variant and a size")
    assert "Or a folder written by TupeBackbone.save_to_preset" in message
    assert "[" not in message and len(message) < 500


def test_text_classifier_from_preset_needs_num_classes(tokenizer, tmp_path):
    preset = str(tmp_path / "backbone_and_tokenizer")
    small_backbone("bert_a").save_to_preset(preset)
    tokenizer.save_to_preset(preset)
    assert "task.json" not in os.listdir(preset)
    with pytest.raises(ValueError, match=r"`num_classes` must be a positive int.*"
                                         r"Received: num_classes=None"):
        keras_hub.models.TextClassifier.from_preset(preset)
    # With num_classes it loads, and the preprocessor's length is capped at the table.
    model = keras_hub.models.TextClassifier.from_preset(preset, num_classes=2)
    assert type(model) is TupeTextClassifier and model.preprocessor.sequence_length == 128


@pytest.mark.parametrize("num_classes", [0, -1, True, 2.0, None])
def test_bad_num_classes(num_classes):
    with pytest.raises(ValueError, match=rf"`num_classes` must be a positive int.*"
                                         rf"Received: num_classes={num_classes!r}$"):
        TupeTextClassifier(variant_backbone("bert_a"), num_classes)


@pytest.mark.parametrize("variant", ["bert_a", "tupe_a"])
@pytest.mark.parametrize("task", ["classifier", "masked_lm"])
def test_sequence_length_above_absolute_table(variant, task, tokenizer):
    backbone = variant_backbone(variant)
    message = (r"The preprocessor's sequence_length=512 exceeds this encoder's absolute "
               r"position table \(128 rows\)")
    with pytest.raises(ValueError, match=message):
        if task == "classifier":
            TupeTextClassifier(backbone, 2, preprocessor=TupeTextClassifierPreprocessor(
                tokenizer, sequence_length=512))
        else:
            TupeMaskedLM(backbone, preprocessor=TupeMaskedLMPreprocessor(
                tokenizer, sequence_length=512))


def test_relative_encoder_accepts_long_preprocessor(tokenizer):
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=512)
    model = TupeTextClassifier(small_backbone("huang_m4"), 2, preprocessor=preprocessor)
    x = preprocessor(["a fine film"])
    assert tuple(x["token_ids"].shape) == (1, 512)
    logits = to_numpy(model(x))
    assert logits.shape == (1, 2) and np.all(np.isfinite(logits))


@pytest.mark.parametrize("cls", [TupeTextClassifierPreprocessor, TupeMaskedLMPreprocessor])
def test_preprocessor_refuses_token_ids(cls, tokenizer):
    preprocessor = cls(tokenizer, sequence_length=16)
    with pytest.raises(ValueError, match=rf"{cls.__name__} takes raw strings .* Received "
                                         r"segment 0 of dtype int64"):
        preprocessor(np.array([[1, 2]]))


def test_save_twice_refused_then_overwrite_loads_new_weights(tokenizer, tmp_path):
    inputs = backbone_inputs(vocabulary_size=V)
    old, new = small_backbone("tupe_r", seed=1), small_backbone("tupe_r", seed=2)
    preset = str(tmp_path / "backbone")
    old.save_to_preset(preset)
    with pytest.raises(FileExistsError, match=r"refusing to overwrite a saved model"):
        new.save_to_preset(preset)
    assert_outputs_close(TupeBackbone.from_preset(preset)(inputs), old(inputs))
    new.save_to_preset(preset, overwrite=True)
    loaded = keras_hub.models.Backbone.from_preset(preset)(inputs)
    assert_outputs_close(loaded, new(inputs))
    assert not np.allclose(to_numpy(loaded)["pooled_output"],
                           to_numpy(old(inputs))["pooled_output"], atol=1e-3)

    # The same for a task.
    strings = ["a fine film", "a dull film"]
    old_task, new_task = (classifier(tokenizer, "bert_a", seed=s) for s in (3, 4))
    task_preset = str(tmp_path / "task")
    old_task.save_to_preset(task_preset)
    with pytest.raises(FileExistsError, match=r"refusing to overwrite a saved model"):
        new_task.save_to_preset(task_preset)
    new_task.save_to_preset(task_preset, overwrite=True)
    restored = keras_hub.models.TextClassifier.from_preset(task_preset)
    np.testing.assert_allclose(to_numpy(restored(restored.preprocessor(strings))),
                               to_numpy(new_task(new_task.preprocessor(strings))),
                               atol=1e-6, rtol=0)


def test_backbone_overwrite_over_task_folder_leaves_no_stale_task(saved_classifier):
    # A backbone saved with overwrite=True into a folder that held a task: the folder
    # must then give the NEW backbone through every keras-hub entry point, not the old
    # task.json (with the old backbone config) next to the new weights.
    new = small_backbone("huang_m4", seed=12)
    new.save_to_preset(saved_classifier, overwrite=True)
    inputs = backbone_inputs(vocabulary_size=V)
    assert sorted(os.listdir(saved_classifier)) == ["config.json", "metadata.json",
                                                    "model.weights.h5"]
    loaded = keras_hub.models.Backbone.from_preset(saved_classifier)
    assert loaded.relative_position == "method4"
    assert_outputs_close(loaded(inputs), new(inputs))
    # No tokenizer is left, so a task needs one given: keras-hub says which file is missing.
    with pytest.raises(FileNotFoundError, match="tokenizer.json"):
        keras_hub.models.TextClassifier.from_preset(saved_classifier, num_classes=2)


# --- a fresh process -----------------------------------------------------------------------

CHILD = textwrap.dedent(
    """
    import json, sys
    import keras
    import keras_hub
    import numpy as np
    import keras_tupe  # registration only

    preset, reference = sys.argv[1], sys.argv[2]
    data = np.load(reference)
    inputs = {key: data[key] for key in ("token_ids", "padding_mask", "segment_ids")}
    backbone = keras_hub.models.Backbone.from_preset(preset)
    outputs = backbone(inputs)
    diff = max(float(np.max(np.abs(keras.ops.convert_to_numpy(outputs[key]) - data[key])))
               for key in ("sequence_output", "pooled_output"))
    model = keras_hub.models.TextClassifier.from_preset(preset, num_classes=2)
    history = model.fit(x=["a fine film", "a dull film", "the plot was long", "a nice cast"],
                        y=[1, 0, 0, 1], batch_size=2, epochs=1, verbose=0)
    prediction = model.predict(["a fine film", "a dull film", "the cast"], verbose=0)
    print("RESULT " + json.dumps({
        "max_abs_diff": diff,
        "backbone": type(backbone).__name__,
        "task": type(model).__name__,
        "preprocessor": type(model.preprocessor).__name__,
        "sequence_length": int(model.preprocessor.sequence_length),
        "loss": float(history.history["loss"][-1]),
        "predict_shape": list(prediction.shape),
        "finite": bool(np.all(np.isfinite(prediction))),
    }))
    """
)


@pytest.mark.slow
def test_fresh_process_loads_masked_lm_preset(tokenizer, tmp_path):
    model = masked_lm(tokenizer, "tupe_r", seed=13)
    preset = str(tmp_path / "mlm_preset")
    model.save_to_preset(preset)
    inputs = backbone_inputs(vocabulary_size=V)
    reference = str(tmp_path / "reference.npz")
    np.savez(reference, **inputs, **to_numpy(model.backbone(inputs)))
    workdir = tmp_path / "cwd"
    workdir.mkdir()
    env = dict(os.environ)
    env["KERAS_BACKEND"] = os.environ.get("KERAS_BACKEND", keras.backend.backend())
    env["PYTHONPATH"] = os.pathsep.join([str(REPO)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    result = subprocess.run([sys.executable, "-c", CHILD, preset, reference], cwd=workdir,
                            env=env, capture_output=True, text=True, timeout=240)
    assert result.returncode == 0, result.stderr[-3000:]
    lines = [line for line in result.stdout.splitlines() if line.startswith("RESULT ")]
    assert len(lines) == 1, result.stdout[-2000:]
    report = json.loads(lines[0][len("RESULT "):])
    assert report["max_abs_diff"] <= 1e-6, report
    assert report["backbone"] == "TupeBackbone" and report["task"] == "TupeTextClassifier"
    assert report["preprocessor"] == "TupeTextClassifierPreprocessor"
    assert report["sequence_length"] == 16  # the folder's preprocessor.json length
    assert report["predict_shape"] == [3, 2] and report["finite"], report
    assert math.isfinite(report["loss"])


# --- the export CLI takes a preset folder ----------------------------------------------------

@pytest.mark.slow  # exports through the CLI: an encoder with its MLM head, a preprocessor
@pytest.mark.skipif(keras.backend.backend() != "tensorflow",
                    reason="SavedModel export runs on the TensorFlow backend")
def test_export_cli_takes_a_masked_lm_preset_folder(tokenizer, tmp_path):
    import tensorflow as tf

    from keras_tupe_cli import export as export_cli

    model = masked_lm(tokenizer, variant="tupe_r", seed=3)
    preset = str(tmp_path / "preset")
    model.save_to_preset(preset)
    out = tmp_path / "exports"
    assert export_cli.main(["encoder", "--init", preset, "--out", str(out / "enc"),
                            "--with-mlm"]) == 0
    loaded = tf.saved_model.load(str(out / "enc" / "1"))
    inputs = backbone_inputs(vocabulary_size=V)
    positions = np.array([[1, 2], [3, 4]], "int32")
    tfhub = {"input_word_ids": inputs["token_ids"], "input_mask": inputs["padding_mask"],
             "input_type_ids": inputs["segment_ids"], "masked_lm_positions": positions}
    expected = keras.ops.convert_to_numpy(model({**inputs, "mask_positions": positions}))
    np.testing.assert_allclose(loaded.mlm(tfhub)["mlm_logits"].numpy(), expected, atol=1e-5)
    # The preprocessor export reads the preset's vocabulary asset.
    assert export_cli.main(["preprocessor", "--init", preset, "--out", str(out / "pre")]) == 0
    vocabulary = tf.saved_model.load(str(out / "pre" / "1")).vocab_file.asset_path.numpy()
    assert open(vocabulary, "rb").read() == open(
        os.path.join(preset, "assets", "tokenizer", "vocabulary.txt"), "rb").read()


# --- span QA on raw strings ------------------------------------------------------------------

QA_VOCABULARY = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"] + (
    "the cat sat on a mat who where did what is red blue dog ran to park , . ?".split())
QUESTIONS = ["where did the cat sit ?", "who ran to the park ?"]
CONTEXTS = ["the cat sat on a mat .", "the red dog ran to the park , the blue cat sat on a mat ."]


def span_qa(seed=0):
    from keras_tupe.models import TupeSpanQA, TupeSpanQAPreprocessor

    tokenizer = TupeTokenizer(vocabulary=QA_VOCABULARY)
    preprocessor = TupeSpanQAPreprocessor(tokenizer, sequence_length=32, doc_stride=8,
                                          max_query_length=8)
    keras.utils.set_random_seed(seed)
    backbone = TupeBackbone.from_preset("huang_m4_tiny", vocabulary_size=len(QA_VOCABULARY))
    return TupeSpanQA(backbone, preprocessor=preprocessor)


@backends
def test_span_qa_learns_answers_from_raw_strings_and_round_trips(tmp_path):
    from keras_tupe.models import TupeSpanQA

    qa = span_qa()
    features = qa.preprocessor.featurize(QUESTIONS, CONTEXTS, answers=["on a mat", "the red dog"],
                                         answer_starts=[8, 0])
    # Hand-counted: [CLS] + 6 question tokens + [SEP] puts "on" at 11; "the" at 8.
    np.testing.assert_array_equal(features.start_positions, [11, 8])
    np.testing.assert_array_equal(features.end_positions, [13, 10])
    # 3e-3: 1e-2 overshot (the start and end moved between runs whose float sums differ).
    qa.compile(optimizer=keras.optimizers.Adam(3e-3), **NO_XLA)
    y = {"start_positions": features.start_positions, "end_positions": features.end_positions}
    qa.fit(features.inputs, y, epochs=40, batch_size=2, verbose=0)
    # Exact substrings of the contexts (case and spacing kept by the character offsets).
    assert qa.answer(QUESTIONS, CONTEXTS) == ["on a mat", "the red dog"]
    preset = str(tmp_path / "qa")
    qa.save_to_preset(preset)
    reloaded = TupeSpanQA.from_preset(preset)
    assert reloaded.preprocessor.sequence_length == 32
    assert reloaded.answer(QUESTIONS, CONTEXTS) == ["on a mat", "the red dog"]


def test_span_qa_bad_input():
    qa = span_qa()
    with pytest.raises(ValueError, match="Give both `answers`"):
        qa.preprocessor.featurize(QUESTIONS, CONTEXTS, answers=["x", "y"])
    with pytest.raises(ValueError, match="One context per question"):
        qa.answer(QUESTIONS, CONTEXTS[:1])
    with pytest.raises(ValueError, match="`questions` must be a list of strings"):
        qa.answer("where ?", CONTEXTS[:1])


def _trained_classifier(tokenizer):
    """A classifier compiled with Adam and fitted one step: its optimizer has state."""
    model = classifier(tokenizer, "tupe_r", seed=2)
    model.compile(optimizer=keras.optimizers.Adam(1e-3),
                  loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True), **NO_XLA)
    model.fit(SENTENCES, np.array(LABELS), batch_size=4, epochs=1, verbose=0)
    assert model.optimizer.variables and int(model.optimizer.iterations.numpy()) == 1
    return model


def _optimizer_warnings(load):
    import warnings

    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        model = load()
    return model, [str(w.message) for w in caught if "optimizer" in str(w.message)]


@backends
def test_saved_models_and_presets_carry_no_optimizer_state(tokenizer, tmp_path):
    """Issue 23: loading a saved task warned "Skipping variable loading for optimizer"."""
    import h5py
    import zipfile

    from keras_tupe.finetuning import load_classifier, save_classifier
    from keras_tupe.models.saving import without_training_state

    model = _trained_classifier(tokenizer)
    optimizer = model.optimizer
    # The control: Keras's own save keeps the optimizer, and loading it without compiling warns.
    model.save(tmp_path / "plain.keras")
    _, warned = _optimizer_warnings(lambda: keras.saving.load_model(
        tmp_path / "plain.keras", compile=False))
    assert warned and "Skipping variable loading for optimizer" in warned[0]

    with without_training_state(model):
        model.save(tmp_path / "model.keras")
    assert model.optimizer is optimizer and model.compiled  # restored for more training
    with zipfile.ZipFile(tmp_path / "model.keras") as archive:
        assert not json.loads(archive.read("config.json")).get("compile_config")
        archive.extract("model.weights.h5", tmp_path)
    with h5py.File(tmp_path / "model.weights.h5") as weights:
        assert "optimizer" not in weights and "layers" in weights
    # A keras-hub task compiles itself (2 optimizer variables) when it is built; the file
    # has none, which Keras reports; keras_tupe's loaders leave that one warning out.
    from keras_tupe.models.saving import load_saved_model

    restored, warned = _optimizer_warnings(lambda: load_saved_model(tmp_path / "model.keras"))
    assert warned == []
    strings = ["a fine film", "the plot was long"]
    np.testing.assert_allclose(to_numpy(restored.predict(strings, verbose=0)),
                               to_numpy(model.predict(strings, verbose=0)), atol=1e-6, rtol=0)

    preset = str(tmp_path / "preset")
    model.save_to_preset(preset)
    with h5py.File(os.path.join(preset, "task.weights.h5")) as weights:
        assert "optimizer" not in weights
    _, warned = _optimizer_warnings(lambda: keras_hub.models.TextClassifier.from_preset(preset))
    assert warned == []
    path = save_classifier(model, str(tmp_path / "clf"), _vocab(tmp_path), {"task": "x"})
    _, warned = _optimizer_warnings(lambda: load_classifier(path))
    assert warned == []
    # Training goes on from the same optimizer state after every save.
    model.fit(SENTENCES, np.array(LABELS), batch_size=4, epochs=1, verbose=0)
    assert int(model.optimizer.iterations.numpy()) == 2


def test_tasks_run_the_per_replica_step_before_keras_hubs_class():
    """Issue 51: the step is its own mixin, `TupeTask` the tasks' base."""
    from keras_tupe.models import PerReplicaXLATrainStep, TupeSpanQA, TupeTask

    for cls in (TupeMaskedLM, TupeTextClassifier, TupeSpanQA):
        mro = cls.__mro__
        assert mro[1] is TupeTask
        assert mro.index(PerReplicaXLATrainStep) < mro.index(keras_hub.models.Task)


def _vocab(tmp_path):
    path = tmp_path / "vocab.txt"
    path.write_text("".join(token + "\n" for token in VOCABULARY), encoding="utf-8")
    return str(path)
