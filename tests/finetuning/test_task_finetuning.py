"""Fine-tuning through the task's own preprocessor, on tf.data and on Grain.

The route `finetune_glue` takes: raw sentences (pairs: a tuple of two lists) batched
by `keras_tupe.finetuning.batches`, packed by `TupeTextClassifierPreprocessor` inside
keras-hub's `fit`. Checked against the route it replaced (`data.packing.pack_segments` on the tokenizer's
ids, batched by `batches`: tests/packing_oracle.py): the
same token ids on every GLUE format, the same first-step loss; the BPE pair rule on
both loaders; and one epoch under JAX in a process where TensorFlow cannot import.
"""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tupe import data
from keras_tupe.data import glue
from keras_tupe.finetuning.batches import batches, packed
from tests.backends import backends
from tests.packing_oracle import pack_texts, packed_batches
from keras_tupe.models import (
    TupeBackbone,
    TupeBpeTokenizer,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
GLUE_DIR = DATA_DIR / "glue"
LOADERS = ("tf.data", "grain")
INPUTS = ("token_ids", "segment_ids", "padding_mask")


@pytest.fixture(scope="module")
def vocabulary(tmp_path_factory):
    """A WordPiece vocabulary of up to 500 tokens trained on 600 SST-2 dev sentences."""
    root = tmp_path_factory.mktemp("vocab")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(glue.load_glue("sst2", "validation", GLUE_DIR).sentence1) + "\n")
    return data.train_vocabulary(str(corpus), 500, str(root / "vocab.txt"), max_lines=600)


def fit_batches(preprocessor, dataset):
    """The batches `fit` trains on: the dataset mapped through the task's preprocessing.

    keras-hub's `PipelineModel.fit` maps `preprocess_samples` with this private helper
    (tf.data: traced; Grain: its pure-Python path); no public route shows those batches.
    """
    from keras_hub.src.utils.pipeline_model import _apply_preprocessing

    preprocessor.build(None)  # as `fit_task` does: before Grain's threads call it

    def preprocess(x, y=None, sample_weight=None):  # `Task.preprocess_samples`
        return preprocessor(x, y=y, sample_weight=sample_weight)

    mapped = _apply_preprocessing(dataset, preprocess)
    elements = mapped.as_numpy_iterator() if hasattr(mapped, "as_numpy_iterator") else mapped
    return [keras.tree.map_structure(np.asarray, element) for element in elements]


def segments(examples, count):
    if examples.sentence2 is None:
        return examples.sentence1[:count]
    return examples.sentence1[:count], examples.sentence2[:count]


# Token ids --------------------------------------------------------------------------------


@pytest.mark.parametrize("loader", LOADERS)
@pytest.mark.parametrize("task,length", [("sst2", 32), ("cola", 16), ("mrpc", 24),
                                         ("stsb", 128), ("rte", 24)])
def test_the_task_route_packs_as_pack_segments(vocabulary, task, length, loader):
    """Single sentences (SST-2, CoLA) and pairs (MRPC, STS-B, RTE), truncated round-robin
    at 16 and 24 tokens: the ids, segments and mask of `pack_texts` (pack_segments on
    the WordPiece ids), batch for batch, labels and weights included."""
    examples = glue.load_glue(task, "validation", GLUE_DIR)
    count = 70  # 3 batches of 32, the last filled with copies
    x = segments(examples, count)
    preprocessor = TupeTextClassifierPreprocessor(TupeTokenizer(vocabulary),
                                                  sequence_length=length)
    dataset, steps = batches(x, examples.labels[:count], 32, fill_last_batch=True, loader=loader)
    got = fit_batches(preprocessor, dataset)
    assert steps == len(got) == 3
    first, second = x if isinstance(x, tuple) else (x, None)
    want = pack_texts(data.load_tokenizer(vocabulary), length, first, second)
    rows = np.concatenate([np.arange(64), 64 + np.arange(32) % 6])  # 6 real rows, copies
    for name in INPUTS:
        merged = np.concatenate([batch[0][name] for batch in got]).astype(np.int32)
        np.testing.assert_array_equal(merged, want[name].numpy()[rows], err_msg=name)
    labels = np.concatenate([batch[1] for batch in got])
    np.testing.assert_array_equal(labels, examples.labels[:count][rows])
    weights = np.concatenate([batch[2] for batch in got])
    np.testing.assert_allclose(weights, [1.0] * 64 + [32 / 6] * 6 + [0.0] * 26)
    if task == "mrpc":  # truncation really happened
        assert want["padding_mask"].numpy().all(axis=1).any()


