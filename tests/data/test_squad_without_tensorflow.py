"""SQuAD without TensorFlow: the pure-Python WordPiece offsets against tensorflow-text's.

`WordPieceOffsets` (pure Python, the route where TensorFlow is absent) is checked against
`TfWordPieceOffsets` (tensorflow-text's `regex_split_with_offsets`, `case_fold_utf8` and
`FastWordpieceTokenizer.tokenize_with_offsets`, the route SQuAD featurization has always
taken), and both against keras-hub's tokenizer: the same ids, starts and ends on
hand-written text (accents, case folding that changes lengths, CJK, punctuation, control
and format characters, unknown words, words past the 100-byte limit) and on SQuAD v1.1 dev
contexts and questions, lowercased and cased; the same features, every array, from
`featurize` on both routes; and one epoch of span QA under JAX in a process where
TensorFlow cannot import, whose features equal tensorflow-text's.
"""

import collections
import dataclasses
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras_hub
import numpy as np
import pytest

from keras_tupe.data import squad
from keras_tupe.models import TupeTokenizer
from keras_tupe.models import span_windows
from keras_tupe.models.wordpiece_offsets import TfWordPieceOffsets, WordPieceOffsets

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
DEV_FILE = DATA_DIR / "squad" / "dev-v1.1.json"
needs_data = pytest.mark.skipif(not DEV_FILE.is_file(), reason=f"{DEV_FILE} not found")
SPECIAL = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]

TEXTS = [
    "Straße in İstanbul… café (cafe\u0301) ＡＢ ﬁne",  # folding changes lengths; NFKC
    "東京タワー is 333 m tall; 北京 and 서울 too.",  # Han split off; kana and hangul not
    "tower\u00a0X, €27 — ok!  \t\n tabs\x1fand\x7fcontrols",  # NBSP splits nothing; Cc split
    "zero\u200bwidth soft\u00adhyphen \u3164 \ufeffbom",  # Cf split; U+3164 folds to nothing
    "Unbelievableness antidisestablishmentarianism xyzzy qwrtp unbelievablez",  # pieces, [UNK]
    "a" * 100 + " " + "a" * 101 + " " + "é" * 50 + " " + "é" * 51,  # the 100-byte limit
    "Ǆemo ΣΑΣ İI ŉ ﬀ ǅ ᾼ",  # special casings
    "emoji 😀👍🏽 (brackets) [x] {y} <z> «quotes» “smart” ‘single’ ¿qué? ¡sí! #hash ##",
    "e\u0301\u0301 \u1e9b\u0323 Å Å",  # combining sequences
    "",
    "   ",
]


def tokenizer_of(tokens, lowercase):
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=SPECIAL + list(dict.fromkeys(t for t in tokens if t not in SPECIAL)),
        lowercase=lowercase, oov_token="[UNK]")


def hand_vocabulary(lowercase):
    """Characters (not x, y, z, q: words with them are unknown), pieces and whole words."""
    characters = sorted({c for text in TEXTS for c in text if c.isprintable() and not c.isspace()}
                        - set("xyzqXYZQ"))
    if lowercase:
        characters = sorted(set(characters) | set("".join(characters).casefold()) - set("xyzq"))
    words = ["straße", "Straße", "tower", "fine", "ok", "un", "##believ", "##able", "##ness",
             "anti", "##dis", "##establish", "##ment", "##arian", "##ism", "a" * 100, "é" * 10,
             "##" + "é" * 10, "##" + "é" * 3]
    return tokenizer_of(words + characters + ["##" + c for c in characters], lowercase)


def same_tokens(tokenizer, texts):
    """Both routes' `(ids, starts, ends)`, checked equal, and keras-hub's ids."""
    python = WordPieceOffsets(tokenizer).tokenize(texts)
    reference = TfWordPieceOffsets(tokenizer).tokenize(texts)
    assert len(python) == len(reference) == len(texts)
    for text, ours, theirs in zip(texts, python, reference):
        for name, a, b in zip(("ids", "starts", "ends"), ours, theirs):
            assert a.dtype == b.dtype == np.int32, (text, name)
            np.testing.assert_array_equal(a, b, err_msg=f"{name} of {text!r}")
    for (ids, _, _), expected in zip(python, tokenizer(texts)):
        assert ids.tolist() == list(expected)
    return python


