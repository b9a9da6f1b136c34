"""GLUE data: the TSV readers on the real files, tfds, pair packing and the batches."""

import os
from pathlib import Path

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_tupe.data import glue, network
from keras_tupe.data.vocabulary import load_tokenizer, train_vocabulary
from keras_tupe.finetuning.glue import longest_packed_length
from tests.packing_oracle import pack_texts, packed_batches

DATA_DIR = Path(
    os.environ.get("KERAS_TUPE_DATA_DIR")
    or Path(__file__).resolve().parents[3] / "shared" / "data"
)
GLUE_DIR = DATA_DIR / "glue"
needs_data = pytest.mark.skipif(
    not (GLUE_DIR / "SST-2").is_dir(), reason=f"GLUE data not found under {GLUE_DIR}"
)
PAD, CLS, SEP = 0, 1, 2
TASK_NAMES = ["cola", "sst2", "mrpc", "stsb", "qqp", "mnli", "qnli", "rte", "wnli"]

# The train/dev sizes of the standard GLUE files (the GLUE paper; tfds's split sizes).
ROW_COUNTS = {
    "cola": (8551, 1043),
    "sst2": (67349, 872),
    "mrpc": (3668, 408),
    "rte": (2490, 277),
    "stsb": (5749, 1500),
    "wnli": (635, 71),
}

# A vocabulary small enough to compute ids by hand: "the" = 5, ..., "home" = 14.
TINY_WORDS = ["the", "cat", "sat", "on", "mat", "a", "dog", "ran", "fast", "home"]
THE, CAT, SAT, ON, MAT, A, DOG, RAN, FAST, HOME = range(5, 15)


def write(path, text):
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return path


def plain_rows(path):
    """The rows of a TSV file read naively, without the csv module: (header, rows)."""
    lines = path.read_text(encoding="utf-8-sig").splitlines()
    return lines[0].split("\t"), [line.split("\t") for line in lines[1:]]


def numpy_batches(dataset):
    """Batches as NumPy: `(x, y)`, or `(x, y, sample_weight)`."""
    return [(
        {key: value.numpy() for key, value in batch[0].items()},
        *(value.numpy() for value in batch[1:]),
    ) for batch in dataset]


@pytest.fixture(scope="module")
def tiny_tokenizer(tmp_path_factory):
    vocabulary = tmp_path_factory.mktemp("tiny") / "vocab.txt"
    write(vocabulary, "\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"] + TINY_WORDS) + "\n")
    return load_tokenizer(vocabulary)


@pytest.fixture(scope="module")
def glue_tokenizer(tmp_path_factory):
    """A vocabulary of up to 500 tokens trained on 600 SST-2 dev sentences (~3 s)."""
    root = tmp_path_factory.mktemp("glue_vocab")
    sst2 = glue.load_glue("sst2", "validation", GLUE_DIR)
    corpus = write(root / "corpus.txt", "\n".join(sst2.sentence1) + "\n")
    return load_tokenizer(train_vocabulary(corpus, 500, root / "vocab.txt", max_lines=600))


# Tasks --------------------------------------------------------------------------------


def test_the_nine_tasks():
    assert list(glue.GLUE_TASKS) == TASK_NAMES
    metrics = {name: list(task.metrics) for name, task in glue.GLUE_TASKS.items()}
    assert metrics == {
        "cola": ["matthews"], "sst2": ["accuracy"], "mrpc": ["accuracy", "f1"],
        "stsb": ["pearson", "spearman"], "qqp": ["accuracy", "f1"], "mnli": ["accuracy"],
        "qnli": ["accuracy"], "rte": ["accuracy"], "wnli": ["accuracy"],
    }
    assert glue.GLUE_TASKS["stsb"].num_classes == 1
    assert glue.GLUE_TASKS["mnli"].eval_splits == ("validation_matched", "validation_mismatched")
    assert glue.GLUE_TASKS["rte"].eval_splits == ("validation",)


