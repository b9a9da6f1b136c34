"""SQuAD v1.1 data: loading, the unofficial article split, windowed features, answers."""

import json
import os
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from keras_tupe.data import network, squad
from keras_tupe.data.vocabulary import load_tokenizer, train_vocabulary
from keras_tupe.models import span_windows
from keras_tupe.models.wordpiece_offsets import (
    TfWordPieceOffsets,
    WordPieceOffsets,
    wordpiece_offsets,
)

DATA_DIR = Path(
    os.environ.get("KERAS_TUPE_DATA_DIR")
    or Path(__file__).resolve().parents[3] / "shared" / "data"
)
DEV_FILE = DATA_DIR / "squad" / "dev-v1.1.json"
needs_data = pytest.mark.skipif(not DEV_FILE.is_file(), reason=f"{DEV_FILE} not found")
PAD, CLS, SEP, UNK = range(4)
# A vocabulary learned from 200 contexts is small (1,324 tokens of the 2,000 asked, here), so
# contexts are long in tokens and many need several windows.
VOCABULARY_LINES = 200
SEQUENCE_LENGTH, DOC_STRIDE, MAX_QUERY_LENGTH = 384, 128, 64
MIN_RATE = 0.97


def normalize(text):
    return " ".join(text.lower().split())


def questions_of(articles):
    return [qa for article in articles for paragraph in article["paragraphs"]
            for qa in paragraph["qas"]]


def contexts_by_qid(articles):
    return {qa["id"]: paragraph["context"] for article in articles
            for paragraph in article["paragraphs"] for qa in paragraph["qas"]}


@pytest.fixture(scope="module")
def articles():
    return squad.load_squad(DEV_FILE)