@pytest.mark.parametrize("lowercase", [True, False])
def test_hand_written_text_gives_tensorflow_texts_ids_and_offsets(lowercase):
    tokenizer = hand_vocabulary(lowercase)
    outputs = same_tokens(tokenizer, TEXTS)
    vocabulary = tokenizer.get_vocabulary()
    spans = [[(vocabulary[i], text[s:e]) for i, s, e in zip(*output)]
             for text, output in zip(TEXTS, outputs)]
    assert spans[5] == [("a" * 100, "a" * 100), ("[UNK]", "a" * 101)] + [
        ("é" * 10, "é" * 10)] + [("##" + "é" * 10, "é" * 10)] * 4 + [("[UNK]", "é" * 51)]
    assert ("[UNK]", "xyzzy") in spans[4] and ("[UNK]", "unbelievablez") in spans[4]
    assert [piece for piece, _ in spans[4][:4]] == (
        ["un", "##believ", "##able", "##ness"] if lowercase else ["U", "##n", "##believ", "##able"])
    assert [text for _, text in spans[2][:3]] == ["tower\u00a0X", ",", "€"]
    assert ("\u3164" in [text for _, text in spans[3]]) != lowercase  # folded to nothing
    assert outputs[-2][0].size == outputs[-1][0].size == 0
    # tensorflow-text (and keras-hub's TensorFlow path) stop at a NUL; keras-hub's Python
    # path, which Grain runs, does not, and neither does `WordPieceOffsets`.
    [(ids, _, _)] = WordPieceOffsets(tokenizer).tokenize(["ok\x00fine"])
    assert ids.tolist() == list(tokenizer(["ok\x00fine"])[0]) and len(ids) == 2
    for text, (ids, starts, ends) in zip(TEXTS, outputs):
        assert np.all(ends > starts) and np.all(starts[1:] >= starts[:-1])
        assert len(ids) == 0 or (starts.min() >= 0 and ends.max() <= len(text))


def squad_vocabulary(texts, lowercase):
    """Frequent words, frequent word endings as `##` pieces, and the frequent characters."""
    words = collections.Counter(
        word for text in texts for word in (text.casefold() if lowercase else text).split())
    characters = collections.Counter(c for word, n in words.items() for c in word * n)
    common = [c for c, n in characters.items() if n >= 3]  # rare characters: [UNK] words
    endings = collections.Counter(word[-3:] for word in words if len(word) > 4)
    return tokenizer_of([w for w, _ in words.most_common(400) if w.isalnum()]
                        + ["##" + e for e, _ in endings.most_common(200)]
                        + common + ["##" + c for c in common], lowercase)


@pytest.fixture(scope="module")
def dev_articles():
    return squad.load_squad(DEV_FILE)


@needs_data
@pytest.mark.parametrize("lowercase", [True, False])
def test_squad_dev_contexts_and_questions_give_tensorflow_texts_ids_and_offsets(
        dev_articles, lowercase):
    paragraphs = [p for article in dev_articles[:8] for p in article["paragraphs"]][:300]
    contexts = [p["context"] for p in paragraphs]
    questions = [qa["question"] for p in paragraphs for qa in p["qas"]][:600]
    tokenizer = squad_vocabulary(contexts, lowercase)
    outputs = same_tokens(tokenizer, contexts + questions)
    ids = np.concatenate([output[0] for output in outputs])
    assert len(contexts) == 300 and ids.size > 30_000
    # Both many pieces a word and unknown words were met.
    assert 0 < np.mean(ids == SPECIAL.index("[UNK]")) < 0.05
    suffix = np.array([token.startswith("##") for token in tokenizer.get_vocabulary()])
    assert np.mean(suffix[ids]) > 0.1


def assert_same_features(first, second):
    for field in dataclasses.fields(first):
        a, b = getattr(first, field.name), getattr(second, field.name)
        if isinstance(a, np.ndarray):
            assert a.dtype == b.dtype, field.name
            np.testing.assert_array_equal(a, b, err_msg=field.name)
        else:
            assert a == b, field.name