@pytest.mark.parametrize("loader", LOADERS)
def test_pad_to_multiple_of_trims_as_the_packed_route_did(vocabulary, loader):
    """`pad_each_batch`: each batch cut after its longest example, rounded up to 16, as
    `packed_batches(pad_multiple=16)`; at `sequence_length` 24 every batch stays 24."""
    examples = glue.load_glue("stsb", "validation", GLUE_DIR)
    examples = glue.GlueExamples(examples.sentence1[:200], examples.sentence2[:200],
                                 examples.labels[:200], "stsb", "validation")
    tokenizer = data.load_tokenizer(vocabulary)
    for length in (128, 24):
        preprocessor = TupeTextClassifierPreprocessor(
            TupeTokenizer(vocabulary), sequence_length=length, pad_to_multiple_of=16)
        dataset, _ = batches(segments(examples, 200), examples.labels, 32, loader=loader)
        got = fit_batches(preprocessor, dataset)
        want = list(packed_batches(examples, tokenizer, length, 32, pad_multiple=16))
        assert len(got) == len(want) == 7
        widths = set()
        for (x, y), (x_want, y_want) in zip(got, want):
            widths.add(x["token_ids"].shape[1])
            np.testing.assert_array_equal(y, y_want)
            for name in INPUTS:
                np.testing.assert_array_equal(x[name].astype(np.int32), x_want[name].numpy())
        assert len(widths) > 1 if length == 128 else widths == {24}


@backends
@pytest.mark.parametrize("loader", LOADERS)
def test_a_split_packed_once_gives_the_batches_packed_inside_fit(vocabulary, loader):
    """What `finetune_glue` trains on: the train split packed once (`packed`, in chunks)
    and each shuffled, filled batch cut after its longest example (`trim_to_multiple_of`)
    is, batch for batch, what the preprocessor packing each batch inside `fit` gives
    (`pad_to_multiple_of`), weights and labels included; at 24 tokens nothing is cut."""
    examples = glue.load_glue("stsb", "validation", GLUE_DIR)  # pairs of varied lengths
    count = 200
    labels = examples.labels[:count]
    for length in (128, 24):
        whole = TupeTextClassifierPreprocessor(TupeTokenizer(vocabulary), sequence_length=length)
        arrays = packed(whole, segments(examples, count), chunk=64)  # four chunks
        assert {name: value.shape for name, value in arrays.items()} == {
            name: (count, length) for name in INPUTS}
        got, steps = batches(arrays, labels, 32, shuffle=True, seed=3, fill_last_batch=True,
                             loader=loader, trim_to_multiple_of=16)
        got = list(got.as_numpy_iterator() if hasattr(got, "as_numpy_iterator") else got)
        per_batch = TupeTextClassifierPreprocessor(
            TupeTokenizer(vocabulary), sequence_length=length, pad_to_multiple_of=16)
        dataset, _ = batches(segments(examples, count), labels, 32, shuffle=True, seed=3,
                             fill_last_batch=True, loader=loader)
        want = fit_batches(per_batch, dataset)
        assert steps == len(got) == len(want) == 7
        widths = set()
        for (x, y, weight), (x_want, y_want, weight_want) in zip(got, want):
            widths.add(x["token_ids"].shape[1])
            np.testing.assert_array_equal(y, y_want)
            np.testing.assert_array_equal(weight, weight_want)
            for name in INPUTS:
                np.testing.assert_array_equal(np.asarray(x[name]).astype(np.int32),
                                              x_want[name].astype(np.int32), err_msg=name)
        assert len(widths) > 1 if length == 128 else widths == {24}


def test_trimming_needs_packed_inputs():
    with pytest.raises(ValueError, match="must be a dict holding `padding_mask`"):
        batches(["a film", "another"], np.zeros(2), 2, loader="grain", trim_to_multiple_of=16)