@pytest.fixture(scope="module")
def vocabulary(articles, tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    corpus = root / "contexts.txt"
    contexts = [p["context"].replace("\n", " ") for a in articles for p in a["paragraphs"]]
    corpus.write_text("\n".join(contexts) + "\n", encoding="utf-8")
    return train_vocabulary(corpus, 2000, root / "vocab.txt", max_lines=VOCABULARY_LINES)


@pytest.fixture(scope="module")
def tokenizer(vocabulary):
    return wordpiece_offsets(load_tokenizer(vocabulary))  # tensorflow-text's, here


@pytest.fixture(scope="module")
def keras_context_ids(articles, tokenizer):
    """{context: keras-hub WordPieceTokenizer ids}, the reference."""
    contexts = list(dict.fromkeys(p["context"] for a in articles for p in a["paragraphs"]))
    return dict(zip(contexts, (list(ids) for ids in tokenizer.tokenizer(contexts))))


@pytest.fixture(scope="module")
def keras_question_ids(articles, tokenizer):
    """{question: keras-hub WordPieceTokenizer ids}, the reference, in one call."""
    questions = list(dict.fromkeys(qa["question"] for qa in questions_of(articles)))
    return dict(zip(questions, (list(ids) for ids in tokenizer.tokenizer(questions))))


@pytest.fixture(scope="module")
def features(articles, vocabulary):
    return span_windows.featurize(articles, load_tokenizer(vocabulary), SEQUENCE_LENGTH,
                                  DOC_STRIDE, MAX_QUERY_LENGTH)


# Loading --------------------------------------------------------------------------------


@needs_data
def test_load_squad_dev_file(articles):
    assert len(articles) == 48
    questions = questions_of(articles)
    assert len(questions) == 10570
    assert len({qa["id"] for qa in questions}) == 10570
    assert articles[0]["title"] == "Super_Bowl_50"
    paragraph = articles[0]["paragraphs"][0]
    answer = paragraph["qas"][0]["answers"][0]
    assert answer == {"answer_start": 177, "text": "Denver Broncos"}
    assert paragraph["context"][177:177 + len("Denver Broncos")] == "Denver Broncos"


@needs_data
def test_load_squad_split_from_the_data_folder(articles):
    # The shared layout (squad/dev-v1.1.json) and the file's own folder both work.
    assert squad.load_squad("validation", data_dir=DATA_DIR) == articles
    assert squad.load_squad("validation", data_dir=DEV_FILE.parent) == articles


def test_load_squad_from_tfds_regroups_the_examples(monkeypatch):
    import tensorflow_datasets as tfds

    def example(qid, title, context, start):
        return {"id": qid, "title": title, "context": context, "question": f"q {qid}?",
                "answers": {"text": [context[start:start + 3]], "answer_start": [start]}}

    rows = [example("a", "T1", "Cats are cute.", 0), example("b", "T2", "Dogs bark.", 5),
            example("c", "T1", "Cats are cute.", 9), example("d", "T1", "Birds fly.", 6)]
    calls = []

    def load(name, split, data_dir, download):
        calls.append((name, split, download))
        examples = {key: [row[key] for row in rows]
                    for key in ("id", "title", "context", "question")}
        examples["answers"] = {key: [row["answers"][key] for row in rows]
                               for key in ("text", "answer_start")}
        return tf.data.Dataset.from_tensor_slices(examples)

    monkeypatch.setattr(tfds, "load", load)
    articles = squad.load_squad("train")
    assert calls == [("squad/v1.1", "train", False)]
    assert [a["title"] for a in articles] == ["T1", "T2"]
    assert [p["context"] for p in articles[0]["paragraphs"]] == ["Cats are cute.", "Birds fly."]
    assert [qa["id"] for qa in articles[0]["paragraphs"][0]["qas"]] == ["a", "c"]
    assert articles[0]["paragraphs"][0]["qas"][1] == {
        "id": "c", "question": "q c?", "answers": [{"text": "cut", "answer_start": 9}]}
    assert articles[1]["paragraphs"][0]["qas"][0]["answers"] == [{"text": "bar", "answer_start": 5}]


def test_load_squad_offline_tfds_is_a_clear_error(monkeypatch, tmp_path):
    import tensorflow_datasets as tfds

    def load(name, split, data_dir, download):
        raise ConnectionError("no network")

    monkeypatch.setattr(tfds, "load", load)
    # The download host answers (the probe passes), then the download itself fails.
    monkeypatch.setattr(network, "require_network", lambda *args, **kwargs: None)
    with pytest.raises(RuntimeError, match=r"(?s)offline.*dev-v1\.1\.json.*no network"):
        squad.load_squad("validation", data_dir=tmp_path)


def test_load_squad_errors(tmp_path):
    with pytest.raises(FileNotFoundError, match="nowhere.json"):
        squad.load_squad(tmp_path / "nowhere.json")

    def check(name, content, match):
        path = tmp_path / name
        path.write_text(content if isinstance(content, str) else json.dumps(content))
        with pytest.raises(ValueError, match=match):
            squad.load_squad(path)

    check("text.json", "not json at all", "text.json is not a SQuAD v1.1 json file")
    check("list.json", [1, 2], 'list.json is not in the SQuAD v1.1 format: .*"data" list')
    check("noparagraphs.json", {"data": [{"title": "x"}]}, 'article 0 has no "paragraphs"')
    check("nocontext.json", {"data": [{"title": "x", "paragraphs": [{"qas": []}]}]},
          'article 0 paragraph 0 has no "context"')
    qa = {"id": "1", "question": "why?", "answers": [{"text": "b", "answer_start": "0"}]}
    check("badanswer.json", {"data": [{"paragraphs": [{"context": "ab", "qas": [qa]}]}]},
          'question 1 has no "answers" list')
    v2 = {"version": "v2.0", "data": []}
    check("v2.json", v2, "SQuAD 2.0 is not supported")
    qa = {"id": "2", "question": "why?", "answers": [], "is_impossible": True}
    check("impossible.json", {"data": [{"paragraphs": [{"context": "ab", "qas": [qa]}]}]},
          "question 2 is unanswerable")


# The unofficial split -------------------------------------------------------------------


@needs_data
def test_split_articles_is_disjoint_complete_deterministic_and_labelled(articles, caplog):
    with caplog.at_level("WARNING"):
        split = squad.split_articles(articles, eval_fraction=0.2, seed=0)
    train, evaluation = split
    assert "NOT the official" in split.label and "NOT the official" in caplog.text
    assert (len(train), len(evaluation)) == (38, 10)  # round(0.2 * 48) held out
    titles = [a["title"] for a in articles]
    train_titles, eval_titles = [a["title"] for a in train], [a["title"] for a in evaluation]
    assert not set(train_titles) & set(eval_titles)
    assert sorted(train_titles + eval_titles) == sorted(titles)
    assert train_titles == [t for t in titles if t in set(train_titles)]  # input order kept
    again = squad.split_articles(articles, eval_fraction=0.2, seed=0)
    assert again == split and again.eval is again[1]
    # The held-out set depends on the seed and the set of articles, not their order.
    assert [a["title"] for a in squad.split_articles(articles[::-1], 0.2, seed=0).eval] == \
        eval_titles[::-1]
    other = squad.split_articles(articles, 0.2, seed=1).eval
    assert {a["title"] for a in other} != set(eval_titles)
    assert len(squad.split_articles(articles, eval_fraction=0.5)[1]) == 24
    assert len(squad.split_articles(articles, eval_fraction=0.001)[1]) == 1
    for fraction in (0, 1, 1.5):
        with pytest.raises(ValueError, match="eval_fraction"):
            squad.split_articles(articles, eval_fraction=fraction)


# Tokenization with offsets --------------------------------------------------------------


@needs_data
def test_ids_equal_keras_hub_on_real_contexts_and_questions(articles, tokenizer, keras_context_ids,
                                                            keras_question_ids):
    contexts = list(keras_context_ids)
    ours = tokenizer.tokenize(contexts)
    assert len(contexts) == 2067
    assert all(ids.tolist() == keras_context_ids[c] for c, (ids, _, _) in zip(contexts, ours))
    questions = [qa["question"] for qa in questions_of(articles)]
    assert all(ids.tolist() == keras_question_ids[question]
               for (ids, _, _), question in zip(tokenizer.tokenize(questions), questions))


@needs_data
def test_offsets_point_at_each_token_in_the_original_text(tokenizer, keras_context_ids):
    vocabulary = tokenizer.tokenizer.get_vocabulary()
    checked = 0
    contexts = list(keras_context_ids)
    for context, (ids, starts, ends) in zip(contexts, tokenizer.tokenize(contexts)):
        assert np.all(starts[1:] >= starts[:-1]) and np.all(ends > starts)
        assert starts.min() >= 0 and ends.max() <= len(context)
        for token_id, start, end in zip(ids, starts, ends):
            piece = context[start:end]
            if token_id != UNK and piece.isascii():
                assert piece.lower() == vocabulary[token_id].removeprefix("##"), (piece, token_id)
                checked += 1
    assert checked > 300_000


@pytest.mark.parametrize("offsets", [WordPieceOffsets, TfWordPieceOffsets])
@pytest.mark.parametrize("lowercase", [True, False])
def test_offsets_through_unicode_and_case_folding(tmp_path, lowercase, offsets):
    texts = ["Straße in İstanbul… café (cafe\u0301) ＡＢ ﬁne",
             "東京 tower\u00a0X, €27 — ok!", ""]
    characters = sorted({c for text in texts for c in text if not c.isspace()} | set("sifneab."))
    words = ["straße", "Straße", "istanbul", "tower", "fine", "ok"]
    tokens = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"] + words + characters + [
        "##" + c for c in characters]
    path = tmp_path / "vocab.txt"
    path.write_text("".join(t + "\n" for t in dict.fromkeys(tokens)), encoding="utf-8")
    tokenizer = offsets(load_tokenizer(path, lowercase=lowercase))
    outputs = tokenizer.tokenize(texts)
    references = tokenizer.tokenizer(texts)
    for text, (ids, starts, ends), expected in zip(texts, outputs, references):
        assert ids.tolist() == list(expected)
        assert np.all(ends > starts) and (len(ids) == 0 or ends.max() <= len(text))
        assert np.all(starts[1:] >= starts[:-1]) and np.all(ends[1:] >= ends[:-1])
    vocabulary = tokenizer.tokenizer.get_vocabulary()
    spans = [(vocabulary[i], texts[0][s:e]) for i, s, e in zip(*outputs[0])]
    if lowercase:
        assert spans == [
            # Folding "ß" gives "ss": both pieces span "ß".
            ("s", "S"), ("##t", "t"), ("##r", "r"), ("##a", "a"), ("##s", "ß"), ("##s", "ß"),
            ("##e", "e"), ("i", "i"), ("##n", "n"),
            ("[UNK]", "İstanbul"),  # folds to "i̇stanbul" (a combining dot): unknown
            (".", "…"), ("##.", "…"), ("##.", "…"),  # NFKC: "..."
            ("c", "c"), ("##a", "a"), ("##f", "f"), ("##é", "é"), ("(", "("),
            # "e" + combining accent composes to "é": proportional, within the word.
            ("c", "ca"), ("##a", "af"), ("##f", "fe"), ("##é", "e\u0301"), (")", ")"),
            ("a", "Ａ"), ("##b", "Ｂ"), ("fine", "ﬁne"),
        ]
    else:  # nothing is folded: every piece is its own text
        assert spans[0] == ("Straße", "Straße") and ("İ", "İ") in spans
        assert all(text == token.removeprefix("##") for token, text in spans)
    assert [texts[1][s:e] for s, e in zip(*outputs[1][1:])] == [
        "東", "京", "tower\u00a0X", ",", "€", "2", "7", "—", "ok", "!"]  # NBSP splits nothing
    assert [len(ids) for ids, _, _ in outputs][2] == 0


