"""Pre-training data: corpora, vocabularies, FULL-SENTENCES packing and MLM masking."""

import hashlib
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_tupe import data

DATA_DIR = Path(
    os.environ.get("KERAS_TUPE_DATA_DIR")
    or Path(__file__).resolve().parents[3] / "shared" / "data"
)
ENWIKI_TRAIN = DATA_DIR / "enwiki" / "train.txt"
ENWIKI_VALID = DATA_DIR / "enwiki" / "valid.txt"
WIKITEXT_VALID = DATA_DIR / "wikitext-2" / "wiki.valid.tokens"
needs_data = pytest.mark.skipif(
    not ENWIKI_TRAIN.is_file(), reason=f"real data not found under {DATA_DIR}"
)
needs_valid = pytest.mark.skipif(not ENWIKI_VALID.is_file(), reason=f"no {ENWIKI_VALID}")
PAD, CLS, SEP, UNK, MASK = range(5)
# Real-text slices: the vocabulary's 1,000 lines take about 1 s to learn.
VOCABULARY_LINES = 1000
MASKING_LINES = 3000


def lines_of(source, **kwargs):
    return [line.decode() for line in data.line_dataset(source, **kwargs).as_numpy_iterator()]


def write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def random_documents(seed=0, num_documents=3, lines_per_document=12):
    """Documents of lines drawn from a small word list, so words repeat often."""
    rng = np.random.default_rng(seed)
    words = ("alpha beta gamma delta epsilon zeta theta kappa lambda sigma omega river "
             "stone cloud light north south tower bridge garden winter summer").split()
    return [
        [" ".join(rng.choice(words, rng.integers(3, 14))) for _ in range(lines_per_document)]
        for _ in range(num_documents)
    ]


def corpus_text(documents):
    return "\n\n".join("\n".join(document) for document in documents) + "\n"


@pytest.fixture(scope="module")
def small_corpus(tmp_path_factory):
    """(path, documents, tokenizer) of a temporary corpus and a vocabulary trained on it."""
    root = tmp_path_factory.mktemp("small")
    documents = random_documents()
    path = write(root / "corpus.txt", corpus_text(documents))
    vocabulary = data.train_vocabulary(path, 200, root / "vocab.txt")
    return path, documents, data.load_tokenizer(vocabulary)


@pytest.fixture(scope="module")
def enwiki_vocabulary(tmp_path_factory):
    vocabulary = tmp_path_factory.mktemp("enwiki") / "vocab.txt"
    data.train_vocabulary(ENWIKI_TRAIN, 2000, vocabulary, max_lines=VOCABULARY_LINES)
    return vocabulary


@pytest.fixture(scope="module")
def enwiki_tokenizer(enwiki_vocabulary):
    return data.load_tokenizer(enwiki_vocabulary)


def batches(dataset, count=None):
    """Batches as NumPy: a list of (x, y, sample_weight)."""
    dataset = dataset if count is None else dataset.take(count)
    return list(dataset.as_numpy_iterator())


# Corpora -----------------------------------------------------------------------------


def test_plain_text_documents_are_separated_by_one_empty_line(tmp_path):
    path = write(tmp_path / "c.txt", "\n\n a b \nc d\n\n\n  \ne f\ng h\n\n")
    assert lines_of(path) == ["a b", "c d", "", "e f", "g h"]
    assert lines_of(str(path), max_lines=4) == ["a b", "c d"]


def test_wikitext_titles_start_documents_and_headings_are_kept_as_text(tmp_path):
    path = write(tmp_path / "wiki.tiny.tokens", (
        " \n = Alpha = \n \n Alpha is a letter . \n \n = = History = = \n \n It was used . \n"
        " = = = Later use = = = \n More text = with an equals . \n \n = Beta = \n \n"
        " Beta follows alpha . \n \n"
    ))
    assert lines_of(path) == [
        "Alpha is a letter .", "History", "It was used .", "Later use",
        "More text = with an equals .", "", "Beta follows alpha .",
    ]


def test_directory_reads_its_txt_files_in_sorted_order(tmp_path):
    write(tmp_path / "b.txt", "b1\nb2\n")
    write(tmp_path / "a.txt", "a1\n\na2")  # no final newline: the file still ends a document
    write(tmp_path / "notes.md", "ignored\n")
    assert lines_of(tmp_path) == ["a1", "", "a2", "", "b1", "b2"]