@pytest.mark.parametrize("name", TASK_NAMES)
def test_label_order_and_text_keys_are_those_of_tfds(name):
    import tensorflow_datasets as tfds

    task = glue.GLUE_TASKS[name]
    features = tfds.builder(f"glue/{name}").info.features  # no data needed
    assert set(features) == {*task.text_keys, "label", "idx"}
    if name == "stsb":
        assert task.label_names == ()
    else:
        assert list(task.label_names) == features["label"].names
        assert task.num_classes == features["label"].num_classes


# The real files -----------------------------------------------------------------------


@needs_data
@pytest.mark.parametrize("name", sorted(ROW_COUNTS))
def test_row_counts_and_label_ranges_of_the_real_files(name):
    task = glue.GLUE_TASKS[name]
    for split, count in zip(["train", "validation"], ROW_COUNTS[name]):
        examples = glue.load_glue(name, split, data_dir=GLUE_DIR)
        assert (examples.task, examples.split) == (name, split)
        assert len(examples.sentence1) == len(examples.labels) == count
        assert (examples.sentence2 is not None) == (name not in ("cola", "sst2"))
        if examples.sentence2 is not None:
            assert len(examples.sentence2) == count
        if name == "stsb":
            assert examples.labels.dtype == np.float32
            assert examples.labels.min() >= 0.0 and examples.labels.max() <= 5.0
        else:
            assert examples.labels.dtype == np.int64
            assert set(np.unique(examples.labels)) == set(range(task.num_classes))


@needs_data
def test_cola_dev_label_distribution():
    labels = glue.load_glue("cola", "validation", GLUE_DIR).labels
    # `cut -f2 CoLA/dev.tsv | sort | uniq -c`: 322 "0" (unacceptable), 721 "1".
    assert np.bincount(labels).tolist() == [322, 721]


@needs_data
def test_test_splits_are_unlabelled():
    examples = glue.load_glue("rte", "test", GLUE_DIR)
    assert len(examples) == 3000 and (examples.labels == -1).all()
    assert len(glue.load_glue("cola", "test", GLUE_DIR)) == 1063  # has a header, unlike train


@needs_data
def test_mrpc_dev_first_row_read_by_hand():
    # Line 2 of MRPC/dev.tsv (after the byte-order-marked header), read by eye. Its second
    # sentence opens a quote it never closes: the default csv dialect would glue lines.
    label = 1
    first = "He said the foodservice pie business doesn't fit the company's long-term growth strategy."
    second = '"The foodservice pie business does not fit our long-term growth strategy.'
    header, rows = plain_rows(GLUE_DIR / "MRPC" / "dev.tsv")
    assert header[0] == "Quality" and rows[0] == ["1", "1355540", "1355592", first, second]

    examples = glue.load_glue("mrpc", "validation", GLUE_DIR)
    assert examples.sentence1[0] == first and examples.sentence2[0] == second
    assert examples.labels[0] == label
    # The second row is "0 ... Magnarelli said ..." (not_equivalent).
    assert examples.labels[1] == 0 and examples.sentence1[1].startswith("Magnarelli said")


@needs_data
def test_rte_and_wnli_rows_read_by_hand():
    header, rows = plain_rows(GLUE_DIR / "RTE" / "dev.tsv")
    assert header == ["index", "sentence1", "sentence2", "label"]
    assert rows[0][2:] == ["Christopher Reeve had an accident.", "not_entailment"]
    assert rows[1][2:] == ["Bacteria is winning the war against antibiotics.", "entailment"]

    rte = glue.load_glue("rte", "validation", GLUE_DIR)
    assert rte.sentence1[0] == (
        "Dana Reeve, the widow of the actor Christopher Reeve, has died of lung cancer at age "
        "44, according to the Christopher Reeve Foundation."
    )
    assert rte.sentence2[0] == "Christopher Reeve had an accident."
    assert rte.labels[:2].tolist() == [1, 0]  # not_entailment = 1, entailment = 0 (tfds)

    # WNLI's files hold ids: "The drain is clogged with hair. It has to be cleaned." does
    # not entail "The hair has to be cleaned." (0); Jane/Susan's pair is entailed (1).
    wnli = glue.load_glue("wnli", "validation", GLUE_DIR)
    assert wnli.sentence2[:2] == ["The hair has to be cleaned.", "Susan did not answer."]
    assert wnli.labels[:2].tolist() == [0, 1]
    assert glue.GLUE_TASKS["wnli"].label_names[1] == "entailment"


