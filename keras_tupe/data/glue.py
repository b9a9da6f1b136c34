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

from keras_tupe.data.network import require_network

# TensorFlow is imported where it is used (tfds, packing into tensors, tf.data): loading
# the TSV files needs none, so fine-tuning runs where TensorFlow is absent (Grain).

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
        name: str. The task's name, also its tensorflow-datasets config (`glue/<name>`).
        num_classes: int. The number of classes; 1 for the STS-B regression.
        label_names: tuple of str. The class names, in label-id order (tfds's order);
            `()` for STS-B.
        text_keys: tuple of str. The tfds features holding the one or two sentences.
        metrics: tuple of str. The GLUE metrics of the task, by name ("accuracy", "f1",
            "matthews", "pearson", "spearman"); another module computes them.
        eval_splits: tuple of str. The labelled evaluation splits.
        directory: str. The task's folder in the `glue_data` layout.
        split_files: dict. Split name -> TSV file name in `directory`.
        tsv_text_columns: tuple of str. The header names of the sentence columns.
        tsv_label_column: str. The header name of the label column.
        headerless_columns: tuple of str or None. Column names of the train/dev files that
            have no header line (CoLA's); `None` where every file has a header.
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
        labels: np.ndarray, shape (N,). int64 class ids (tfds's order, see
            `GlueTask.label_names`), float32 scores for STS-B; -1 on the test splits.
        task: str. The task's name.
        split: str. The split's name.
    """

    sentence1: list
    sentence2: list
    labels: np.ndarray
    task: str
    split: str

    def __post_init__(self):
        sizes = {len(self.sentence1), len(self.labels)}
        if self.sentence2 is not None:
            sizes.add(len(self.sentence2))
        if len(sizes) != 1:
            raise ValueError(
                "`sentence1`, `sentence2` and `labels` must have the same length. Received: "
                f"{len(self.sentence1)}, "
                f"{None if self.sentence2 is None else len(self.sentence2)}, {len(self.labels)}"
            )

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

    With `data_dir`, reads the task's TSV file there (the `glue_data` layout, see the
    module docstring); `data_dir` may be the `glue` folder itself or its parent. Without
    `data_dir`, or when `data_dir` holds no folder for the task, reads tensorflow-datasets
    `glue/<task>`: already prepared, or downloaded (online only). Either way the examples
    come in file order (tfds's are sorted back by their `idx`).

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
            malformed = len(row) != len(header) or (labelled and not row[label_index])
            if malformed and skip_malformed:
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
    dtype = np.float32 if task.is_regression else np.int64
    labels = np.asarray(labels if labelled else [UNLABELLED] * len(sentences[0]), dtype)
    return GlueExamples(
        sentence1=sentences[0],
        sentence2=sentences[1] if task.is_pair else None,
        labels=labels,
        task=task.name,
        split=split,
    )


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
    import tensorflow_datasets as tfds

    name = f"glue/{task.name}"
    try:  # Already prepared (or mocked by `tfds.testing.mock_data`): no network.
        dataset = tfds.load(name, split=split, download=False, shuffle_files=False)
    except Exception:  # noqa: BLE001 - tfds raises many kinds when data is missing
        require_network(f"GLUE task {task.name!r} (tensorflow-datasets {name!r})",
                        "Pass data_dir (`--data-dir` in the scripts): a folder in the glue_data "
                        "TSV layout, or its parent.")
        logger.warning("tfds dataset %r is not prepared; downloading it.", name)
        try:
            dataset = tfds.load(name, split=split, download=True, shuffle_files=False)
        except Exception as error:  # noqa: BLE001
            where = (f" It is not under data_dir either (looked for "
                     f"{' and '.join(str(p) for p in searched)})." if searched else "")
            raise RuntimeError(
                f"Could not load GLUE task {task.name!r} (split {split!r}): tensorflow-datasets "
                f"{name!r} is neither prepared nor downloadable (offline?).{where} Pass "
                f"data_dir= (`--data-dir` in the scripts), a folder in the glue_data TSV layout "
                f"(with {task.directory}/{task.split_files[split]}), or prepare {name} on a "
                f"machine with internet access. Cause: {type(error).__name__}: {error}"
            ) from error
    columns = {key: [] for key in (*task.text_keys, "label", "idx")}
    for batch in dataset.batch(_TFDS_BATCH).as_numpy_iterator():
        for key, values in columns.items():
            values.append(batch[key])
    columns = {
        key: np.concatenate(values) if values else np.zeros([0]) for key, values in columns.items()
    }
    # tfds shuffles examples when it prepares a dataset; `idx` is the row in the file.
    order = np.argsort(columns["idx"], kind="stable")
    texts = [[text.decode("utf-8") for text in columns[key][order]] for key in task.text_keys]
    dtype = np.float32 if task.is_regression else np.int64
    return GlueExamples(
        sentence1=texts[0],
        sentence2=texts[1] if task.is_pair else None,
        labels=columns["label"][order].astype(dtype),
        task=task.name,
        split=split,
    )


def pack_inputs(tokenizer, sequence_length, first, second=None):
    """Tokenizes and packs raw sentences (or pairs) into a classifier's inputs.

    `[CLS] first [SEP]`, or `[CLS] first [SEP] second [SEP]` for pairs, with
    `keras_tupe.data.packing.pack_segments` (keras-hub's `MultiSegmentPacker` packing,
    round-robin truncation: when the pair is too long, the two segments lose tokens
    alternately from their ends, the longer first), padded with [PAD] to
    `sequence_length`. `glue_dataset`, evaluation and the exported preprocessor all pack
    with `pack_segments`, so they pack identically.

    Args:
        tokenizer: a keras-hub WordPiece tokenizer with ragged outputs (no
            `sequence_length`), e.g. `keras_tupe.data.load_tokenizer(...)`; its
            vocabulary must hold [CLS], [SEP] and [PAD].
        sequence_length: int. The packed length L (>= 8).
        first: strings: a list, a 1-D `tf.string` tensor, or one string.
        second: the second sentences, like `first`, or None for single sentences.

    Returns:
        A dict of int32 tensors of shape (B, L) ((L,) for one string):
        `token_ids`; `padding_mask`, 1 on real tokens (specials included), 0 on
        padding; `segment_ids`, 0 on [CLS], the first segment and its [SEP], 1 on the
        second segment and its [SEP], 0 on padding.
    """
    import tensorflow as tf

    from keras_tupe.data.packing import pack_segments, ragged_ids, special_ids

    _check_positive_int("sequence_length", sequence_length, minimum=8)
    if getattr(tokenizer, "sequence_length", None) is not None:
        raise ValueError(
            "pack_inputs needs a tokenizer with ragged outputs (sequence_length=None): the "
            "packer pads. Received a tokenizer with "
            f"sequence_length={tokenizer.sequence_length}."
        )
    cls_id, sep_id, pad_id = special_ids(tokenizer)
    texts = [tf.convert_to_tensor(first, tf.string)]
    if second is not None:
        texts.append(tf.convert_to_tensor(second, tf.string))
    unbatched = texts[0].shape.rank == 0
    if unbatched:
        texts = [text[tf.newaxis] for text in texts]
    segments = [ragged_ids(tokenizer(text)) for text in texts]  # (B, None) each
    outputs = pack_segments(segments, sequence_length, cls_id, sep_id, pad_id)  # (B, L) each
    if unbatched:
        return {key: value[0] for key, value in outputs.items()}
    return outputs


def longest_packed_length(tokenizer, examples, batch_size=1024):
    """The packed length of the longest example: its tokens plus [CLS] and the [SEP]s.

    `pack_inputs` at any `sequence_length` >= this value truncates nothing; padding the
    split only that far (see `FinetuneConfig.pad_to_longest`) gives a masked encoder the
    same outputs on every real token, with less work on [PAD].

    Args:
        tokenizer: the ragged keras-hub WordPiece tokenizer that `pack_inputs` gets.
        examples: `GlueExamples` (from `load_glue`), at least one.
        batch_size: int >= 1. Sentences tokenized at a time.

    Returns:
        int: `len(first) + 2`, or `len(first) + len(second) + 3` for pairs, maximized over
        the examples.
    """
    import tensorflow as tf

    from keras_tupe.data.packing import ragged_ids

    _check_positive_int("batch_size", batch_size, minimum=1)
    if not len(examples):
        raise ValueError(f"No examples in {examples.task!r} {examples.split!r}: nothing to measure.")
    columns = [c for c in (examples.sentence1, examples.sentence2) if c is not None]
    longest = 0
    for start in range(0, len(examples), batch_size):
        lengths = sum(
            ragged_ids(tokenizer(tf.constant(column[start:start + batch_size], tf.string)))
            .row_lengths().numpy()
            for column in columns
        )
        longest = max(longest, int(np.max(lengths)) + len(columns) + 1)
    return longest


def _check_positive_int(name, value, minimum):
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"`{name}` must be an int >= {minimum}. Received: {name}={value!r}")


# Sentences tokenized and packed at a time by `glue_dataset` (its first pass).
PACK_CHUNK = 256


def glue_dataset(task, split, tokenizer, sequence_length, batch_size, data_dir=None,
                 shuffle=False, seed=0, examples=None, pad_multiple=None, fill_last_batch=False):
    """`(x, y)` batches of one GLUE split, ready for a keras_tupe classifier.

    Args:
        task: str. A GLUE task name (see `GLUE_TASKS`).
        split: str. A split of the task (see `load_glue`).
        tokenizer: a keras-hub WordPiece tokenizer with ragged outputs
            (`keras_tupe.data.load_tokenizer`).
        sequence_length: int >= 8. The packed length L.
        batch_size: int >= 1. The last batch is smaller when the split does not divide
            evenly (never dropped: evaluation must see every example).
        data_dir: path or None. Passed to `load_glue`.
        shuffle: bool. Shuffle the examples (all of them, seeded, reshuffled each epoch);
            for training. Defaults to `False` (file order).
        seed: int. The shuffle seed. Defaults to 0.
        examples: `GlueExamples` or None. Already-loaded examples of this task and split,
            used instead of calling `load_glue`.
        pad_multiple: int >= 1 or None. Pad each batch only to its longest packed example,
            rounded up to a multiple of this, at most `sequence_length` (the batches stay
            the same examples in the same order; a masked encoder gives the same outputs on
            the real tokens, with less work on [PAD]; at most `sequence_length /
            pad_multiple` shapes to compile). None (default): every batch is
            `sequence_length` long.
        fill_last_batch: bool. Complete the last, smaller batch to `batch_size` rows
            with copies of its first rows, and add a `sample_weight`: `batch_size / n`
            on its `n` real rows, 0 on the copies (1 everywhere in a full batch). A
            Keras loss reduced over the batch size then is the mean over the real rows,
            weighted metrics count only them, and every batch has one batch size: one
            compiled step instead of two. For prediction, keep the first
            `len(examples)` outputs. Defaults to `False`.

    Returns:
        A `tf.data.Dataset` of `(x, y)`, or `(x, y, sample_weight)` with
        `fill_last_batch`: `x` is the dict of `pack_inputs` (int32, (B, L),
        L <= `sequence_length` with `pad_multiple`); `y` is int32 class ids (B,), float32
        scores for STS-B, -1 on test splits; `sample_weight` float32 (B,).

    Every example is tokenized and packed once, in the first pass: the packed examples
    are cached in memory (12 bytes a token), then shuffled and batched each epoch, in
    the order a shuffle of the sentences would give.
    """
    import tensorflow as tf

    task = get_task(task)
    _check_split(task, split)
    _check_positive_int("sequence_length", sequence_length, minimum=8)
    _check_positive_int("batch_size", batch_size, minimum=1)
    if pad_multiple is not None:
        _check_positive_int("pad_multiple", pad_multiple, minimum=1)
    if examples is None:
        examples = load_glue(task.name, split, data_dir=data_dir)
    elif (examples.task, examples.split) != (task.name, split):
        raise ValueError(
            f"`examples` are of task {examples.task!r}, split {examples.split!r}; expected "
            f"task {task.name!r}, split {split!r}."
        )
    if (examples.sentence2 is not None) != task.is_pair:
        raise ValueError(
            f"GLUE task {task.name!r} has {len(task.text_keys)} sentence(s) an example; "
            f"`examples.sentence2` is {'set' if examples.sentence2 is not None else 'None'}."
        )
    label_dtype = tf.float32 if task.is_regression else tf.int32
    texts = tuple(
        tf.constant(column, tf.string, shape=[len(examples)])
        for column in (examples.sentence1, examples.sentence2) if column is not None
    )
    labels = tf.constant(np.asarray(examples.labels), label_dtype, shape=[len(examples)])

    def pack(batch_texts, batch_labels):
        return pack_inputs(tokenizer, sequence_length, *batch_texts), batch_labels

    dataset = (tf.data.Dataset.from_tensor_slices((texts, labels))
               .batch(PACK_CHUNK)
               .map(pack, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
               .unbatch()
               .apply(tf.data.experimental.assert_cardinality(len(examples)))  # for Keras
               .cache())
    if shuffle:
        dataset = dataset.shuffle(
            max(len(examples), 1), seed=seed, reshuffle_each_iteration=True
        )
    dataset = dataset.batch(batch_size, drop_remainder=False)

    def finish(x, batch_labels):
        if pad_multiple is not None:
            longest = tf.reduce_max(tf.reduce_sum(x["padding_mask"], axis=1))
            length = tf.minimum(sequence_length, -(-longest // pad_multiple) * pad_multiple)
            x = {name: value[:, :length] for name, value in x.items()}
        if not fill_last_batch:
            return x, batch_labels
        n = tf.shape(batch_labels)[0]
        rows = tf.range(batch_size) % n  # the real rows, then copies of the first ones
        weight = tf.cast(batch_size, tf.float32) / tf.cast(n, tf.float32)
        sample_weight = tf.where(tf.range(batch_size) < n, weight, 0.0)
        x = {name: tf.gather(value, rows) for name, value in x.items()}
        return x, tf.gather(batch_labels, rows), sample_weight

    dataset = dataset.map(finish, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return dataset.prefetch(tf.data.AUTOTUNE)
