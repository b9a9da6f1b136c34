"""SQuAD v1.1 for span question answering: loading, BERT-style windowing, answer decoding.

`load_squad` reads the nested articles (json or tensorflow-datasets); `featurize` makes
`[CLS] question [SEP] context window [SEP]` features with a sliding window, every
context token keeping its character span (`keras_tupe.data.wordpiece_offsets`, with or
without TensorFlow), so that `postprocess` returns answers as exact substrings of the
context. `split_articles` makes an unofficial article-level split of one file.
"""

import collections
import dataclasses
import json
import logging
import os
from pathlib import Path

import numpy as np

from keras_tupe.data.network import load_tfds
from keras_tupe.data.wordpiece_offsets import wordpiece_offsets
from keras_tupe.layers.utils import check_int

SPLITS = {"train": "train-v1.1.json", "validation": "dev-v1.1.json"}
TFDS_NAME = "squad/v1.1"
SPLIT_LABEL = (
    "UNOFFICIAL article-level split of one SQuAD v1.1 file (for small offline experiments); "
    "NOT the official SQuAD train/dev split, so its scores are not comparable to published ones"
)
INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")

logger = logging.getLogger(__name__)


# Loading ---------------------------------------------------------------------------------


def load_squad(path_or_split, data_dir=None, tfds_data_dir=None):
    """The articles of SQuAD v1.1: the `"data"` list of the official json files.

    Each article is `{"title", "paragraphs": [{"context", "qas": [{"id", "question",
    "answers": [{"text", "answer_start"}]}]}]}`, `answer_start` a character offset into
    `context`.

    Args:
        path_or_split: a SQuAD v1.1 json file, or `"train"` or `"validation"`: read from
            `data_dir` (or its `squad/`) when its file is there, else from
            tensorflow-datasets `"squad/v1.1"` (prepared, or downloaded online; regrouped
            into articles, in tfds's order).
        data_dir: a folder with the SQuAD files, or `None`.
        tfds_data_dir: the tensorflow-datasets data directory, or `None` (its default).

    Returns:
        The list of articles.

    Raises:
        FileNotFoundError: `path_or_split` is neither a split name nor a file.
        ValueError: the file is not SQuAD v1.1 (SQuAD v2.0 included).
        RuntimeError: a split is in neither `data_dir` nor tfds, and cannot be
            downloaded (offline).
    """
    if path_or_split in SPLITS:
        if data_dir is not None:
            for folder in (Path(data_dir), Path(data_dir) / "squad"):
                if (folder / SPLITS[path_or_split]).is_file():
                    return _read_json(folder / SPLITS[path_or_split])
        return _load_tfds(path_or_split, data_dir, tfds_data_dir)
    path = Path(path_or_split)
    if not path.is_file():
        raise FileNotFoundError(
            f"SQuAD file {path} does not exist. Pass a SQuAD v1.1 json file or a split name "
            f"{sorted(SPLITS)} (read from `data_dir` or tensorflow-datasets)."
        )
    return _read_json(path)


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            content = json.load(f)
    except (json.JSONDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path} is not a SQuAD v1.1 json file: {error}") from error
    return _check_format(content, path)


def _check_format(content, path):
    """`content["data"]`, after checking every field a SQuAD v1.1 file must have."""
    def fail(what):
        raise ValueError(f"{path} is not in the SQuAD v1.1 format: {what}.")

    if not isinstance(content, dict) or not isinstance(content.get("data"), list):
        fail('expected a json object with a "data" list of articles')
    version = str(content.get("version", "1.1"))
    if version.lstrip("v") != "1.1":
        fail(f'"version" is {content["version"]!r}, not "1.1" (SQuAD 2.0 is not supported)')
    for a, article in enumerate(content["data"]):
        if not isinstance(article, dict) or not isinstance(article.get("paragraphs"), list):
            fail(f'article {a} has no "paragraphs" list')
        for p, paragraph in enumerate(article["paragraphs"]):
            where = f"article {a} paragraph {p}"
            if not isinstance(paragraph, dict) or not isinstance(paragraph.get("context"), str):
                fail(f'{where} has no "context" string')
            if not isinstance(paragraph.get("qas"), list):
                fail(f'{where} has no "qas" list')
            for qa in paragraph["qas"]:
                if not isinstance(qa, dict) or not all(
                        isinstance(qa.get(key), str) for key in ("id", "question")):
                    fail(f'{where} has a question without "id" and "question" strings')
                if qa.get("is_impossible"):
                    fail(f"question {qa['id']} is unanswerable (SQuAD 2.0 is not supported)")
                if not isinstance(qa.get("answers"), list) or not all(
                        isinstance(x, dict) and isinstance(x.get("text"), str)
                        and isinstance(x.get("answer_start"), int) for x in qa["answers"]):
                    fail(f'question {qa["id"]} has no "answers" list of '
                         '{"text": str, "answer_start": int}')
    return content["data"]