def test_list_sources_are_concatenated_in_order(tmp_path):
    first = write(tmp_path / "first.txt", "one\ntwo\n\n")
    folder = tmp_path / "more"
    folder.mkdir()
    write(folder / "x.txt", "three\n")
    wikitext = write(tmp_path / "w.tokens", " = T = \n four \n")
    assert lines_of([first, folder, wikitext]) == ["one", "two", "", "three", "", "four"]
    assert lines_of((wikitext, first), max_lines=3) == ["four", "", "one"]


def test_missing_path_is_named(tmp_path):
    missing = tmp_path / "nope.txt"
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        data.line_dataset(missing)
    with pytest.raises(FileNotFoundError, match="nope.txt"):
        data.line_dataset([write(tmp_path / "ok.txt", "text\n"), missing])


def test_empty_corpus_is_named(tmp_path):
    blank = write(tmp_path / "blank.txt", "\n  \n\n")
    with pytest.raises(ValueError, match="blank.txt.* is empty"):
        data.line_dataset(blank)
    late = write(tmp_path / "late.txt", "\n\n\ntext\n")
    with pytest.raises(ValueError, match="late.txt.* is empty"):
        data.line_dataset(late, max_lines=3)
    assert lines_of(late, max_lines=4) == ["text"]
    empty_dir = tmp_path / "empty_dir"
    empty_dir.mkdir()
    with pytest.raises(ValueError, match="empty_dir is empty"):
        data.line_dataset(empty_dir)
    for bad in (0, True, 1.5):
        with pytest.raises(ValueError, match=rf"`max_lines` must be an int >= 1\. Received: "
                                             rf"max_lines={bad!r}$"):
            data.line_dataset(late, max_lines=bad)


@needs_data
def test_wikitext2_valid_has_60_articles():
    lines = lines_of(WIKITEXT_VALID)
    # WikiText-2 valid holds 60 articles (60 ` = Title = ` lines): 59 separators.
    assert lines.count("") == 59
    assert lines[0].startswith("Homarus gammarus , known as the European lobster")
    assert "Description" in lines  # the first section heading, markers stripped
    assert not any(line.startswith("= ") for line in lines)


@pytest.mark.parametrize("name", ["imdb_reviews", "wikipedia/20230601.en"])
def test_tfds_source_with_mock_data(name):
    import tensorflow_datasets as tfds

    with tfds.testing.mock_data(num_examples=5):
        lines = lines_of(f"tfds:{name}")
        lines_of_split = lines_of(f"tfds:{name}:train", max_lines=2)
    # Each example is one document: 5 documents, 4 separators, none at the ends.
    assert lines.count("") == 4
    assert lines[0] != "" and lines[-1] != ""
    assert all(a or b for a, b in zip(lines, lines[1:]))  # never two "" in a row
    assert lines_of_split == lines[:3]  # two lines read, one separator between them


def test_tfds_unknown_dataset_is_named():
    with pytest.raises(ValueError, match="no_such_dataset_xyz"):
        data.line_dataset("tfds:no_such_dataset_xyz")


# Vocabulary --------------------------------------------------------------------------


def test_vocabulary_starts_with_special_tokens_and_is_never_overwritten(small_corpus, tmp_path):
    path, _, _ = small_corpus
    vocabulary = tmp_path / "vocab.txt"
    assert data.train_vocabulary(path, 100, vocabulary) == str(vocabulary)
    tokens = vocabulary.read_text().splitlines()
    assert tokens[:5] == data.SPECIAL_TOKENS == ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
    assert "garden" in tokens and len(tokens) <= 100
    before = vocabulary.read_bytes()
    with pytest.raises(FileExistsError, match="vocab.txt"):
        data.train_vocabulary(path, 100, vocabulary)
    assert vocabulary.read_bytes() == before


def test_load_tokenizer_checks_the_special_tokens(small_corpus, tmp_path):
    _, _, tokenizer = small_corpus
    assert tokenizer.token_to_id("[MASK]") == MASK
    lowercased = [tokenizer.token_to_id("garden")]
    assert np.asarray(tokenizer("Garden")).tolist() == lowercased
    swapped = write(tmp_path / "swapped.txt", "[PAD]\n[SEP]\n[CLS]\n[UNK]\n[MASK]\nword\n")
    with pytest.raises(ValueError, match="swapped.txt"):
        data.load_tokenizer(swapped)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        data.load_tokenizer(tmp_path / "missing.txt")


