"""GLUE: the nine tasks, their examples, and `(x, y)` batches for a classifier.

Two sources give the same `GlueExamples`:

- a local folder in the standard `glue_data` TSV layout (what `download_glue_data.py`
  writes; a user-given path): `<TaskDir>/{train,dev,test}.tsv`,
  MNLI with `dev_matched.tsv`/`dev_mismatched.tsv`/`test_matched.tsv`/`test_mismatched.tsv`;
- tensorflow-datasets `glue/<task>` (prepared, or downloaded when online).

Label ids follow tensorflow-datasets' `ClassLabel` order for every task (the `names` of
`tfds.builder("glue/<task>").info.features["label"]`; the tests compare them), so a
model fine-tuned on one source can be evaluated on the other:

| task | 0 | 1 | 2 |
| --- | --- | --- | --- |
| cola | unacceptable | acceptable | |
| sst2 | negative | positive | |
| mrpc | not_equivalent | equivalent | |
| qqp | not_duplicate | duplicate | |
| mnli | entailment | neutral | contradiction |
| qnli, rte | entailment | not_entailment | |
| wnli | not_entailment | entailment | |

WNLI is the odd one: its files hold `0`/`1` with 1 = entailment (tfds keeps those ids and
names them `["not_entailment", "entailment"]`), while QNLI and RTE hold the words and
entailment is 0. STS-B is a regression: `num_classes=1`, a float32 score in [0, 5].
"""

import csv
import dataclasses
import logging
import math
from pathlib import Path

import numpy as np

from keras_tupe.data.network import load_tfds

# TensorFlow is imported only by tensorflow-datasets (`load_tfds`): loading the TSV files
# needs none, so fine-tuning runs where TensorFlow is absent (Grain).

logger = logging.getLogger(__name__)

# The unlabelled test splits get this label (as tfds does).
UNLABELLED = -1

_TEST_SPLITS = ("test", "test_matched", "test_mismatched")
_STSB_RANGE = (0.0, 5.0)
# Reading the tfds examples in batches of this many.
_TFDS_BATCH = 4096


@dataclasses.dataclass(frozen=True)
class GlueTask:
    """What keras_tupe knows about one GLUE task.

    Attributes:
        name: str. Also its tensorflow-datasets config (`glue/<name>`).
        num_classes: int. 1 for the STS-B regression.
        label_names: tuple of str. The class names in label-id order (tfds's); `()` for STS-B.
        text_keys: tuple of str. The tfds features holding the one or two sentences.
        metrics: tuple of str. "accuracy", "f1", "matthews", "pearson", "spearman".
        eval_splits: tuple of str. The labelled evaluation splits.
        directory: str. The task's folder in the `glue_data` layout.
        split_files: dict. Split name -> TSV file name in `directory`.
        tsv_text_columns, tsv_label_column: the header names of the sentence and label columns.
        headerless_columns: tuple of str or None. The columns of train/dev files without a
            header line (CoLA's).
    """

    name: str
    num_classes: int
    label_names: tuple
    text_keys: tuple
    metrics: tuple
    eval_splits: tuple
    directory: str
    split_files: dict
    tsv_text_columns: tuple
    tsv_label_column: str
    headerless_columns: tuple = None

    @property
    def splits(self):
        """The valid split names, in order."""
        return tuple(self.split_files)

    @property
    def is_regression(self):
        return self.num_classes == 1

    @property
    def is_pair(self):
        return len(self.text_keys) == 2


_STANDARD_FILES = {"train": "train.tsv", "validation": "dev.tsv", "test": "test.tsv"}
_MNLI_FILES = {
    "train": "train.tsv",
    "validation_matched": "dev_matched.tsv",
    "validation_mismatched": "dev_mismatched.tsv",
    "test_matched": "test_matched.tsv",
    "test_mismatched": "test_mismatched.tsv",
}
_NLI_BINARY = ("entailment", "not_entailment")

