"""Raw text corpora as a stream of lines with document boundaries.

Every corpus layout becomes the same stream: one scalar `tf.string` a paragraph, in
corpus order, with an empty string `""` between two documents (never at the start or
the end, never two in a row). The packer turns each `""` into one [SEP] token.
"""

import itertools
import logging
import os
from pathlib import Path

import tensorflow as tf

from keras_tupe.data.network import require_network

TFDS_PREFIX = "tfds:"

# How the lines of one unit (a file, or one tfds example) mark documents.
_PLAIN = 0     # one paragraph a line, a blank line between documents (enwiki/*.txt)
_WIKITEXT = 1  # ` = Title = ` starts a document; blank lines are layout only
_DOCUMENT = 2  # the whole unit is one document (a tfds example); blank lines dropped

# What a line is, once classified.
_TEXT, _BOUNDARY, _SKIP = 0, 1, 2

# WikiText headings, matched on the stripped line: a title has exactly one "=" on
# each side (` = Homarus gammarus = `), a section two or more (` = = Description = = `).
_WIKITEXT_TITLE = r"= [^=](.*[^=])? ="
_WIKITEXT_HEADING = r"(= ){2,}.*( =){2,}"
_WIKITEXT_HEADING_MARKERS = r"^(= )+|( =)+$"

_LINES_PER_BATCH = 1024
_UNIT_STRIDE = 2**40  # unit ids of the parts of a list source never collide

logger = logging.getLogger(__name__)


def line_dataset(source, max_lines=None, text_feature="text"):
    """The paragraphs of a corpus, with `""` between documents.

    Args:
        source: where the text is:
            - a plain-text file, one paragraph a line and a blank line between
              documents (the layout of the enwiki `train.txt`/`valid.txt`);
            - a WikiText file (name ending in `.tokens`): a line ` = Title = `
              (exactly one "=" on each side) starts a new document and is dropped,
              like the titles of enwiki; section headings ` = = Sub = = ` are kept
              as a text line without their markers (`Sub`), like enwiki keeps its
              section headings; blank lines are layout and are dropped;
            - a directory: its `*.txt` files (not recursive) in sorted order;
            - a list or tuple of the above, concatenated in order;
            - `"tfds:NAME[:SPLIT]"`: a tensorflow-datasets text dataset (split
              defaults to `"train"` and may be a slice, `"train[:1%]"`); each
              example's `text_feature` is one document, its non-blank lines the
              paragraphs. Loaded with `download=True` when not prepared yet.
            A file or a tfds example always ends a document.
        max_lines: int or None. Read at most this many lines of the source (raw
            lines, blank ones included). Defaults to `None` (all).
        text_feature: str. The feature of a tfds example that holds its text.
            Defaults to `"text"`.

    Returns:
        A `tf.data.Dataset` of scalar `tf.string`, stripped of surrounding
        whitespace; `""` marks a document boundary.

    Raises:
        FileNotFoundError: a path does not exist.
        ValueError: the corpus has no non-blank line (within `max_lines`), a file is
            not UTF-8 text (`check_utf8`), or an argument is invalid.
        RuntimeError: a tfds dataset can neither be read nor downloaded.
    """
    for kind, files in _parts(source):
        for path, _ in files if kind == "files" else ():
            check_utf8(path, max_lines)
    batches = line_batches(source, max_lines, text_feature)
    lines = batches.unbatch()
    for _ in lines.take(1):
        return lines
    within = f" within its first {max_lines} lines" if max_lines is not None else ""
    raise ValueError(f"Corpus {_describe(source)} is empty: it has no non-blank line{within}.")


def check_utf8(path, max_lines=None):
    """Refuses a text file that is not UTF-8, naming the line; the policy of every corpus.

    Text in another encoding (Latin-1, Windows-1252) is refused rather than decoded by
    guess: a wrong guess would teach the vocabulary wrong characters, silently. The
    error names the file, line and column of the first invalid byte and how to convert.
    Reads the first `max_lines` lines (all when `None`).
    """
    with open(path, "rb") as f:
        data = f.read() if max_lines is None else b"".join(itertools.islice(f, max_lines))
    try:
        data.decode("utf-8")
    except UnicodeDecodeError as error:
        line = data.count(b"\n", 0, error.start) + 1
        column = error.start - data.rfind(b"\n", 0, error.start)
        raise ValueError(
            f"Corpus file {path} is not UTF-8 text: line {line}, column {column} has the byte "
            f"0x{data[error.start]:02x}. Convert it to UTF-8 first, e.g. `iconv -f latin1 -t "
            f"utf-8 {path} > {path}.utf8` for Latin-1 text."
        ) from None