def test_vocabulary_size_must_leave_room_beyond_the_special_tokens(tmp_path):
    path = write(tmp_path / "corpus.txt", "some text\n")
    for bad in (5, True, 100.0):
        with pytest.raises(ValueError, match=rf"`vocabulary_size` must be an int >= 6\. "
                                             rf"Received: vocabulary_size={bad!r}$"):
            data.train_vocabulary(path, bad, tmp_path / "v.txt")
    assert not (tmp_path / "v.txt").exists()


def test_a_small_corpus_gives_fewer_tokens_than_asked(tmp_path, capsys):
    """No pair of pieces seen fewer than 10 times is merged: "quartz" (9 times) stays in
    pieces, "garden" (12) becomes a token; the alphabet has both forms of each letter."""
    path = write(tmp_path / "corpus.txt", "Garden " * 12 + "quartz " * 9 + "\n")
    tokens = Path(data.train_vocabulary(path, 1000, tmp_path / "v.txt")).read_text().splitlines()
    letters = sorted(set("gardenquartz"))
    assert tokens[:5 + 2 * len(letters)] == (
        data.SPECIAL_TOKENS + letters + ["##" + letter for letter in letters])
    assert "garden" in tokens and "quartz" not in tokens and len(tokens) < 1000
    assert f"  vocabulary: {len(tokens)} tokens learned in " in capsys.readouterr().out


@pytest.mark.parametrize("name,content,error,message", [
    ("nope.txt", None, FileNotFoundError, "nope.txt"),
    ("blank.txt", b"\n  \n", ValueError, "blank.txt.* is empty"),
    ("latin1.txt", "d\u00e8s\n".encode("latin-1"), ValueError, "latin1.txt is not UTF-8 text"),
])
def test_the_learner_names_a_corpus_it_cannot_read(tmp_path, name, content, error, message):
    corpus = tmp_path / name
    if content is not None:
        corpus.write_bytes(content)
    with pytest.raises(error, match=message):
        data.train_vocabulary(corpus, 100, tmp_path / "v.txt", verbose=False)
    assert not (tmp_path / "v.txt").exists()


@needs_data
@needs_valid
def test_the_learner_reads_the_words_keras_hubs_tokenizer_splits():
    """The learner's words are keras-hub's (its split, then case folding; NFKC and space
    separators first, see `_plain_spaces`), on held-out text and odd characters: a
    vocabulary of other words would hold pieces the tokenizer never asks for."""
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize  # no public route

    from keras_tupe.data.vocabulary import _learner_text, _plain_spaces, _words

    odd = ("Stra\u00dfe \u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3 \u6771\u4eac\u90fd "
           "\uff21\uff22\uff23\uff01 hy\u00adphen zero\u200bwidth tab\there \ufb01ne "
           "\u0130stanbul a\u00a0b e\u3000f i\u00b4j x\u00a8y")
    lines = lines_of(ENWIKI_VALID, max_lines=300) + [odd]
    for lowercase in (True, False):
        theirs = pretokenize(_plain_spaces(lines, lowercase), lowercase, False, True, True)
        ours = [_words(_learner_text([line], lowercase)).numpy().tolist() for line in lines]
        assert ours == theirs.to_list()
    # Not lowercased, the text stays as it is; lowercased, it is case folded.
    assert ours[-1][:3] == [b"Stra\xc3\x9fe", "\u03a3\u038a\u03a3\u03a5\u03a6\u039f\u03a3".encode(),
                            "\u6771".encode()]
    assert _words(_learner_text([odd])).numpy().tolist()[:2] == [
        b"strasse", "\u03c3\u03af\u03c3\u03c5\u03c6\u03bf\u03c3".encode()]


