"""SQuAD v1.1 files for span question answering: `load_squad` reads the nested articles
(json or tensorflow-datasets); `split_articles` makes an unofficial article-level split of
one file. Their windowing and answer decoding is `keras_tupe.models.span_windows`.
"""

import collections
import json
import logging
from pathlib import Path

import numpy as np

from keras_tupe.data.network import load_tfds

SPLITS = {"train": "train-v1.1.json", "validation": "dev-v1.1.json"}
TFDS_NAME = "squad/v1.1"
SPLIT_LABEL = (
    "UNOFFICIAL article-level split of one SQuAD v1.1 file (for small offline experiments); "
    "NOT the official SQuAD train/dev split, so its scores are not comparable to published ones"
)

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