def line_batches(source, max_lines=None, text_feature="text"):
    """`line_dataset` before its final unbatch: 1-D `tf.string` batches of lines.

    The packer tokenizes these batches directly, which saves tf.data's per-element
    overhead (unbatching and re-batching ~300k enwiki lines costs seconds an epoch).
    Checks the paths but not emptiness. Arguments as for `line_dataset`.
    """
    if max_lines is not None and (isinstance(max_lines, bool) or not isinstance(max_lines, int)
                                  or max_lines < 1):
        raise ValueError(
            f"`max_lines` must be None or an int >= 1. Received: max_lines={max_lines!r}")
    parts = [_part_lines(part, index, text_feature) for index, part in enumerate(_parts(source))]
    raw = parts[0]
    for part in parts[1:]:
        raw = raw.concatenate(part)
    if max_lines is not None:
        raw = _truncate(raw, max_lines)
    raw = raw.map(_classify, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return raw.scan(_initial_state(), _mark_documents)


def _truncate(batches, max_lines):
    """The first `max_lines` lines of a stream of batches; reads no further."""

    def cut(read, batch):
        lines, unit, mode = batch
        keep = tf.minimum(tf.shape(lines, out_type=tf.int64)[0], max_lines - read)
        return read + keep, (read, lines[:keep], unit[:keep], mode[:keep])

    batches = batches.scan(tf.constant(0, tf.int64), cut)
    batches = batches.take_while(lambda read, *_: read < max_lines)
    return batches.map(lambda read, *batch: batch)


def _parts(source):
    """Splits `source` into parts: ("files", [(path, mode), ...]) or ("tfds", spec)."""
    sources = list(source) if isinstance(source, (list, tuple)) else [source]
    if not sources:
        raise ValueError("Corpus source is an empty list: give at least one path.")
    parts = []
    for item in sources:
        if isinstance(item, str) and item.startswith(TFDS_PREFIX):
            parts.append(("tfds", item))
            continue
        if not isinstance(item, (str, os.PathLike)):
            raise ValueError(
                "A corpus source must be a path, a list of paths or 'tfds:NAME[:SPLIT]'. "
                f"Received: {item!r}"
            )
        files = [(str(path), _WIKITEXT if path.name.endswith(".tokens") else _PLAIN)
                 for path in _files(Path(item))]
        if parts and parts[-1][0] == "files":
            parts[-1][1].extend(files)  # consecutive files share one reader
        else:
            parts.append(("files", files))
    return parts


def _files(path):
    if not path.exists():
        raise FileNotFoundError(f"Corpus path {path} does not exist.")
    if not path.is_dir():
        return [path]
    files = sorted(child for child in path.glob("*.txt") if child.is_file())
    if not files:
        raise ValueError(f"Corpus directory {path} is empty: it holds no *.txt file.")
    return files


def _part_lines(part, index, text_feature):
    """Batches of (line, unit, mode) of one part; `unit` changes at each file/example."""
    offset = tf.constant(index * _UNIT_STRIDE, tf.int64)
    if part[0] == "tfds":
        return _tfds_lines(part[1], text_feature, offset)
    paths, modes = zip(*part[1])

    def read(unit, path, mode):
        def label(lines):
            n = tf.shape(lines, out_type=tf.int64)[0]
            return lines, tf.fill([n], offset + unit), tf.fill([n], mode)

        return tf.data.TextLineDataset(path).batch(_LINES_PER_BATCH).map(label)

    units = tf.data.Dataset.from_tensor_slices(
        (tf.range(len(paths), dtype=tf.int64), list(paths), list(modes))
    )
    return units.flat_map(read)


def _tfds_lines(spec, text_feature, offset):
    name, _, split = spec[len(TFDS_PREFIX):].partition(":")
    split = split or "train"
    if not name:
        raise ValueError(f"Expected 'tfds:NAME[:SPLIT]'. Received: {spec!r}")
    examples = _load_tfds(name, split)
    features = examples.element_spec
    if not isinstance(features, dict) or text_feature not in features:
        names = sorted(features) if isinstance(features, dict) else features
        raise ValueError(
            f"tfds dataset {name!r} has no text feature {text_feature!r}; its features: {names}."
        )

    def lines(unit, example):
        # One example is one document, its lines the paragraphs.
        lines = tf.strings.split(example[text_feature], "\n")
        n = tf.shape(lines, out_type=tf.int64)[0]
        return lines, tf.fill([n], offset + unit), tf.fill([n], _DOCUMENT)

    return examples.enumerate().map(lines)  # a batch per example


def _load_tfds(name, split):
    import tensorflow_datasets as tfds

    try:  # Already prepared (or mocked by `tfds.testing.mock_data`): no network.
        return tfds.load(name, split=split, download=False, shuffle_files=False)
    except Exception as error:  # noqa: BLE001 - tfds raises many kinds when data is missing
        if isinstance(error, tfds.core.registered.DatasetNotFoundError):
            raise ValueError(
                f"No tensorflow-datasets dataset named {name!r} (`tfds.list_builders()` "
                "lists them); for a local corpus pass its path instead."
            ) from error
        require_network(f"tensorflow-datasets {name!r}",
                        "Pass a local corpus path instead, e.g. <data folder>/enwiki/train.txt.")
        logger.warning("tfds dataset %r is not prepared; downloading it.", name)
    try:
        return tfds.load(name, split=split, download=True, shuffle_files=False)
    except Exception as error:  # noqa: BLE001
        raise RuntimeError(
            f"Could not load tensorflow-datasets {name!r} (split {split!r}): neither "
            "prepared in the tfds data_dir nor downloadable (offline?). Prepare it on a "
            "machine with internet access (`tfds build`), or pass a local corpus path, e.g. "
            f"<data folder>/enwiki/train.txt. Cause: {type(error).__name__}: {error}"
        ) from error


def _classify(line, unit, mode):
    """(text, kind, unit): what each raw line of a batch is, given its unit's layout."""
    text = tf.strings.strip(line)
    blank = tf.equal(text, "")
    title = tf.strings.regex_full_match(text, _WIKITEXT_TITLE)
    heading = tf.strings.regex_full_match(text, _WIKITEXT_HEADING)
    if_blank = tf.where(tf.equal(mode, _PLAIN), _BOUNDARY, _SKIP)
    kind = tf.where(blank, if_blank, _TEXT)
    is_wikitext = tf.equal(mode, _WIKITEXT)
    kind = tf.where(is_wikitext & title, _BOUNDARY, kind)
    text = tf.where(
        is_wikitext & heading, tf.strings.regex_replace(text, _WIKITEXT_HEADING_MARKERS, ""), text
    )
    return text, kind, unit


def _initial_state():
    # (unit of the previous line, a text line was emitted, a boundary is pending)
    return tf.constant(-1, tf.int64), tf.constant(False), tf.constant(False)


def _mark_documents(state, lines):
    """Emits each text line of a batch, preceded by "" if a boundary came since the last one.

    A boundary is a boundary line or a change of unit (file or tfds example). It is
    only emitted before a text line, so there is none at the start or the end of the
    corpus and runs of boundaries (blank lines, file ends) collapse to one. Vectorized
    over a batch of lines; `state` carries the stream across batches.
    """
    previous_unit, seen, pending = state
    text, kind, unit = lines                                           # (n,) each
    is_text = tf.equal(kind, _TEXT)
    units = tf.concat([previous_unit[None], unit], 0)
    event = tf.equal(kind, _BOUNDARY) | tf.not_equal(units[1:], units[:-1])
    # Segment c: the lines after the c-th text line of the batch up to the (c+1)-th.
    segment = tf.cumsum(tf.cast(is_text, tf.int32), exclusive=True)    # (n,)
    num_text = tf.reduce_sum(tf.cast(is_text, tf.int32))
    in_segment = tf.math.unsorted_segment_max(
        tf.cast(event, tf.int32), segment, num_text + 1) > 0          # (num_text + 1,)
    # Events before the first text line of the batch count only after earlier text.
    first = pending | (seen & in_segment[0])
    segment_boundary = tf.concat([first[None], in_segment[1:]], 0)
    emit_boundary = is_text & tf.gather(segment_boundary, segment)
    values = tf.stack([tf.fill(tf.shape(text), ""), text], axis=1)     # (n, 2)
    out = tf.boolean_mask(values, tf.stack([emit_boundary, is_text], axis=1))
    any_text = num_text > 0
    new_state = (
        tf.concat([previous_unit[None], unit], 0)[-1],
        seen | any_text,
        tf.where(any_text, in_segment[-1], first),
    )
    return new_state, out


def _describe(source):
    if isinstance(source, (list, tuple)):
        return "[" + ", ".join(str(item) for item in source) + "]"
    return str(source)