@needs_data
def test_a_learned_vocabulary_is_the_special_tokens_then_distinct_pieces(
        enwiki_vocabulary, tmp_path):
    """As keras-hub's tokenizer reads it (one token a line, trailing whitespace stripped):
    no token with whitespace (it could never match), none twice, and the same file again
    from the same lines (the learner is deterministic)."""
    import unicodedata

    text = enwiki_vocabulary.read_text(encoding="utf-8")
    tokens = text.split("\n")
    assert tokens.pop() == ""  # each token ends with "\n"
    assert tokens[:5] == data.SPECIAL_TOKENS and len(tokens) == 2000
    assert len(set(tokens)) == len(tokens)
    assert [t for t in tokens if not t.removeprefix("##") or any(
        unicodedata.category(c)[0] in "ZC" or c.isspace() for c in t)] == []
    assert data.load_tokenizer(enwiki_vocabulary).get_vocabulary() == tokens
    again = data.train_vocabulary(ENWIKI_TRAIN, 2000, tmp_path / "again.txt",
                                  max_lines=VOCABULARY_LINES, verbose=False)
    assert Path(again).read_text(encoding="utf-8") == text


@needs_data
@needs_valid
def test_a_learned_vocabulary_tokenizes_held_out_text(enwiki_tokenizer):
    """500 lines of enwiki's valid.txt through `load_tokenizer`'s WordPieceTokenizer, with the
    vocabulary of 2,000 tokens from 1,000 train lines: 0.13% of the words are [UNK] and a
    word takes 1.72 tokens here (4.4 with its alphabet alone); a line without [UNK] spells
    its case-folded text back from the pieces."""
    import keras_hub
    import tensorflow_text as tf_text

    lines = [line for line in lines_of(ENWIKI_VALID, max_lines=500) if line]
    ids = [np.asarray(row) for row in enwiki_tokenizer(lines)]
    # Words as the tokenizer splits them: with no piece, each word is one [UNK].
    words = sum(len(row) for row in keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=["[UNK]"], lowercase=True)(lines))
    assert sum(int(np.sum(row == UNK)) for row in ids) < 0.005 * words
    assert sum(row.size for row in ids) < 1.9 * words
    folded = tf.strings.regex_replace(tf_text.case_fold_utf8(lines), r"[\s\p{Z}\p{C}]", "")
    spelled = [(b"".join(enwiki_tokenizer.id_to_token(int(i)).removeprefix("##").encode()
                         for i in row), text) for row, text in zip(ids, folded.numpy())
               if UNK not in row]
    assert len(spelled) > 0.9 * len(lines)
    assert [pair for pair in spelled if pair[0] != pair[1]] == []
    # The tokenizer splits "…" off, then folds it to "...": a word that needs "##.".
    assert enwiki_tokenizer("wait…").tolist()[-3:] == [
        enwiki_tokenizer.token_to_id(piece) for piece in (".", "##.", "##.")]


def test_vocabulary_fingerprint_is_the_sha256_of_the_file(tmp_path):
    path = write(tmp_path / "v.txt", "\n".join(data.SPECIAL_TOKENS) + "\na\n")
    first = data.vocabulary_fingerprint(path)
    assert first == hashlib.sha256(path.read_bytes()).hexdigest()
    write(path, path.read_text() + "b\n")
    assert data.vocabulary_fingerprint(path) != first


# Packing -----------------------------------------------------------------------------


def expected_stream(documents, tokenizer):
    """The ids of every line in order, one [SEP] between documents."""
    stream = []
    for index, document in enumerate(documents):
        if index:
            stream.append(SEP)
        for line in document:
            stream.extend(np.asarray(tokenizer(line)).tolist())
    return stream


def test_full_sentences_packing(small_corpus):
    path, documents, tokenizer = small_corpus
    length = 16
    dataset = data.mlm_dataset(path, tokenizer, length, batch_size=4, mask_rate=0.0,
                               shuffle_buffer=0, repeat=False, drop_remainder=False)
    got = np.concatenate([x["token_ids"] for x, _, _ in batches(dataset)])
    stream = expected_stream(documents, tokenizer)
    num_sequences = len(stream) // (length - 1)
    assert got.shape == (num_sequences, length)
    assert (got[:, 0] == CLS).all()
    np.testing.assert_array_equal(got[:, 1:].reshape(-1), stream[: num_sequences * (length - 1)])
    assert (got == SEP).sum() == len(documents) - 1  # the boundaries fall inside whole chunks
    unmasked = np.stack(list(data.packed_sequences(path, tokenizer, length).as_numpy_iterator()))
    np.testing.assert_array_equal(unmasked, got)