GLUE_TASKS = {
    task.name: task
    for task in [
        GlueTask(
            "cola", 2, ("unacceptable", "acceptable"), ("sentence",), ("matthews",),
            ("validation",), "CoLA", _STANDARD_FILES, ("sentence",), "label",
            # train.tsv and dev.tsv only; test.tsv has the header `index sentence`.
            headerless_columns=("source", "label", "original_label", "sentence"),
        ),
        GlueTask(
            "sst2", 2, ("negative", "positive"), ("sentence",), ("accuracy",),
            ("validation",), "SST-2", _STANDARD_FILES, ("sentence",), "label",
        ),
        GlueTask(
            "mrpc", 2, ("not_equivalent", "equivalent"), ("sentence1", "sentence2"),
            ("accuracy", "f1"), ("validation",), "MRPC", _STANDARD_FILES,
            ("#1 String", "#2 String"), "Quality",
        ),
        GlueTask(
            "stsb", 1, (), ("sentence1", "sentence2"), ("pearson", "spearman"),
            ("validation",), "STS-B", _STANDARD_FILES, ("sentence1", "sentence2"), "score",
        ),
        GlueTask(
            "qqp", 2, ("not_duplicate", "duplicate"), ("question1", "question2"),
            ("accuracy", "f1"), ("validation",), "QQP", _STANDARD_FILES,
            ("question1", "question2"), "is_duplicate",
        ),
        GlueTask(
            "mnli", 3, ("entailment", "neutral", "contradiction"), ("premise", "hypothesis"),
            ("accuracy",), ("validation_matched", "validation_mismatched"), "MNLI",
            _MNLI_FILES, ("sentence1", "sentence2"), "gold_label",
        ),
        GlueTask(
            "qnli", 2, _NLI_BINARY, ("question", "sentence"), ("accuracy",),
            ("validation",), "QNLI", _STANDARD_FILES, ("question", "sentence"), "label",
        ),
        GlueTask(
            "rte", 2, _NLI_BINARY, ("sentence1", "sentence2"), ("accuracy",),
            ("validation",), "RTE", _STANDARD_FILES, ("sentence1", "sentence2"), "label",
        ),
        GlueTask(
            "wnli", 2, ("not_entailment", "entailment"), ("sentence1", "sentence2"),
            ("accuracy",), ("validation",), "WNLI", _STANDARD_FILES,
            ("sentence1", "sentence2"), "label",
        ),
    ]
}

# QQP's train.tsv has a few rows broken by stray newlines inside a question (a row cut
# short, then a fragment of it as a row of its own; nyu-mll/GLUE-baselines#5). tfds drops
# such rows (a missing field or an empty label), so this loader drops them too, for QQP
# only, and logs how many; anywhere else a malformed row is an error.
_SKIPS_MALFORMED_ROWS = frozenset({"qqp"})


@dataclasses.dataclass
class GlueExamples:
    """The examples of one split of one GLUE task, in file order.

    Attributes:
        sentence1: list of str. The first (or only) sentence of each example.
        sentence2: list of str, or None for the single-sentence tasks (CoLA, SST-2).
        labels: np.ndarray (N,). int64 class ids (`GlueTask.label_names`), float32 STS-B
            scores; -1 on the test splits.
        task, split: str.
    """

    sentence1: list
    sentence2: list
    labels: np.ndarray
    task: str
    split: str

    def __post_init__(self):
        sizes = [len(self.sentence1), None if self.sentence2 is None else len(self.sentence2),
                 len(self.labels)]
        if len(set(sizes) - {None}) != 1:
            raise ValueError("`sentence1`, `sentence2` and `labels` must have the same length. "
                             f"Received: {', '.join(map(str, sizes))}")

    def __len__(self):
        return len(self.sentence1)


def get_task(task):
    """The `GlueTask` named `task` (a name or a `GlueTask`); ValueError if unknown."""
    if isinstance(task, GlueTask):
        return task
    if task not in GLUE_TASKS:
        raise ValueError(
            f"Unknown GLUE task {task!r}. Valid names: {', '.join(GLUE_TASKS)}."
        )
    return GLUE_TASKS[task]


def _check_split(task, split):
    if split in task.split_files:
        return
    if task.name == "mnli" and split in ("validation", "test"):
        raise ValueError(
            f"MNLI has no {split!r} split; it has two: {split}_matched and "
            f"{split}_mismatched (in-domain and cross-domain genres). Pass one of them."
        )
    raise ValueError(
        f"Unknown split {split!r} for GLUE task {task.name!r}. Valid splits: "
        f"{', '.join(task.splits)}."
    )


def load_glue(task, split, data_dir=None):
    """Loads one split of one GLUE task as `GlueExamples`.

    From the task's TSV file under `data_dir` (the `glue` folder or its parent), else
    from tensorflow-datasets `glue/<task>` (prepared, or downloaded online); in file
    order either way.

    Args:
        task: str. One of `GLUE_TASKS`: cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli.
        split: str. "train", "validation" or "test"; for MNLI "train",
            "validation_matched", "validation_mismatched", "test_matched",
            "test_mismatched" (tfds's names).
        data_dir: path or None. A folder in the `glue_data` layout, or its parent.

    Returns:
        `GlueExamples`.

    Raises:
        ValueError: unknown task or split; a malformed row or a label that is not a class
            name, not a class id in range, or (STS-B) not a number in [0, 5]; the message
            names the file, the line and the value.
        FileNotFoundError: `data_dir` does not exist, or holds the task's folder but not
            the split's file (the message names the path expected).
        RuntimeError: tensorflow-datasets can neither read nor download the task
            (offline): pass `data_dir`.
    """
    task = get_task(task)
    _check_split(task, split)
    task_dir = None
    candidates = []
    if data_dir is not None:
        data_dir = Path(data_dir)
        if not data_dir.is_dir():
            raise FileNotFoundError(f"GLUE data_dir {data_dir} does not exist.")
        candidates = [data_dir / task.directory, data_dir / "glue" / task.directory]
        task_dir = next((path for path in candidates if path.is_dir()), None)
    if task_dir is not None:
        path = task_dir / task.split_files[split]
        if not path.is_file():
            raise FileNotFoundError(
                f"GLUE task {task.name!r}, split {split!r}: expected the file {path}, which "
                f"does not exist ({task_dir} holds: "
                f"{', '.join(sorted(p.name for p in task_dir.iterdir())) or 'nothing'})."
            )
        return _read_tsv(task, split, path)
    if candidates:
        logger.info("GLUE task %r is not under %s; trying tensorflow-datasets.",
                    task.name, data_dir)
    return _read_tfds(task, split, searched=candidates)