def features_on_both_routes(monkeypatch, articles, tokenizer, **kwargs):
    """`featurize` with tensorflow-text, then as where it cannot import."""
    with_tensorflow = span_windows.featurize(articles, tokenizer, **kwargs)
    with monkeypatch.context() as patch:
        patch.setitem(sys.modules, "tensorflow_text", None)  # `import tensorflow_text` fails
        without = span_windows.featurize(articles, tokenizer, **kwargs)
    return with_tensorflow, without


def hand_articles():
    context = ("The Straße café (in İstanbul) opened in 1887; its ﬁrst owner, Zoë Ünal, served "
               "東京-style tea… Today the café seats 40 guests and is closed on Mondays. ") * 3
    questions = [("Who was the first owner?", "Zoë Ünal"), ("When did the café open?", "1887"),
                 ("How many guests does it seat?", "40"), ("When is it closed?", "on Mondays")]
    qas = [{"id": f"h{i}", "question": question,
            "answers": [{"text": answer, "answer_start": context.index(answer)}]}
           for i, (question, answer) in enumerate(questions)]
    return [{"title": "hand", "paragraphs": [{"context": context, "qas": qas},
                                             {"context": "Short one.", "qas": [
                                                 {"id": "s", "question": "Which one?",
                                                  "answers": [{"text": "Short",
                                                               "answer_start": 0}]}]}]}]


@pytest.mark.parametrize("lowercase", [True, False])
@pytest.mark.parametrize("training", [True, False])
def test_featurize_gives_the_same_features_without_tensorflow_text(monkeypatch, lowercase,
                                                                   training):
    articles = hand_articles()
    contexts = [p["context"] for p in articles[0]["paragraphs"]]
    tokenizer = squad_vocabulary(contexts, lowercase)
    first, second = features_on_both_routes(
        monkeypatch, articles, tokenizer, sequence_length=48, doc_stride=16,
        max_query_length=12, training=training)
    assert_same_features(first, second)
    assert len(first) > 5 * 2  # the long context needs several windows a question
    if training:
        assert np.any(first.start_positions > 0)


@needs_data
def test_featurize_a_squad_slice_gives_the_same_features_without_tensorflow_text(
        monkeypatch, dev_articles):
    articles = [{"title": a["title"], "paragraphs": a["paragraphs"][:10]}
                for a in dev_articles[:3]]
    contexts = [p["context"] for a in articles for p in a["paragraphs"]]
    tokenizer = squad_vocabulary(contexts, lowercase=True)
    for training in (True, False):
        first, second = features_on_both_routes(
            monkeypatch, articles, tokenizer, sequence_length=128, doc_stride=32,
            max_query_length=24, training=training)
        assert_same_features(first, second)
        assert len(first) > len(first.example_ids)


def test_unsupported_tokenizer_settings_are_named():
    tokenizer = keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=SPECIAL + ["a"], strip_accents=True, oov_token="[UNK]")
    with pytest.raises(ValueError, match=r"Received: a WordPieceTokenizer with strip_accents=True"):
        WordPieceOffsets(tokenizer)
    no_cls = keras_hub.tokenizers.WordPieceTokenizer(vocabulary=["[PAD]", "[UNK]", "a"],
                                                     oov_token="[UNK]")
    with pytest.raises(ValueError, match=r"has no \[CLS\], \[SEP\] token"):
        WordPieceOffsets(no_cls).special_ids()


# Fine-tuning where TensorFlow cannot import ----------------------------------------------