def _load_tfds(split, data_dir, tfds_data_dir):
    local = ("Pass the json file's path (e.g. <data folder>/squad/dev-v1.1.json), or "
             "--offline-split with it.")
    looked = (f"{SPLITS[split]} is not in data_dir={data_dir} (nor its squad/), and "
              if data_dir is not None else "")
    examples = load_tfds(
        TFDS_NAME, split, f"SQuAD v1.1 {split!r} (tensorflow-datasets {TFDS_NAME!r})", local,
        f"Could not load SQuAD v1.1 {split!r}: {looked}tensorflow-datasets {TFDS_NAME!r} is "
        "neither prepared nor downloadable (offline?). Pass the json file's path (e.g. <data "
        "folder>/squad/dev-v1.1.json), or the folder holding it as `data_dir`.",
        data_dir=tfds_data_dir)
    return _articles_from_examples(examples.as_numpy_iterator())


def _articles_from_examples(examples):
    """tfds's flat examples (one a question) back into the nested v1.1 structure."""
    articles = {}  # title -> {context -> paragraph}, in order of first appearance
    for example in examples:
        title = example["title"].decode("utf-8")
        context = example["context"].decode("utf-8")
        paragraphs = articles.setdefault(title, {})
        paragraph = paragraphs.setdefault(context, {"context": context, "qas": []})
        answers = example["answers"]
        paragraph["qas"].append({
            "id": example["id"].decode("utf-8"),
            "question": example["question"].decode("utf-8"),
            "answers": [
                {"text": text.decode("utf-8"), "answer_start": int(start)}
                for text, start in zip(answers["text"], answers["answer_start"])
            ],
        })
    return [{"title": title, "paragraphs": list(paragraphs.values())}
            for title, paragraphs in articles.items()]


class ArticleSplit(collections.namedtuple("ArticleSplit", ["train", "eval"])):
    """`(train_articles, eval_articles)` with a `label` saying it is an unofficial split."""

    def __new__(cls, train, eval, label=SPLIT_LABEL):  # noqa: A002 - the natural name
        split = super().__new__(cls, train, eval)
        split.label = label
        return split


def split_articles(articles, eval_fraction=0.2, seed=0):
    """An UNOFFICIAL, deterministic article-level split of one SQuAD file.

    For small offline experiments on the one SQuAD file at hand: its scores are not
    comparable to published ones. No article is in both parts; which go to evaluation
    depends only on `seed` and the set of articles (ranked by title), not their order,
    so a file and its tfds copy split alike.

    Args:
        articles: the output of `load_squad`.
        eval_fraction: float in (0, 1). The fraction of articles held out,
            `round(eval_fraction * len(articles))`, at least 1 and at most all but one.
            Defaults to `0.2`.
        seed: int. Defaults to `0`.

    Returns:
        An `ArticleSplit`: the tuple `(train_articles, eval_articles)`, each in the input
        order, with `.train`, `.eval` and `.label` (`SPLIT_LABEL`, which says it is
        unofficial). The same warning is logged.
    """
    if isinstance(eval_fraction, bool) or not 0 < eval_fraction < 1:
        raise ValueError(
            f"`eval_fraction` must be in (0, 1). Received: eval_fraction={eval_fraction!r}")
    articles = list(articles)
    if len(articles) < 2:
        raise ValueError(f"Need at least 2 articles to split. Received: {len(articles)} article(s)")
    num_eval = min(max(round(eval_fraction * len(articles)), 1), len(articles) - 1)
    by_title = sorted(range(len(articles)), key=lambda i: _article_key(articles[i]))
    permutation = np.random.default_rng(seed).permutation(len(articles))
    held_out = {by_title[i] for i in permutation[:num_eval]}
    logger.warning("split_articles: %s (%d train / %d eval articles).",
                   SPLIT_LABEL, len(articles) - num_eval, num_eval)
    return ArticleSplit(
        [article for i, article in enumerate(articles) if i not in held_out],
        [article for i, article in enumerate(articles) if i in held_out],
    )


def _article_key(article):
    paragraphs = article.get("paragraphs") or [{}]
    return str(article.get("title", "")), paragraphs[0].get("context", "")