def test_repeat_restarts_the_corpus_and_reshuffles_each_epoch(small_corpus):
    path, _, tokenizer = small_corpus
    unmasked = [tuple(row) for row in data.packed_sequences(path, tokenizer, 8).as_numpy_iterator()]
    n = len(unmasked)
    in_order = data.mlm_dataset(path, tokenizer, 8, 1, mask_rate=0.0, shuffle_buffer=0)
    rows = [tuple(x["token_ids"][0]) for x, _, _ in batches(in_order, n + 2)]
    assert rows == unmasked + unmasked[:2]
    shuffled = data.mlm_dataset(path, tokenizer, 8, 1, mask_rate=0.0, shuffle_buffer=1000)
    rows = [tuple(x["token_ids"][0]) for x, _, _ in batches(shuffled, 2 * n)]
    epoch_1, epoch_2 = rows[:n], rows[n:]
    assert sorted(epoch_1) == sorted(epoch_2) == sorted(unmasked)
    assert epoch_1 != unmasked and epoch_2 != epoch_1


# Masking -----------------------------------------------------------------------------


def test_mask_selection_length():
    assert data.mask_selection_length(128) == 20  # ceil(0.15 * 127)
    assert data.mask_selection_length(512) == 77
    assert data.mask_selection_length(128, 0.0) == 1
    for length in range(8, 600):
        # tf-text selects ceil(rate * n) in float32, n <= length - 1: never truncated.
        selected = np.ceil(np.float32(length - 1) * np.float32(0.15))
        assert selected <= data.mask_selection_length(length) <= selected + 1


@needs_data
def test_masking_statistics_on_enwiki(enwiki_tokenizer):
    length, rate = 128, 0.15
    slots = data.mask_selection_length(length, rate)
    originals = np.stack(list(data.packed_sequences(
        ENWIKI_TRAIN, enwiki_tokenizer, length, max_lines=MASKING_LINES).as_numpy_iterator()))
    dataset = data.mlm_dataset(ENWIKI_TRAIN, enwiki_tokenizer, length, batch_size=64,
                               shuffle_buffer=0, repeat=False, max_lines=MASKING_LINES,
                               drop_remainder=False)
    outputs = batches(dataset)
    inputs = np.concatenate([x["token_ids"] for x, _, _ in outputs])
    positions = np.concatenate([x["mask_positions"] for x, _, _ in outputs])
    targets = np.concatenate([y for _, y, _ in outputs])
    weights = np.concatenate([w for _, _, w in outputs])
    assert inputs.shape == originals.shape and positions.shape == (len(originals), slots)
    assert all((x["padding_mask"] == 1).all() and (x["segment_ids"] == 0).all()
               for x, _, _ in outputs)

    selectable = ~np.isin(originals, [PAD, CLS, SEP])
    selected = np.zeros_like(selectable)
    rows = np.repeat(np.arange(len(originals))[:, None], slots, axis=1)
    real = weights == 1
    assert set(np.unique(weights)) <= {0.0, 1.0}
    selected[rows[real], positions[real]] = True
    # Each real slot is a distinct selectable position; y is the original id there.
    assert selected.sum() == real.sum()
    assert not (selected & ~selectable).any()
    np.testing.assert_array_equal(targets[real], originals[rows[real], positions[real]])
    assert (targets[~real] == 0).all() and (positions[~real] == 0).all()
    # Tokens change only where selected.
    np.testing.assert_array_equal(inputs[~selected], originals[~selected])
    # tf-text selects ceil(rate * n) of n selectable tokens: no row truncated to P.
    np.testing.assert_array_equal(
        selected.sum(1), np.ceil(selectable.sum(1).astype("float32") * np.float32(rate)))
    assert abs(selected.sum() / selectable.sum() - rate) < 0.01
    assert selected.sum() > 20_000  # the 80/10/10 checks below are then within ~4 sigma

    chosen, before = inputs[selected], originals[selected]
    as_mask = np.mean(chosen == MASK)
    as_random = np.mean((chosen != MASK) & (chosen != before))
    unchanged = np.mean(chosen == before)
    assert abs(as_mask - 0.8) < 0.02, as_mask
    assert abs(as_random - 0.1) < 0.02, as_random
    assert abs(unchanged - 0.1) < 0.02, unchanged