# Features -------------------------------------------------------------------------------


@needs_data
def test_feature_layout(features, articles, tokenizer):
    n = len(features)
    assert n > len(questions_of(articles))  # long contexts give several windows
    for name in span_windows.INPUT_NAMES + ("token_start_char", "token_end_char"):
        array = getattr(features, name)
        assert array.shape == (n, SEQUENCE_LENGTH) and array.dtype == np.int32, name
    for name in ("start_positions", "end_positions", "example_index", "window_start"):
        assert getattr(features, name).shape == (n,) and getattr(features, name).dtype == np.int32
    ids, mask, types = features.token_ids, features.padding_mask, features.segment_ids
    length = mask.sum(axis=1)
    assert np.all(ids[:, 0] == CLS)
    # The mask is 1 exactly over the tokens, never past L; padding is [PAD] with type 0.
    assert np.array_equal(mask, (np.arange(SEQUENCE_LENGTH) < length[:, None]).astype(np.int32))
    assert np.all(ids[mask == 0] == PAD) and np.all(types[mask == 0] == 0)
    # [SEP] exactly twice: after the question (the last type-0 token) and last.
    question_end = (types == 0).argmin(axis=1) - 1  # (N,)
    rows = np.arange(n)
    assert np.all(ids[rows, question_end] == SEP) and np.all(ids[rows, length - 1] == SEP)
    assert np.all((ids == SEP).sum(axis=1) == 2)
    # Types: 0 then 1 up to the final [SEP], which is 1.
    assert np.array_equal(types, ((np.arange(SEQUENCE_LENGTH) > question_end[:, None])
                                  & (mask == 1)).astype(np.int32))
    assert np.all(question_end - 1 <= MAX_QUERY_LENGTH)
    # The offset map covers the context tokens only.
    is_context = (types == 1) & (np.arange(SEQUENCE_LENGTH) < length[:, None] - 1)
    assert np.array_equal(features.token_start_char >= 0, is_context)
    assert np.array_equal(features.token_end_char >= 0, is_context)
    assert not np.any(features.token_is_max_context & ~is_context)
    assert features.qids.shape == (n,)
    assert features.qids[0] == articles[0]["paragraphs"][0]["qas"][0]["id"]