@pytest.mark.parametrize("loader", LOADERS)
def test_each_process_part_of_every_batch_makes_up_the_whole_batch(loader):
    """A run across processes (`fit_batches(part=)`): the 2 parts of every filled, cut batch
    are its two halves, cut to the whole batch's longest example (the processes' shapes
    agree), weights and labels included; a batch the processes do not divide is refused."""
    rng = np.random.default_rng(0)
    # 50 examples (the last batch of 16 filled), 3 long ones: the batches are cut unalike.
    lengths = np.concatenate([[60, 61, 62], rng.integers(3, 30, size=47)])
    mask = np.arange(64)[None] < lengths[:, None]
    arrays = {"token_ids": np.where(mask, rng.integers(5, 99, (50, 64)), 0),
              "padding_mask": mask, "segment_ids": (np.arange(64)[None] > lengths[:, None] // 2)
              & mask}
    labels = np.arange(50, dtype=np.float32)

    def batches_of(part):
        found, steps = batches(arrays, labels, 16, shuffle=True, seed=4, fill_last_batch=True,
                               loader=loader, trim_to_multiple_of=16, part=part)
        return list(found.as_numpy_iterator() if hasattr(found, "as_numpy_iterator") else
                    [found[i] for i in range(steps)])

    whole, halves = batches_of((0, 1)), list(zip(batches_of((0, 2)), batches_of((1, 2))))
    assert len(whole) == len(halves) == 4 and len({x["token_ids"].shape[1] for x, *_ in whole}) > 1
    for (x, y, weight), (first, second) in zip(whole, halves):
        np.testing.assert_array_equal(np.concatenate([first[1], second[1]]), y)
        np.testing.assert_array_equal(np.concatenate([first[2], second[2]]), weight)
        for name in x:
            np.testing.assert_array_equal(np.concatenate([first[0][name], second[0][name]]),
                                          x[name], err_msg=name)
    with pytest.raises(ValueError, match=r"the batch size \(16\) must be a multiple of 3"):
        batches(arrays, labels, 16, fill_last_batch=True, loader=loader, part=(0, 3))


def bpe_tokenizer():
    specials = ["<s>", "<pad>", "</s>", "<unk>", "<file>", "<email>", "<url>"]
    words = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "."]
    return TupeBpeTokenizer(specials + words + ["<mask>"],
                            ["#version: 0.2", "t h", "th e</w>", "c a", "ca t</w>"])


@pytest.mark.parametrize("loader", LOADERS)
def test_the_bpe_pair_rule_on_both_loaders(loader):
    """`<s> a </s> </s> b </s>` then `<pad>`, as the TUPE authors packed pairs: built by
    hand from the tokenizer's ids, on tf.data (py_function) and Grain (pure Python)."""
    tokenizer = bpe_tokenizer()
    first = ["the cat sat on the mat .", "a dog ran"]
    second = ["a dog", "the cat sat ."]
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=32)
    dataset, _ = batches((first, second), np.array([1, 0]), 2, loader=loader)
    [(x, _)] = fit_batches(preprocessor, dataset)
    for row, (a, b) in enumerate(zip(tokenizer(first), tokenizer(second))):
        ids = [0, *a, 2, 2, *b, 2]
        want = ids + [1] * (32 - len(ids))
        np.testing.assert_array_equal(x["token_ids"][row], want)
        np.testing.assert_array_equal(x["padding_mask"][row], np.arange(32) < len(ids))
    eager = preprocessor((first, second), None)  # keras-hub's own call: the segment ids
    np.testing.assert_array_equal(x["segment_ids"], keras.ops.convert_to_numpy(
        eager["segment_ids"]))
    assert x["segment_ids"][0, len(tokenizer(first)[0]) + 4] == 1  # b is segment 1


@backends
def test_the_first_step_loss_is_the_one_of_the_old_route(vocabulary):
    """A tiny classifier, same seed: one training step on the new route's first batch
    (tf.data, shuffled with the seed) and on `packed_batches`' (shuffled, filled) gives
    the same loss; Grain (its own shuffle) matches `packed_batches` unshuffled."""
    examples = glue.load_glue("mrpc", "validation", GLUE_DIR)
    tokenizer = TupeTokenizer(vocabulary)
    size = tokenizer.vocabulary_size()

    def first_step(dataset, preprocessor):
        keras.utils.set_random_seed(3)
        backbone = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size)
        model = TupeTextClassifier(backbone, num_classes=2, preprocessor=preprocessor)
        # Both routes compile alike on a backend: TensorFlow's graph without XLA, JAX's jit
        # (without it JAX runs the step op by op: 80 s for this test on this CPU).
        model.compile(optimizer=keras.optimizers.SGD(0.1),
                      jit_compile=keras.backend.backend() == "jax")
        return model.fit(dataset, epochs=1, steps_per_epoch=1, verbose=0).history["loss"][0]

    for shuffle, loader in ((True, "tf.data"), (False, "grain")):
        old = packed_batches(examples, data.load_tokenizer(vocabulary), 32, 16, shuffle=shuffle,
                             seed=5, fill_last_batch=True)
        new, _ = batches(segments(examples, len(examples)), examples.labels.astype(np.int32), 16,
                         shuffle=shuffle, seed=5, fill_last_batch=True, loader=loader)
        old_loss = first_step(old, None)
        new_loss = first_step(new, TupeTextClassifierPreprocessor(tokenizer, sequence_length=32))
        assert np.isfinite(old_loss)
        np.testing.assert_allclose(new_loss, old_loss, rtol=1e-6, err_msg=loader)