@needs_data
def test_stsb_row_read_by_hand():
    header, rows = plain_rows(GLUE_DIR / "STS-B" / "dev.tsv")
    assert header[7:] == ["sentence1", "sentence2", "score"]
    assert rows[3][7:] == ["A woman is playing the guitar.", "A man is playing guitar.", "2.400"]

    examples = glue.load_glue("stsb", "validation", GLUE_DIR)
    assert examples.sentence1[3] == "A woman is playing the guitar."
    assert examples.sentence2[3] == "A man is playing guitar."
    assert examples.labels[3] == np.float32(2.4)
    assert examples.labels[:2].tolist() == [5.0, 4.75]


@needs_data
def test_data_dir_may_be_the_glue_folder_or_its_parent():
    from_glue = glue.load_glue("wnli", "validation", GLUE_DIR)
    from_parent = glue.load_glue("wnli", "validation", DATA_DIR)
    assert from_glue.sentence1 == from_parent.sentence1
    np.testing.assert_array_equal(from_glue.labels, from_parent.labels)


def test_mnli_layout_and_label_names(tmp_path):
    header = ("index\tpromptID\tpairID\tgenre\tsentence1_binary_parse\tsentence2_binary_parse\t"
              "sentence1_parse\tsentence2_parse\tsentence1\tsentence2\tlabel1\tgold_label\n")
    rows = [("P one.", "H one.", "neutral"), ("P two.", "H two.", "contradiction"),
            ("P three.", "H three.", "entailment")]
    text = header + "".join(
        f"{i}\t0\t0\tfiction\t(\t(\tx\ty\t{p}\t{h}\t{g}\t{g}\n" for i, (p, h, g) in enumerate(rows)
    )
    write(tmp_path / "glue" / "MNLI" / "dev_mismatched.tsv", text)
    examples = glue.load_glue("mnli", "validation_mismatched", data_dir=tmp_path)  # the parent
    assert examples.sentence1 == ["P one.", "P two.", "P three."]
    assert examples.sentence2 == ["H one.", "H two.", "H three."]
    assert examples.labels.tolist() == [1, 2, 0]  # entailment, neutral, contradiction
    with pytest.raises(FileNotFoundError, match="dev_matched.tsv"):
        glue.load_glue("mnli", "validation_matched", data_dir=tmp_path / "glue")


def test_qqp_drops_rows_broken_by_newlines_as_tfds_does(tmp_path):
    # Like QQP train.tsv line 97931: a question holding a newline splits its row in two.
    write(tmp_path / "QQP" / "train.tsv",
          "id\tqid1\tqid2\tquestion1\tquestion2\tis_duplicate\n"
          "0\t1\t2\tIs it?\tIs it so?\t1\n"
          "1\t3\t4\tWas he real?\t\"Was he\n"
          "\tWhat is the evidence?\t0\n"
          "2\t5\t6\tWhy?\tWhy not?\t0\n")
    examples = glue.load_glue("qqp", "train", data_dir=tmp_path)
    assert examples.sentence1 == ["Is it?", "Why?"] and examples.labels.tolist() == [1, 0]


# Errors -------------------------------------------------------------------------------