# Features --------------------------------------------------------------------------------


@dataclasses.dataclass
class SquadFeatures:
    """Windowed SQuAD features, as numpy arrays (`N` features of length `L`).

    Attributes:
        token_ids, padding_mask, segment_ids: `(N, L)` int32; `segment_ids` is 1 on the
            context window and the final `[SEP]`.
        start_positions, end_positions: `(N,)` int32, the answer's tokens in the window,
            `0` (`[CLS]`) when it is not wholly inside; `None` unless `training=True`.
        example_index: `(N,)` int32, each feature's question in `example_ids` (qids).
        example_ids: list of the featurized questions' ids.
        token_start_char, token_end_char: `(N, L)` int32, each context token's character
            span in its context, `-1` for every other token.
        token_is_max_context: `(N, L)` bool, whether this window gives the token its
            most context (BERT's `token_is_max_context`).
        window_start: `(N,)` int32, the window's first token in the context's tokens.
    """

    token_ids: np.ndarray
    padding_mask: np.ndarray
    segment_ids: np.ndarray
    start_positions: np.ndarray | None
    end_positions: np.ndarray | None
    example_index: np.ndarray
    example_ids: list
    token_start_char: np.ndarray
    token_end_char: np.ndarray
    token_is_max_context: np.ndarray
    window_start: np.ndarray

    def __len__(self):
        return len(self.token_ids)

    def head(self, num_examples):
        """The features of the first `num_examples` questions (all their windows)."""
        check_int("num_examples", num_examples, 0)
        rows = self.example_index < num_examples
        fields = {field.name: getattr(self, field.name) for field in dataclasses.fields(self)}
        fields = {name: value[rows] if isinstance(value, np.ndarray) else value
                  for name, value in fields.items()}
        fields["example_ids"] = self.example_ids[:num_examples]
        return SquadFeatures(**fields)

    @property
    def qids(self):
        """`(N,)` the question id of each feature."""
        return np.asarray(self.example_ids, dtype=object)[self.example_index]

    @property
    def inputs(self):
        """The model inputs, a dict of `token_ids`, `padding_mask` and `segment_ids`."""
        return {name: getattr(self, name) for name in INPUT_NAMES}