@needs_data
def test_same_seed_same_batches_other_seed_other_batches(enwiki_tokenizer):
    def first_batches(seed, shuffle_buffer):
        dataset = data.mlm_dataset(ENWIKI_TRAIN, enwiki_tokenizer, 64, 8, seed=seed,
                                   shuffle_buffer=shuffle_buffer, max_lines=300)
        return batches(dataset, 3)

    def same(a, b):
        return all(
            all(np.array_equal(x_a[k], x_b[k]) for k in x_a) and np.array_equal(y_a, y_b)
            and np.array_equal(w_a, w_b)
            for (x_a, y_a, w_a), (x_b, y_b, w_b) in zip(a, b)
        )

    reference = first_batches(0, 100)
    tf.random.set_seed(999)  # the caller's global seed does not matter
    assert same(first_batches(0, 100), reference)
    assert not same(first_batches(1, 100), reference)
    # Without shuffling the masks alone differ between seeds, and repeat for a seed.
    unshuffled = first_batches(0, 0)
    assert same(first_batches(0, 0), unshuffled)
    other = first_batches(1, 0)
    assert not np.array_equal(other[0][0]["token_ids"], unshuffled[0][0]["token_ids"])


def test_masks_do_not_depend_on_the_batch_size_and_change_each_epoch(small_corpus):
    """Sequences are masked one at a time, in order, before batching.

    Masking whole batches is not deterministic: tf-text selects the rows' positions
    in a `tf.map_fn` whose iterations draw from one random stream concurrently.
    """
    path, _, tokenizer = small_corpus

    def rows(batch_size, count):
        dataset = data.mlm_dataset(path, tokenizer, 8, batch_size, seed=3, shuffle_buffer=0)
        return [np.concatenate([x["token_ids"] for x, _, _ in batches(dataset, count)]),
                np.concatenate([w for _, _, w in batches(dataset, count)])]

    by_4, by_8 = rows(4, 4), rows(8, 2)
    np.testing.assert_array_equal(by_4[0], by_8[0])
    np.testing.assert_array_equal(by_4[1], by_8[1])
    n = len(list(data.packed_sequences(path, tokenizer, 8)))
    epochs = rows(1, 2 * n)[0]
    assert not np.array_equal(epochs[:n], epochs[n:])  # dynamic masking


# Arguments ---------------------------------------------------------------------------


@pytest.mark.parametrize("kwargs, name", [
    ({"sequence_length": 7}, "sequence_length"),
    ({"batch_size": 0}, "batch_size"),
    ({"mask_rate": 1.5}, "mask_rate"),
    ({"mask_rate": -0.1}, "mask_rate"),
    ({"mask_token_rate": 1.1}, "mask_token_rate"),
    ({"random_token_rate": -0.5}, "random_token_rate"),
    ({"mask_token_rate": 0.8, "random_token_rate": 0.3}, "mask_token_rate \\+ random_token_rate"),
    ({"shuffle_buffer": -1}, "shuffle_buffer"),
])
def test_bad_arguments_are_named(small_corpus, kwargs, name):
    path, _, tokenizer = small_corpus
    arguments = {"sequence_length": 16, "batch_size": 2, **kwargs}
    with pytest.raises(ValueError, match=name):
        data.mlm_dataset(path, tokenizer, **arguments)


def test_padding_tokenizer_is_refused(small_corpus, tmp_path):
    path, _, _ = small_corpus
    vocabulary = data.train_vocabulary(path, 100, tmp_path / "v.txt")
    padding = data.load_tokenizer(vocabulary, sequence_length=16)
    with pytest.raises(ValueError, match="sequence_length"):
        data.mlm_dataset(path, padding, 16, 2)


def test_mask_selection_length_rejects_bad_rate():
    with pytest.raises(ValueError, match="mask_rate"):
        data.mask_selection_length(128, 2.0)
    assert data.mask_selection_length(8, 1.0) == 7


def test_the_packages_lazy_names_are_the_pipelines():
    """`keras_tupe.data` lends the tf.data pipeline's names on first use (`__getattr__`):
    its `__all__` is the pipeline's, and a name neither has is an AttributeError naming it."""
    from keras_tupe.data import pretraining

    assert data.__all__ == list(pretraining.__all__) and "mlm_dataset" in data.__all__
    assert data.mlm_dataset is pretraining.mlm_dataset
    with pytest.raises(AttributeError, match="'keras_tupe.data' has no attribute 'no_such_name'"):
        data.no_such_name  # noqa: B018