def test_unknown_task_lists_the_nine_names():
    with pytest.raises(ValueError, match="Unknown GLUE task 'sst'") as error:
        glue.load_glue("sst", "train")
    for name in TASK_NAMES:
        assert name in str(error.value)


def test_unknown_split_lists_the_valid_ones():
    with pytest.raises(ValueError, match="Valid splits: train, validation, test"):
        glue.load_glue("rte", "dev")
    with pytest.raises(ValueError, match="validation_matched and validation_mismatched"):
        glue.load_glue("mnli", "validation")
    with pytest.raises(ValueError, match="test_matched and test_mismatched"):
        glue.load_glue("mnli", "test")


@needs_data
def test_missing_split_file_names_the_expected_path():
    expected = str(GLUE_DIR / "QNLI" / "train.tsv")
    with pytest.raises(FileNotFoundError) as error:
        glue.load_glue("qnli", "train", data_dir=GLUE_DIR)
    assert expected in str(error.value)
    assert len(glue.load_glue("qnli", "validation", data_dir=GLUE_DIR)) == 5463


def test_missing_data_dir(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        glue.load_glue("rte", "train", data_dir=tmp_path / "nowhere")


RTE_HEADER = "index\tsentence1\tsentence2\tlabel\n"


@pytest.mark.parametrize("task, directory, text, line, value", [
    ("rte", "RTE", RTE_HEADER + "0\ta\tb\tentailment\n1\tc\td\tnot_entailment\n2\te\tf\tmaybe\n",
     4, "'maybe'"),
    ("sst2", "SST-2", "sentence\tlabel\ngood\t1\nbad\t2\n", 3, "'2'"),
    ("stsb", "STS-B", "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\t"
     "sentence2\tscore\n0\tg\tf\ty\t0\tn\tn\ta\tb\t7.5\n", 2, "'7.5'"),
    ("cola", "CoLA", "s\t1\t\tFine.\ns\tyes\t\tBad label.\n", 2, "'yes'"),
    ("rte", "RTE", RTE_HEADER + "0\ta\tb\tentailment\n1\tc\td\n", 3, "found 3"),
])
def test_bad_rows_name_the_file_line_and_value(tmp_path, task, directory, text, line, value):
    split_file = "dev.tsv"
    path = write(tmp_path / directory / split_file, text)
    with pytest.raises(ValueError) as error:
        glue.load_glue(task, "validation", data_dir=tmp_path)
    assert f"{path}, line {line}" in str(error.value)
    assert value in str(error.value)


def test_offline_tfds_failure_names_the_task_and_suggests_data_dir(tmp_path, monkeypatch):
    import tensorflow_datasets as tfds

    def offline(*args, **kwargs):
        raise ConnectionError("no network")

    monkeypatch.setattr(tfds, "load", offline)
    # The download host answers (the probe passes), then the download itself fails.
    monkeypatch.setattr(network, "require_network", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError) as error:
        glue.load_glue("mnli", "train", data_dir=tmp_path)  # a folder without MNLI
    message = str(error.value)
    assert "'mnli'" in message and "data_dir" in message and "glue/mnli" in message
    assert str(tmp_path / "MNLI") in message and "no network" in message


# tfds ---------------------------------------------------------------------------------


def test_tfds_source_with_mock_data():
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=6):
        sst2 = glue.load_glue("sst2", "train")
        rte = glue.load_glue("rte", "validation")
        stsb = glue.load_glue("stsb", "train")
    assert len(sst2.sentence1) == len(sst2.labels) == 6 and sst2.sentence2 is None
    assert all(isinstance(s, str) for s in sst2.sentence1)
    assert sst2.labels.dtype == np.int64 and set(sst2.labels.tolist()) <= {0, 1}
    assert len(rte.sentence2) == 6 and all(isinstance(s, str) for s in rte.sentence2)
    assert stsb.labels.dtype == np.float32