def featurize(articles, tokenizer, sequence_length=384, doc_stride=128, max_query_length=64,
              lowercase=True, training=True):
    """BERT-style SQuAD features: `[CLS] question [SEP] context window [SEP]`.

    As Google's BERT `run_squad.py`: the question cut to `max_query_length` tokens, the
    context in windows of `sequence_length - len(question) - 3` tokens starting every
    `doc_stride` tokens. For training, a window's label is the tokens holding the first
    and last characters of the question's first answer, or `0, 0` (`[CLS]`) when the
    answer is not wholly inside the window.

    Args:
        articles: the output of `load_squad` (or `split_articles`).
        tokenizer: a `keras_hub.tokenizers.WordPieceTokenizer` (a `TupeTokenizer`), or
            a vocabulary file for `load_tokenizer(tokenizer, lowercase)` (needs TensorFlow).
        sequence_length: int. `L`. Defaults to `384`.
        doc_stride: int. Tokens between the starts of two windows. Defaults to `128`.
        max_query_length: int. Defaults to `64`.
        lowercase: bool. As the vocabulary was trained; for a vocabulary file only (a
            tokenizer knows its own). Defaults to `True`.
        training: bool. Computes `start_positions`/`end_positions`, and leaves out (with
            a warning) the questions without an answer found in their context.
            Defaults to `True`.

    Returns:
        A `SquadFeatures`. The token ids are the tokenizer's (`wordpiece_offsets`).
    """
    for name, value in (("sequence_length", sequence_length), ("doc_stride", doc_stride),
                        ("max_query_length", max_query_length)):
        check_int(name, value, 1)
    if sequence_length < max_query_length + 4:
        raise ValueError(
            "`sequence_length` must leave room for [CLS], the question, two [SEP] and a "
            f"context token: at least max_query_length + 4 = {max_query_length + 4}. "
            f"Received: sequence_length={sequence_length}, max_query_length={max_query_length}"
        )
    if isinstance(tokenizer, (str, os.PathLike)):
        # Here, not at the top: data.vocabulary imports TensorFlow (optional); a tokenizer
        # object, the route where TensorFlow is absent, needs none.
        from keras_tupe.data.vocabulary import load_tokenizer

        tokenizer = load_tokenizer(tokenizer, lowercase=lowercase)
    tokenizer = wordpiece_offsets(tokenizer)
    cls_id, sep_id, pad_id = tokenizer.special_ids()
    paragraphs = [paragraph for article in articles for paragraph in article["paragraphs"]]
    contexts = tokenizer.tokenize(paragraph["context"] for paragraph in paragraphs)
    questions = tokenizer.tokenize(
        qa["question"] for paragraph in paragraphs for qa in paragraph["qas"])

    # One per window: (ids, first context position, window length, start chars, end
    # chars, is max context, window start, (start, end) label, example index).
    rows = []
    example_ids, skipped, moved, q = [], [], [], 0
    for paragraph, (context_ids, context_starts, context_ends) in zip(paragraphs, contexts):
        for qa in paragraph["qas"]:
            question_ids = questions[q][0][:max_query_length]
            q += 1
            answer = None
            if training:
                char_start = _answer_start(paragraph["context"], qa)
                if char_start is not None:
                    answer = _answer_tokens(qa["answers"][0]["text"], char_start,
                                            context_starts, context_ends)
                if answer is None:
                    skipped.append(qa["id"])
                    continue
                if char_start != qa["answers"][0]["answer_start"]:
                    moved.append(qa["id"])
            example = len(example_ids)
            example_ids.append(qa["id"])
            window_length = sequence_length - len(question_ids) - 3
            windows = _windows(len(context_ids), window_length, doc_stride)
            offset = len(question_ids) + 2  # position of the first context token
            best_window = _max_context_windows(windows, len(context_ids))
            for w, (start, length) in enumerate(windows):
                label = (0, 0)
                if answer is not None and start <= answer[0] and answer[1] < start + length:
                    label = (answer[0] - start + offset, answer[1] - start + offset)
                rows.append((
                    np.concatenate([[cls_id], question_ids, [sep_id],
                                    context_ids[start:start + length], [sep_id]]),
                    offset, length,
                    context_starts[start:start + length], context_ends[start:start + length],
                    best_window[start:start + length] == w,
                    start, label, example,
                ))
    if moved:  # repaired, but the file's offsets are wrong (shifted?): said, and counted
        logger.warning(
            "featurize: moved %d answer offset(s) to where their text is (the occurrence in "
            "the context nearest to an answer_start that does not point at it; e.g. %s).",
            len(moved), moved[:3])
    if skipped:
        logger.warning(
            "featurize: left out %d question(s) whose first answer is not found in its "
            "context (e.g. %s).", len(skipped), skipped[:3])
    return _stack(rows, sequence_length, pad_id, example_ids, training)


def _answer_start(context, qa):
    """The first answer's character offset in `context`: its `answer_start`, or where its
    offset is misplaced the occurrence of its text nearest to it; None if there is none."""
    if not qa["answers"]:
        return None
    text, char_start = qa["answers"][0]["text"], qa["answers"][0]["answer_start"]
    if context[char_start:char_start + len(text)] == text:
        return char_start
    found = [i for i in range(len(context)) if context.startswith(text, i)] if text else []
    return min(found, key=lambda i: abs(i - char_start)) if found else None


def _answer_tokens(text, char_start, context_starts, context_ends):
    """(first, last) context token of the answer `text` at `char_start`, or None if no
    token overlaps it."""
    char_end = char_start + len(text.rstrip())
    char_start += len(text) - len(text.lstrip())
    # Tokens overlapping [char_start, char_end).
    overlapping = np.flatnonzero((context_ends > char_start) & (context_starts < char_end))
    if len(overlapping) == 0:
        return None
    return int(overlapping[0]), int(overlapping[-1])


def _windows(num_tokens, window_length, doc_stride):
    """`[(start, length)]` of the windows over `num_tokens` context tokens (at least one)."""
    windows, start = [], 0
    while True:
        length = min(num_tokens - start, window_length)
        windows.append((start, length))
        if start + length >= num_tokens:
            return windows
        start += min(length, doc_stride)


def _max_context_windows(windows, num_tokens):
    """For each context token, the window that gives it the most context (BERT's rule).

    A token's score in a window is `min(left context, right context) + 0.01 * window
    length`; ties go to the first window.
    """
    best = np.zeros(num_tokens, np.int64)
    best_score = np.full(num_tokens, -np.inf)
    for w, (start, length) in enumerate(windows):
        position = np.arange(start, start + length)
        score = np.minimum(position - start, start + length - 1 - position) + 0.01 * length
        better = score > best_score[start:start + length]
        best[start:start + length][better] = w
        best_score[start:start + length][better] = score[better]
    return best