@pytest.mark.parametrize("loader", LOADERS)
def test_every_epoch_is_a_new_seeded_permutation(loader):
    x = [f"s{i}" for i in range(10)]

    def orders(seed):
        dataset, steps = batches(x, np.arange(10), 4, shuffle=True, seed=seed, epochs=2,
                                 loader=loader)
        if loader == "tf.data":
            rows = [list(y) for _ in range(2) for _, y in dataset.as_numpy_iterator()]
        else:
            rows = [list(dataset[i][1]) for i in range(2 * steps)]
        return [sum(rows[:3], []), sum(rows[3:], [])]

    first, again, other = orders(0), orders(0), orders(1)
    assert first == again and first != other
    assert first[0] != first[1]  # reshuffled for the second epoch
    assert sorted(first[0]) == sorted(first[1]) == list(range(10))


def test_a_bad_data_loader_is_named():
    with pytest.raises(ValueError, match=r"Unknown data loader 'pandas'. Valid loaders: "
                                         r"tf.data, grain"):
        batches(["a"], loader="pandas")


# Bad input ---------------------------------------------------------------------------------


def test_a_glue_file_without_examples_is_refused_before_training(tmp_path, vocabulary):
    from keras_tupe.finetuning import run_protocol

    (tmp_path / "glue" / "RTE").mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (tmp_path / "glue" / "RTE" / name).write_text("index\tsentence1\tsentence2\tlabel\n")
    init = tmp_path / "encoder"  # a preset folder
    size = TupeTokenizer(vocabulary).vocabulary_size()
    TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=size).save_to_preset(str(init))
    with pytest.raises(ValueError, match="GLUE rte train has no examples: nothing to fine-tune"):
        run_protocol(ProtocolConfig(tasks=["rte"], out=str(tmp_path / "out"),
                                    learning_rates=[1e-4], seeds=[0]),
                     FinetuneConfig(task="rte", init=str(init), vocab=vocabulary,
                                    data_dir=str(tmp_path / "glue")))
    assert not (tmp_path / "out").exists()


def test_glue_save_dir_is_refused_before_training_only_where_it_holds_files(tmp_path, vocabulary,
                                                                            monkeypatch):
    """As save_classifier (and SQuAD's --save-models) refuse, before the encoder is read: an
    empty folder is taken."""
    from keras_tupe.finetuning import finetune_glue
    from keras_tupe.finetuning import glue as finetuning_glue

    folder = tmp_path / "glue" / "SST-2"
    folder.mkdir(parents=True)
    for name in ("train.tsv", "dev.tsv"):
        (folder / name).write_text("sentence\tlabel\nthe cat\t1\na dog\t0\n")
    init = tmp_path / "encoder"  # a preset folder
    size = TupeTokenizer(vocabulary).vocabulary_size()
    TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=size).save_to_preset(str(init))
    kept = tmp_path / "kept"
    kept.mkdir()
    (kept / "notes.txt").write_text("mine")
    common = dict(task="sst2", init=str(init), vocab=vocabulary, data_dir=str(tmp_path / "glue"),
                  epochs=1, batch_size=2, seq_len=8, learning_rate=1e-3, progress=False,
                  xla=False)  # what is saved where, not how the step compiles
    with monkeypatch.context() as patch, pytest.raises(
            FileExistsError, match="kept already exists and is not an empty folder"):
        patch.setattr(finetuning_glue, "load_backbone", lambda init: pytest.fail("read"))
        finetune_glue(FinetuneConfig(save_dir=str(kept), **common))
    assert [p.name for p in kept.iterdir()] == ["notes.txt"]
    empty = tmp_path / "empty"
    empty.mkdir()
    finetune_glue(FinetuneConfig(save_dir=str(empty), **common))
    assert (empty / "config.json").is_file() and (empty / "task.json").is_file()