def test_tfds_examples_come_back_in_file_order(monkeypatch):
    import tensorflow_datasets as tfds

    # tfds shuffles examples when it prepares a dataset; `idx` is the row in the file.
    prepared = tf.data.Dataset.from_tensor_slices({
        "sentence1": ["b1", "c1", "a1"], "sentence2": ["b2", "c2", "a2"],
        "label": np.array([1, 0, 0], np.int64), "idx": np.array([1, 2, 0], np.int32),
    })
    calls = []

    def load(name, split, download, shuffle_files):
        calls.append((name, split, download))
        return prepared

    monkeypatch.setattr(tfds, "load", load)
    examples = glue.load_glue("rte", "validation")
    assert calls == [("glue/rte", "validation", False)]  # prepared: no download attempt
    assert examples.sentence1 == ["a1", "b1", "c1"] and examples.sentence2 == ["a2", "b2", "c2"]
    assert examples.labels.tolist() == [0, 1, 0] and examples.labels.dtype == np.int64


# Packing ------------------------------------------------------------------------------


def test_pair_packing_by_hand(tiny_tokenizer):
    x = pack_texts(tiny_tokenizer, 12, ["the cat sat"], ["a dog"])
    x = {key: value.numpy().tolist() for key, value in x.items()}
    assert x["token_ids"] == [[CLS, THE, CAT, SAT, SEP, A, DOG, SEP, PAD, PAD, PAD, PAD]]
    assert x["segment_ids"] == [[0, 0, 0, 0, 0, 1, 1, 1, 0, 0, 0, 0]]
    assert x["padding_mask"] == [[1, 1, 1, 1, 1, 1, 1, 1, 0, 0, 0, 0]]


def test_single_sentence_packing_and_input_forms(tiny_tokenizer):
    batch = pack_texts(tiny_tokenizer, 8, ["the cat", "dog ran fast home"])
    assert batch["token_ids"].numpy().tolist() == [
        [CLS, THE, CAT, SEP, PAD, PAD, PAD, PAD],
        [CLS, DOG, RAN, FAST, HOME, SEP, PAD, PAD],
    ]
    assert batch["padding_mask"].numpy().tolist() == [[1] * 4 + [0] * 4, [1] * 6 + [0] * 2]
    assert not batch["segment_ids"].numpy().any()
    for value in batch.values():
        assert value.dtype == tf.int32 and value.shape == (2, 8)
    # A tensor and a single string pack the same way.
    from_tensor = pack_texts(tiny_tokenizer, 8, tf.constant(["the cat", "dog ran fast home"]))
    one = pack_texts(tiny_tokenizer, 8, "dog ran fast home")
    for key in batch:
        np.testing.assert_array_equal(from_tensor[key], batch[key])
        np.testing.assert_array_equal(one[key], batch[key][1])


@pytest.mark.parametrize("first, second, length, first_kept, second_kept", [
    # 6 + 5 tokens into 10 - 3 = 7 places, one at a time in turn: 4 and 3.
    ("the cat sat on the mat", "a dog ran fast home", 10, [THE, CAT, SAT, ON], [A, DOG, RAN]),
    ("the cat sat on the mat", "a dog ran fast home", 9, [THE, CAT, SAT], [A, DOG, RAN]),
    # A short first segment keeps everything; the second takes the rest.
    ("the cat", "a dog ran fast home a dog", 10, [THE, CAT], [A, DOG, RAN, FAST, HOME]),
])
def test_round_robin_truncation(tiny_tokenizer, first, second, length, first_kept, second_kept):
    x = pack_texts(tiny_tokenizer, length, [first], [second])
    ids = x["token_ids"].numpy()[0].tolist()
    assert ids == [CLS, *first_kept, SEP, *second_kept, SEP]
    assert ids[-1] == SEP and len(ids) == length
    assert x["segment_ids"].numpy()[0].tolist() == (
        [0] * (len(first_kept) + 2) + [1] * (len(second_kept) + 1))
    assert x["padding_mask"].numpy()[0].tolist() == [1] * length


