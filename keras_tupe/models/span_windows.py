"""SQuAD-style span windows: BERT's windowing of a question over its context, and the
decoding of an answer from start and end logits (`TupeSpanQAPreprocessor`'s).

`featurize` makes `[CLS] question [SEP] context window [SEP]` features with a sliding window,
every context token keeping its character span (`keras_tupe.models.wordpiece_offsets`, with
or without TensorFlow), so that `postprocess` returns answers as exact substrings of the
context. Reading SQuAD files is `keras_tupe.data.squad`.
"""

import dataclasses
import logging

import numpy as np

from keras_tupe.models.wordpiece_offsets import wordpiece_offsets
from keras_tupe_base.checks import check_int

INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")

logger = logging.getLogger(__name__)


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
              training=True):
    """BERT-style SQuAD features: `[CLS] question [SEP] context window [SEP]`.

    As Google's BERT `run_squad.py`: the question cut to `max_query_length` tokens, the
    context in windows of `sequence_length - len(question) - 3` tokens starting every
    `doc_stride` tokens. For training, a window's label is the tokens holding the first
    and last characters of the question's first answer, or `0, 0` (`[CLS]`) when the
    answer is not wholly inside the window.

    Args:
        articles: SQuAD v1.1 articles (`keras_tupe.data.squad.load_squad`).
        tokenizer: a `keras_hub.tokenizers.WordPieceTokenizer` (a `TupeTokenizer`).
        sequence_length: int. `L`. Defaults to `384`.
        doc_stride: int. Tokens between the starts of two windows. Defaults to `128`.
        max_query_length: int. Defaults to `64`.
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
            "SQuAD: moved %d answer offset(s) to where their text is (the occurrence in the "
            "context nearest to an answer_start that does not point at it), e.g. of %s.",
            len(moved), _some(moved))
    if skipped:
        logger.warning(
            "SQuAD: left out %d question(s) whose first answer is not found in its context, "
            "e.g. %s.", len(skipped), _some(skipped))
    return _stack(rows, sequence_length, pad_id, example_ids, training)


def _some(ids):
    """The first three question ids, for a notice: `q0, q1, q2 and 4 more`."""
    more = f" and {len(ids) - 3} more" if len(ids) > 3 else ""
    return ", ".join(ids[:3]) + more


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