def test_a_tokenizer_that_cannot_tokenize_fails_in_one_line_naming_the_encoder(vocabulary):
    from keras_tupe.finetuning.glue import check_tokenizes

    tokenizer = bpe_tokenizer()
    tokenizer.encode = lambda text: (_ for _ in ()).throw(ImportError("no sacremoses here"))
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=16)
    with pytest.raises(ValueError) as error:
        check_tokenizes(preprocessor, (["a dog"], ["the cat"]), "runs/tupe_ckpt/preset")
    message = str(error.value)
    assert message == ("runs/tupe_ckpt/preset: its tokenizer (TupeBpeTokenizer) cannot tokenize "
                       "here: ImportError: no sacremoses here")


def test_a_squad_file_without_a_found_answer_is_refused_before_training(tmp_path, vocabulary):
    from keras_tupe.finetuning import finetune_squad
    from keras_tupe_base.settings import SquadConfig

    paragraphs = [{"context": f"the cat sat on the mat number {i} .", "qas": [
        {"id": f"q{i}", "question": "where did the cat sit ?",
         "answers": [{"text": "a missing answer", "answer_start": 4}]}]} for i in range(4)]
    squad_file = tmp_path / "squad.json"
    squad_file.write_text(json.dumps({"version": "1.1", "data": [
        {"title": f"t{i}", "paragraphs": paragraphs[i:i + 1]} for i in range(4)]}))
    init = tmp_path / "encoder"  # a preset folder
    size = TupeTokenizer(vocabulary).vocabulary_size()
    TupeBackbone.from_preset("huang_m4_tiny", vocabulary_size=size).save_to_preset(str(init))
    with pytest.raises(ValueError, match=f"SQuAD {squad_file}: no training question has its "
                                         "first answer's text in its context"):
        finetune_squad(SquadConfig(init=str(init), vocab=vocabulary, offline_split=str(squad_file),
                                   eval_fraction=0.5, seq_len=128, verbose=1))


# Without TensorFlow ----------------------------------------------------------------------

NO_TENSORFLOW = textwrap.dedent("""
    import sys
    sys.modules["tensorflow"] = None  # `import tensorflow` now raises ImportError
    sys.modules["tensorflow_text"] = None
    import json, os
    out = sys.argv[1]
    folder = os.path.join(out, "glue", "SST-2")
    os.makedirs(folder)
    good = ["a fine film", "a great good film", "good fun", "a fine good story", "great acting"]
    bad = ["a dull film", "a bad boring film", "dull and bad", "a boring story", "bad acting"]
    rows = [(s, 1) for s in good] + [(s, 0) for s in bad]
    for name, count in (("train.tsv", 40), ("dev.tsv", 20)):
        with open(os.path.join(folder, name), "w") as f:
            f.write("sentence\\tlabel\\n")
            f.writelines(f"{rows[i % 10][0]}\\t{rows[i % 10][1]}\\n" for i in range(count))
    words = sorted({word for sentence, _ in rows for word in sentence.split()})
    vocab = os.path.join(out, "vocab.txt")
    with open(vocab, "w") as f:
        f.write("\\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"] + words) + "\\n")
    from keras_tupe.finetuning import finetune_glue
    from keras_tupe.models import TupeBackbone
    from keras_tupe_base.settings import FinetuneConfig
    init = os.path.join(out, "encoder")  # a preset folder
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=len(words) + 5).save_to_preset(init)
    result = finetune_glue(FinetuneConfig(
        task="sst2", init=init, vocab=vocab, data_dir=os.path.join(out, "glue"), epochs=1,
        batch_size=8, seq_len=16, learning_rate=1e-3))
    print(json.dumps({"result": result, "tensorflow": sys.modules["tensorflow"] is not None}))
""")


@pytest.mark.jax
def test_fine_tunes_under_jax_in_a_process_without_tensorflow(tmp_path):
    """The GPU machine of issue 48: Keras on JAX, no TensorFlow. One epoch of a tiny
    classifier on 40 sentences through Grain, then a finite dev score."""
    env = {**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)}
    run = subprocess.run([sys.executable, "-c", NO_TENSORFLOW, str(tmp_path)], env=env,
                         capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    result = report["result"]
    assert report["tensorflow"] is False and result["data_loader"] == "grain"
    assert result["train_examples"] == 40
    assert 0.0 <= result["dev"]["validation"]["accuracy"] <= 1.0
    assert np.isfinite(result["dev"]["validation"]["score"])