# Datasets -----------------------------------------------------------------------------


@needs_data
def test_fill_last_batch_gives_one_shape_and_weighs_only_the_real_rows(glue_tokenizer):
    examples = glue.load_glue("sst2", "validation", GLUE_DIR)  # 872 = 27 x 32 + 8
    plain = numpy_batches(packed_batches(examples, glue_tokenizer, 32, 32))
    filled = numpy_batches(packed_batches(examples, glue_tokenizer, 32, 32,
                                          fill_last_batch=True))
    assert len(plain) == len(filled) == 28
    assert all(x["token_ids"].shape == (32, 32) and len(w) == 32 for x, _, w in filled)
    for (x, y), (x_filled, y_filled, w) in zip(plain[:-1], filled[:-1]):
        np.testing.assert_array_equal(y_filled, y)
        np.testing.assert_array_equal(w, np.ones(32))
    (x, y), (x_filled, y_filled, w) = plain[-1], filled[-1]
    assert len(y) == 8
    np.testing.assert_array_equal(w, [4.0] * 8 + [0.0] * 24)
    rows = np.arange(32) % 8  # the real rows, then copies
    np.testing.assert_array_equal(y_filled, y[rows])
    for key in x:
        np.testing.assert_array_equal(x_filled[key], x[key][rows])
    # Keras's batch-size-reduced loss of the filled batch is the mean over the real rows
    # (reference: NumPy's cross-entropy of the 8 rows alone).
    logits = np.random.default_rng(0).normal(size=(32, 2)).astype("float32")
    loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)(
        y_filled, logits, sample_weight=w)
    log_softmax = logits[:8] - np.log(np.exp(logits[:8]).sum(axis=1, keepdims=True))
    expected = -log_softmax[np.arange(8), y].mean()
    np.testing.assert_allclose(float(loss), expected, rtol=1e-6)
    accuracy = keras.metrics.SparseCategoricalAccuracy()
    accuracy.update_state(y_filled, logits, sample_weight=w)
    np.testing.assert_allclose(float(accuracy.result()),
                               (logits[:8].argmax(axis=1) == y).mean(), rtol=1e-6)


def test_longest_packed_length_by_hand(tiny_tokenizer):
    pairs = (["the cat sat", "a dog ran fast home", "the"], ["a dog", "the", "cat cat cat cat"])
    # [CLS] + words + [SEP] + words + [SEP]: 3+2+3=8, 5+1+3=9, 1+4+3=8.
    assert longest_packed_length(tiny_tokenizer, pairs) == 9
    assert longest_packed_length(tiny_tokenizer, pairs, chunk=1) == 9
    assert longest_packed_length(tiny_tokenizer, ["the cat", "a dog ran"]) == 5


@needs_data
@pytest.mark.parametrize("task", ["sst2", "stsb"])
def test_longest_packed_length_is_the_longest_packing(glue_tokenizer, task):
    examples = glue.load_glue(task, "validation", GLUE_DIR)
    segments = examples.sentence1 if examples.sentence2 is None else (
        examples.sentence1, examples.sentence2)
    longest = longest_packed_length(glue_tokenizer, segments, chunk=100)
    packed = pack_texts(glue_tokenizer, 512, examples.sentence1, examples.sentence2)
    real = packed["padding_mask"].numpy().sum(axis=1)
    assert real.max() < 512 and longest == real.max()
    # Packing at that length truncates nothing; one token shorter truncates the longest.
    at_longest = pack_texts(glue_tokenizer, longest, examples.sentence1, examples.sentence2)
    for key, value in at_longest.items():
        np.testing.assert_array_equal(value.numpy(), packed[key].numpy()[:, :longest])
    shorter = pack_texts(glue_tokenizer, longest - 1, examples.sentence1,
                               examples.sentence2)
    assert shorter["padding_mask"].numpy().sum(axis=1).max() == longest - 1