def _read_tsv(task, split, path):
    labelled = split not in _TEST_SPLITS
    skip_malformed = task.name in _SKIPS_MALFORMED_ROWS
    sentences = [[] for _ in task.tsv_text_columns]
    labels = []
    skipped = 0
    # utf-8-sig: MRPC's files start with a byte-order mark. QUOTE_NONE: GLUE sentences
    # hold unbalanced quotes (MRPC dev's first row starts with one), which the default
    # dialect would read as a field spanning several lines.
    with open(path, encoding="utf-8-sig", newline="") as f:
        reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
        header = task.headerless_columns if (labelled and task.headerless_columns) else None
        if header is None:
            header = next(reader, None)
            if header is None:
                raise ValueError(f"{path} is empty: expected a header line.")
        wanted = task.tsv_text_columns + ((task.tsv_label_column,) if labelled else ())
        missing = [name for name in wanted if name not in header]
        if missing:
            raise ValueError(
                f"{path}: the header {header} lacks the column(s) {missing} of GLUE task "
                f"{task.name!r} ({split})."
            )
        text_indices = [header.index(name) for name in task.tsv_text_columns]
        label_index = header.index(task.tsv_label_column) if labelled else None
        for row in reader:
            if not row:  # a blank line, e.g. at the end of the file
                continue
            if skip_malformed and (len(row) != len(header) or labelled and not row[label_index]):
                skipped += 1
                continue
            if len(row) != len(header):
                raise ValueError(
                    f"{path}, line {reader.line_num}: expected {len(header)} tab-separated "
                    f"fields ({', '.join(header)}), found {len(row)}: {row!r}"
                )
            for column, index in zip(sentences, text_indices):
                column.append(row[index])
            if labelled:
                labels.append(_parse_label(task, row[label_index], path, reader.line_num))
    if skipped:
        logger.warning("%s: skipped %d malformed row(s) (as tensorflow-datasets does).",
                       path, skipped)
    return _examples(task, split, sentences,
                     labels if labelled else [UNLABELLED] * len(sentences[0]))


def _examples(task, split, texts, labels):
    return GlueExamples(texts[0], texts[1] if task.is_pair else None,
                        np.asarray(labels, np.float32 if task.is_regression else np.int64),
                        task.name, split)


def _parse_label(task, value, path, line):
    if task.is_regression:
        try:
            score = float(value)
        except ValueError:
            score = math.nan
        if not _STSB_RANGE[0] <= score <= _STSB_RANGE[1]:  # also rejects nan
            raise ValueError(
                f"{path}, line {line}: label {value!r} is not a similarity score in "
                f"[{_STSB_RANGE[0]:g}, {_STSB_RANGE[1]:g}] (GLUE task {task.name!r})."
            )
        return score
    # A class name, or a class id as in CoLA, SST-2, MRPC, QQP and WNLI (as tfds reads them).
    if value in task.label_names:
        return task.label_names.index(value)
    try:
        label = int(value)
    except ValueError:
        label = -1
    if not 0 <= label < task.num_classes:
        raise ValueError(
            f"{path}, line {line}: label {value!r} is neither one of {list(task.label_names)} "
            f"nor a class id in [0, {task.num_classes}) (GLUE task {task.name!r})."
        )
    return label


def _read_tfds(task, split, searched=()):
    name = f"glue/{task.name}"
    where = (f" It is not under data_dir either (looked for "
             f"{' and '.join(str(p) for p in searched)})." if searched else "")
    dataset = load_tfds(
        name, split, f"GLUE task {task.name!r} (tensorflow-datasets {name!r})",
        "Pass data_dir (`--data-dir` in the scripts): a folder in the glue_data TSV layout, "
        "or its parent.",
        f"Could not load GLUE task {task.name!r} (split {split!r}): tensorflow-datasets "
        f"{name!r} is neither prepared nor downloadable (offline?).{where} Pass data_dir= "
        f"(`--data-dir` in the scripts), a folder in the glue_data TSV layout (with "
        f"{task.directory}/{task.split_files[split]}), or prepare {name} on a machine with "
        "internet access.", shuffle_files=False)
    batches = list(dataset.batch(_TFDS_BATCH).as_numpy_iterator())
    columns = {key: np.concatenate([batch[key] for batch in batches]) if batches else np.zeros([0])
               for key in (*task.text_keys, "label", "idx")}
    # tfds shuffles examples when it prepares a dataset; `idx` is the row in the file.
    order = np.argsort(columns["idx"], kind="stable")
    texts = [[text.decode("utf-8") for text in columns[key][order]] for key in task.text_keys]
    return _examples(task, split, texts, columns["label"][order])