def _stack(rows, sequence_length, pad_id, example_ids, training):
    n = len(rows)
    word_ids = np.full((n, sequence_length), pad_id, np.int32)
    mask = np.zeros((n, sequence_length), np.int32)
    type_ids = np.zeros((n, sequence_length), np.int32)
    start_chars = np.full((n, sequence_length), -1, np.int32)
    end_chars = np.full((n, sequence_length), -1, np.int32)
    max_context = np.zeros((n, sequence_length), bool)
    labels = np.zeros((n, 2), np.int32)
    for i, (ids, offset, length, starts, ends, is_max, _, label, _) in enumerate(rows):
        word_ids[i, :len(ids)] = ids
        mask[i, :len(ids)] = 1
        type_ids[i, offset:len(ids)] = 1
        start_chars[i, offset:offset + length] = starts
        end_chars[i, offset:offset + length] = ends
        max_context[i, offset:offset + length] = is_max
        labels[i] = label
    return SquadFeatures(
        token_ids=word_ids,
        padding_mask=mask,
        segment_ids=type_ids,
        start_positions=labels[:, 0].copy() if training else None,
        end_positions=labels[:, 1].copy() if training else None,
        example_index=np.array([row[-1] for row in rows], np.int32),
        example_ids=example_ids,
        token_start_char=start_chars,
        token_end_char=end_chars,
        token_is_max_context=max_context,
        window_start=np.array([row[6] for row in rows], np.int32),
    )


# Answers ---------------------------------------------------------------------------------


def postprocess(features, start_logits, end_logits, articles, n_best=20, max_answer_length=30):
    """The predicted answer of each question: `{qid: text}`.

    BERT's `write_predictions` rule: the `n_best` highest start and end logits of each
    window give the candidate spans, kept when both ends are context tokens, in order,
    at most `max_answer_length` tokens long, and the window gives the start its most
    context. The answer is the kept span of highest `start_logit + end_logit` over the
    question's windows, as the exact substring of the context; `""` when none is kept.

    Args:
        features: the `SquadFeatures` the logits were computed on.
        start_logits, end_logits: `(N, L)` arrays.
        articles: the articles featurized (for the contexts).
        n_best: int. Candidate starts and ends per window. Defaults to `20`.
        max_answer_length: int. In tokens. Defaults to `30`.
    """
    start_logits = np.asarray(start_logits, np.float32)
    end_logits = np.asarray(end_logits, np.float32)
    shape = features.token_ids.shape
    if start_logits.shape != shape or end_logits.shape != shape:
        raise ValueError(
            f"Logits must have the features' shape {shape}. Received: start_logits "
            f"{start_logits.shape}, end_logits {end_logits.shape}")
    contexts = {qa["id"]: paragraph["context"] for article in articles
                for paragraph in article["paragraphs"] for qa in paragraph["qas"]}
    missing = [qid for qid in features.example_ids if qid not in contexts]
    if missing:
        raise ValueError(f"{len(missing)} featurized question(s) are not in `articles`, "
                         f"e.g. {missing[:3]}: pass the articles that were featurized.")
    n_best = min(n_best, shape[1])
    rows = np.arange(shape[0])[:, None, None]
    starts = np.argsort(-start_logits, axis=1, kind="stable")[:, :n_best, None]  # (N, n, 1)
    ends = np.argsort(-end_logits, axis=1, kind="stable")[:, None, :n_best]  # (N, 1, n)
    valid = (
        (features.token_start_char[rows, starts] >= 0)
        & (features.token_end_char[rows, ends] >= 0)
        & features.token_is_max_context[rows, starts]
        & (ends >= starts)
        & (ends - starts + 1 <= max_answer_length)
    )  # (N, n, n)
    scores = np.where(
        valid, start_logits[rows, starts] + end_logits[rows, ends], -np.inf)  # (N, n, n)
    best = scores.reshape(shape[0], -1).argmax(axis=1)  # (N,)
    best_score = scores.reshape(shape[0], -1)[np.arange(shape[0]), best]
    best_start = starts[:, :, 0][np.arange(shape[0]), best // n_best]
    best_end = ends[:, 0, :][np.arange(shape[0]), best % n_best]

    answers = {qid: ("", -np.inf) for qid in features.example_ids}
    for f in range(shape[0]):
        qid = features.example_ids[features.example_index[f]]
        if best_score[f] > answers[qid][1]:
            text = contexts[qid][features.token_start_char[f, best_start[f]]:
                                 features.token_end_char[f, best_end[f]]]
            answers[qid] = (text, best_score[f])
    return {qid: text for qid, (text, _) in answers.items()}