@needs_data
def test_windows_cover_each_context_with_the_stride(features, articles, keras_context_ids,
                                                    keras_question_ids):
    contexts = contexts_by_qid(articles)
    questions = {qa["id"]: qa["question"] for qa in questions_of(articles)}
    qids = features.qids
    multi = 0
    for example, qid in enumerate(features.example_ids):
        rows = np.flatnonzero(features.example_index == example)
        context_ids = keras_context_ids[contexts[qid]]
        question_ids = keras_question_ids[questions[qid]][:MAX_QUERY_LENGTH]
        window = SEQUENCE_LENGTH - len(question_ids) - 3
        expected = 1 + max(0, -(-(len(context_ids) - window) // DOC_STRIDE))  # ceil
        assert len(rows) == expected, qid
        multi += len(rows) > 1
        assert features.window_start[rows].tolist() == [DOC_STRIDE * i for i in range(len(rows))]
        covered = np.zeros(len(context_ids), int)
        for row in rows:
            ids = features.token_ids[row]
            assert ids[1:1 + len(question_ids)].tolist() == question_ids
            part = ids[features.segment_ids[row] == 1][:-1]  # the window, without [SEP]
            start = features.window_start[row]
            assert part.tolist() == context_ids[start:start + len(part)]
            assert len(part) == window or start + len(part) == len(context_ids)
            covered[start:start + len(part)] += 1
        assert covered.min() >= 1, qid
        # Each context token is "max context" in exactly one window: BERT's, the first of
        # those maximizing min(left, right context) + 0.01 * window length.
        score = np.full((len(rows), len(context_ids)), -np.inf)
        is_max = np.zeros((len(rows), len(context_ids)), bool)
        for r, row in enumerate(rows):
            in_window = features.segment_ids[row] == 1
            start, length = features.window_start[row], in_window.sum() - 1
            position = np.arange(start, start + length)
            score[r, position] = np.minimum(position - start, start + length - 1 - position) \
                + 0.01 * length
            is_max[r, position] = features.token_is_max_context[row][in_window][:-1]
        assert np.array_equal(is_max, score.argmax(axis=0) == np.arange(len(rows))[:, None]), qid
    assert len(set(qids)) == 10570 and multi > 1000, multi


@needs_data
def test_answer_positions_decode_to_the_answer(features, articles):
    contexts = contexts_by_qid(articles)
    answers = {qa["id"]: qa["answers"][0] for qa in questions_of(articles)}
    decoded = matched = 0
    for row, qid in enumerate(features.qids):
        start, end = features.start_positions[row], features.end_positions[row]
        starts, ends = features.token_start_char[row], features.token_end_char[row]
        answer = answers[qid]
        a, b = answer["answer_start"], answer["answer_start"] + len(answer["text"])
        # The window holds the answer iff its context tokens overlap both its ends.
        overlapping = np.flatnonzero((ends > a) & (starts < b) & (starts >= 0))
        first, last = np.flatnonzero(starts >= 0)[[0, -1]]
        inside = len(overlapping) > 0 and (starts[first] <= a and b <= ends[last])
        if not inside:
            assert start == end == 0, qid
            continue
        assert first <= start <= end <= last, qid
        assert (start, end) == (overlapping[0], overlapping[-1]), qid
        text = contexts[qid][starts[start]:ends[end]]
        decoded += 1
        matched += normalize(text) == normalize(answer["text"])
    rate = matched / decoded
    print(f"\nanswer decoding: {matched}/{decoded} = {rate:.4f} of windows holding the answer")
    assert decoded > 10570 and rate >= MIN_RATE, rate


@needs_data
def test_short_windows_truncated_questions_and_eval_features(articles, vocabulary):
    few = articles[:2]
    tokenizer = load_tokenizer(vocabulary)
    train = span_windows.featurize(few, tokenizer, sequence_length=48, doc_stride=16,
                                   max_query_length=8, training=True)
    evaluation = span_windows.featurize(few, tokenizer, sequence_length=48, doc_stride=16,
                                        max_query_length=8, training=False)
    assert evaluation.start_positions is None and evaluation.end_positions is None
    for name in span_windows.INPUT_NAMES + ("token_start_char", "example_index", "window_start"):
        assert np.array_equal(getattr(train, name), getattr(evaluation, name)), name
    head = train.head(5)
    assert head.example_ids == train.example_ids[:5] and set(head.example_index) == set(range(5))
    rows = train.example_index < 5
    assert len(head) == rows.sum() > 5  # every window of the 5 questions
    assert np.array_equal(head.end_positions, train.end_positions[rows])
    assert np.array_equal(head.token_end_char, train.token_end_char[rows])
    for wrong in (-1, 2.0, True):
        with pytest.raises(ValueError, match=f"`num_examples` must be an int >= 0.*{wrong!r}"):
            train.head(wrong)
    question_length = (train.segment_ids == 0).argmin(axis=1) - 2
    assert question_length.max() == 8  # truncated
    assert np.all(train.padding_mask.sum(axis=1) <= 48)
    assert np.all(np.diff(train.window_start)[np.diff(train.example_index) == 0] == 16)
    for name, kwargs in (("sequence_length", {"sequence_length": 0}),
                         ("doc_stride", {"doc_stride": 1.5}),
                         ("sequence_length", {"sequence_length": 67, "max_query_length": 64})):
        with pytest.raises(ValueError, match=name):
            span_windows.featurize(few, tokenizer, **kwargs)


@needs_data
def test_training_features_locate_misplaced_answers_and_skip_missing_ones(vocabulary, caplog):
    context = "The cat sat on the mat. The dog did not."
    qas = [{"id": "moved", "question": "Where?", "answers": [{"text": "mat", "answer_start": 2}]},
           {"id": "absent", "question": "Who?", "answers": [{"text": "bird", "answer_start": 4}]},
           {"id": "padded", "question": "Who?", "answers": [{"text": " dog ", "answer_start": 26}]}]
    articles = [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]
    with caplog.at_level("WARNING"):
        features = span_windows.featurize(articles, load_tokenizer(vocabulary),
                                          sequence_length=32, max_query_length=8)
    assert features.example_ids == ["moved", "padded"] and "absent" in caplog.text
    spans = [context[features.token_start_char[i, s]:features.token_end_char[i, e]]
             for i, (s, e) in enumerate(zip(features.start_positions, features.end_positions))]
    assert spans == ["mat", "dog"]
    evaluation = span_windows.featurize(articles, load_tokenizer(vocabulary), 32,
                                        max_query_length=8, training=False)
    assert evaluation.example_ids == ["moved", "absent", "padded"]


def test_shifted_answer_offsets_are_moved_and_counted_in_one_line(tmp_path, caplog):
    """Issue 59, table row 9: every `answer_start` shifted by 7 was repaired silently (the
    same features as the clean file, no line saying so)."""
    vocabulary = tmp_path / "vocab.txt"
    vocabulary.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "the", "cat",
                                     "sat", "on", "mat", "dog", "ran", ".", "where", "?"]) + "\n")
    context = "the cat sat on the mat . the dog ran ."
    answers = ["mat", "dog", "cat", "ran"]

    def articles(shift):
        qas = [{"id": f"q{i}", "question": "where ?",
                "answers": [{"text": text, "answer_start": context.index(text) + shift}]}
               for i, text in enumerate(answers)]
        return [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]

    with caplog.at_level("WARNING", logger=span_windows.logger.name):
        clean = span_windows.featurize(articles(0), load_tokenizer(vocabulary), 32, 8, 8)
        assert caplog.records == []
        shifted = span_windows.featurize(articles(7), load_tokenizer(vocabulary), 32, 8, 8)
    assert [r.getMessage() for r in caplog.records] == [
        "SQuAD: moved 4 answer offset(s) to where their text is (the occurrence in the "
        "context nearest to an answer_start that does not point at it), e.g. of q0, q1, q2 "
        "and 1 more.",
    ]
    for name in ("token_ids", "start_positions", "end_positions"):
        np.testing.assert_array_equal(getattr(shifted, name), getattr(clean, name))