FINE_TUNE = textwrap.dedent("""
    import json, os, sys
    import numpy as np
    out, articles_file, vocab = sys.argv[1:]
    with open(articles_file) as f:
        articles = json.load(f)["data"]
    from keras_tupe.models import span_windows
    from keras_tupe.finetuning import finetune_squad
    from keras_tupe_base.settings import SquadConfig
    from keras_tupe.models import TupeBackbone, TupeTokenizer
    init = os.path.join(out, "encoder")  # a preset folder
    size = TupeTokenizer(vocab).vocabulary_size()
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size).save_to_preset(str(init))
    result = finetune_squad(SquadConfig(
        init=init, vocab=vocab, offline_split=articles_file, eval_fraction=0.5, seq_len=48,
        doc_stride=16, max_query_length=12, epochs=1, batch_size=4, learning_rate=1e-3,
        out=os.path.join(out, "squad")))
    features = span_windows.featurize(articles, TupeTokenizer(vocab), 48, 16, 12)
    np.savez(os.path.join(out, "features.npz"), **{
        k: v for k, v in vars(features).items() if isinstance(v, np.ndarray)})
    print(json.dumps({"result": result,
                      "tensorflow": [sys.modules.get(m) is not None
                                     for m in ("tensorflow", "tensorflow_text")]}))
""")


def write_fine_tune_articles(path, vocabulary_path):
    """Six articles of two paragraphs each, every answer a name or a number in its context,
    and a vocabulary of their words."""
    names = ["Ada", "Bo", "Cy", "Dee", "Eve", "Finn", "Gus", "Hal", "Ivy", "Jo", "Kai", "Lu"]
    articles = []
    for a in range(6):
        paragraphs = []
        for p in range(2):
            name, year = names[2 * a + p], 1900 + 7 * a + p
            context = (f"{name} built the old mill in {year}. Later the mill was sold, and "
                       f"{name} moved to the coast, where the winters are mild.")
            qas = [{"id": f"{a}-{p}-who", "question": "Who built the old mill?",
                    "answers": [{"text": name, "answer_start": 0}]},
                   {"id": f"{a}-{p}-when", "question": "When was the mill built?",
                    "answers": [{"text": str(year), "answer_start": context.index(str(year))}]}]
            paragraphs.append({"context": context, "qas": qas})
        articles.append({"title": f"mill {a}", "paragraphs": paragraphs})
    path.write_text(json.dumps({"version": "1.1", "data": articles}))
    words = {word for article in articles for p in article["paragraphs"]
             for text in [p["context"]] + [qa["question"] for qa in p["qas"]]
             for word in text.lower().replace("?", " ? ").replace(".", " . ").split()}
    vocabulary_path.write_text("\n".join(SPECIAL + sorted(words)) + "\n")
    return articles


@pytest.mark.jax
def test_fine_tunes_span_qa_under_jax_in_a_process_without_tensorflow(tmp_path):
    """The GPU machine of issue 48 (JAX, no TensorFlow): one epoch of a tiny span-QA
    model on an article split, finite EM/F1, and the features tensorflow-text gives."""
    articles_file, vocabulary = tmp_path / "squad.json", tmp_path / "vocab.txt"
    articles = write_fine_tune_articles(articles_file, vocabulary)
    env = {**os.environ, "KERAS_BACKEND": "jax",
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "no_tensorflow"), str(REPO)])}
    run = subprocess.run([sys.executable, "-c", FINE_TUNE, str(tmp_path), str(articles_file),
                          str(vocabulary)],
                         env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert run.returncode == 0, run.stderr[-3000:]
    report = json.loads(run.stdout.strip().splitlines()[-1])
    result = report["result"]
    assert report["tensorflow"] == [False, False] and result["data_loader"] == "grain"
    assert "NOT the official" in result["data"]
    assert result["eval_questions"] == 12  # half of the six articles, four questions each
    assert 0.0 <= result["exact_match"] <= result["f1"] <= 100.0
    assert np.isfinite(result["exact_match"]) and np.isfinite(result["f1"])
    predictions = json.loads((tmp_path / "squad" / "squad_predictions.json").read_text())
    assert len(predictions) == 12 and all(isinstance(v, str) for v in predictions.values())
    # Its windows are tensorflow-text's, array for array.
    expected = span_windows.featurize(articles, TupeTokenizer(str(vocabulary)), 48, 16, 12)
    saved = np.load(tmp_path / "features.npz")
    assert sorted(saved.files) == sorted(
        k for k, v in vars(expected).items() if isinstance(v, np.ndarray))
    for name in saved.files:
        np.testing.assert_array_equal(saved[name], getattr(expected, name), err_msg=name)