# Answers --------------------------------------------------------------------------------


def oracle_logits(features, low=-10.0, high=10.0):
    rows = np.arange(len(features))
    start = np.full(features.token_ids.shape, low, np.float32)
    end = start.copy()
    start[rows, features.start_positions] = high
    end[rows, features.end_positions] = high
    return start, end


@needs_data
def test_postprocess_recovers_exact_answers_from_oracle_logits(features, articles):
    start_logits, end_logits = oracle_logits(features)
    truth = {qa["id"]: qa["answers"][0]["text"] for qa in questions_of(articles)}
    contexts = contexts_by_qid(articles)
    rates = {}
    for max_answer_length in (SEQUENCE_LENGTH, 30):
        predictions = span_windows.postprocess(features, start_logits, end_logits, articles,
                                        max_answer_length=max_answer_length)
        assert set(predictions) == set(truth)
        assert all(p in contexts[qid] for qid, p in predictions.items())  # exact substrings
        rates[max_answer_length] = np.mean([predictions[q] == truth[q] for q in truth])
    print(f"\noracle exact match: {rates[SEQUENCE_LENGTH]:.4f} (no length limit), "
          f"{rates[30]:.4f} (max_answer_length=30)")
    assert rates[SEQUENCE_LENGTH] >= MIN_RATE, rates
    assert rates[30] <= rates[SEQUENCE_LENGTH]


@needs_data
def test_postprocess_rejects_long_and_non_context_spans(features, articles):
    contexts = contexts_by_qid(articles)
    # A single-window question with a long window: logits favour a 36-token span.
    lengths = (features.segment_ids == 1).sum(axis=1)
    counts = np.bincount(features.example_index)
    row = int(np.flatnonzero((lengths > 60) & (counts[features.example_index] == 1))[0])
    qid = features.qids[row]
    offset = int((features.segment_ids[row] == 0).argmin())
    start_logits = np.full(features.token_ids.shape, -10.0, np.float32)
    end_logits = start_logits.copy()
    s = offset + 5
    start_logits[row, s] = 10.0
    end_logits[row, s + 35] = 9.0  # the best end, 36 tokens
    end_logits[row, s + 3] = 5.0   # the best end within 30 tokens
    start_logits[row, 1] = end_logits[row, 1] = 50.0  # a question token: never an answer
    start_logits[row, 0] = end_logits[row, 0] = 50.0  # [CLS]: never an answer either
    start_logits[row, offset - 2] = 50.0  # a span from the question into the context: neither
    starts, ends = features.token_start_char[row], features.token_end_char[row]

    def answer(max_answer_length):
        return span_windows.postprocess(features, start_logits, end_logits, articles,
                                 max_answer_length=max_answer_length)[qid]

    assert answer(30) == contexts[qid][starts[s]:ends[s + 3]]
    assert answer(36) == contexts[qid][starts[s]:ends[s + 35]]
    # An end on the final [SEP] or on padding is no answer.
    last = int(features.padding_mask[row].sum()) - 2  # the last context token
    start_logits[row], end_logits[row] = -10.0, -10.0
    start_logits[row, last] = 10.0
    end_logits[row, last + 1:last + 4] = 50.0  # [SEP] (and padding), in the n_best ends
    end_logits[row, last] = 1.0
    assert answer(30) == contexts[qid][starts[last]:ends[last]]
    with pytest.raises(ValueError, match="shape"):
        span_windows.postprocess(features, start_logits[:, :10], end_logits, articles)


@needs_data
def test_postprocess_judges_a_start_in_its_max_context_window_only(features, articles):
    contexts = contexts_by_qid(articles)
    counts = np.bincount(features.example_index)
    row = int(np.flatnonzero(counts[features.example_index] >= 2)[0])  # a first window
    qid = features.qids[row]
    # A token of the first window that has more context in the second one.
    t = int(np.flatnonzero((features.token_start_char[row] >= 0)
                           & ~features.token_is_max_context[row])[0])
    u = int(np.flatnonzero(features.token_is_max_context[row])[0])
    start_logits = np.full(features.token_ids.shape, -10.0, np.float32)
    end_logits = start_logits.copy()
    start_logits[row, t] = end_logits[row, t] = 20.0  # the better span, but not judged here
    start_logits[row, u] = end_logits[row, u] = 5.0
    starts, ends = features.token_start_char[row], features.token_end_char[row]
    predictions = span_windows.postprocess(features, start_logits, end_logits, articles)
    assert predictions[qid] == contexts[qid][starts[u]:ends[u]] != contexts[qid][starts[t]:ends[t]]
    with pytest.raises(ValueError, match="not in `articles`"):
        span_windows.postprocess(features, start_logits, end_logits, articles[:1])

