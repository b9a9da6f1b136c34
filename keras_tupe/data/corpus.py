"""Raw text corpora as a stream of lines with document boundaries.

Every corpus layout becomes the same stream: one scalar `tf.string` a paragraph, in
corpus order, with an empty string `""` between two documents (never at the start or
the end, never two in a row). The packer turns each `""` into one [SEP] token.

Memory is bounded by the batch, not by the corpus or its longest line: files are read
in pieces of at most `_PIECE_BYTES` (a longer line, even a whole corpus on one line,
becomes several stream elements, cut after a space so no word is split: the packer
and the vocabulary see the same words), and a batch holds at most `_LINES_PER_BATCH`
pieces and about `_BATCH_BYTES` of text.
"""

import codecs
import contextlib
import os
from pathlib import Path

import numpy as np

import tensorflow as tf

from keras_tupe.data.network import load_tfds
from keras_tupe_base.checks import check_int
from keras_tupe_base.corpus_files import Stream, corpus_kind

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
_PIECE_BYTES = 1 << 14   # 16 KiB: a longer line is passed on in pieces of about this size
_BATCH_BYTES = 1 << 20   # 1 MiB of text: a batch ends at this size or _LINES_PER_BATCH
_UNIT_STRIDE = 2**40  # unit ids of the parts of a list source never collide
# The (tf, NumPy) dtypes of a file reader's batches: (line, unit, mode, whole, ends).
_COLUMNS = ((tf.string, object), (tf.int64, np.int64), (tf.int32, np.int32), (tf.bool, bool),
            (tf.bool, bool))


def line_dataset(source, max_lines=None, text_feature="text"):
    """The paragraphs of a corpus, with `""` between documents.

    Args:
        source: where the text is (a file or a tfds example always ends a document):
            - a plain-text file, one paragraph a line, a blank line between documents
              (enwiki's `train.txt`);
            - a WikiText file (`*.tokens`): ` = Title = ` starts a document and is
              dropped, headings ` = = Sub = = ` are kept as `Sub`, blank lines dropped;
            - a directory: its `*.txt` files (not recursive), sorted;
            - a pipe opened by `keras_tupe_base.corpus_files.open_stream`, plain text, read
              once (so the dataset can be iterated once);
            - a list or tuple of the above, in order;
            - `"tfds:NAME[:SPLIT]"` (split defaults to `"train"`, may be a slice): each
              example's `text_feature` is a document, its non-blank lines the paragraphs.
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
            not UTF-8 text (`check_utf8`), a path is neither a file nor a folder
            (`corpus_kind`: a pipe must come opened), or an argument is invalid.
        RuntimeError: a tfds dataset can neither be read nor downloaded.
    """
    if max_lines is not None:  # before check_utf8, which counts lines with it
        check_int("max_lines", max_lines, 1)
    parts = _parts(source)
    for kind, files in parts:
        for path, _ in files if kind == "files" else ():
            if not isinstance(path, Stream):  # a stream is checked as it is read
                check_utf8(path, max_lines)
    batches = line_batches(source, max_lines, text_feature)
    lines = batches.unbatch()
    if any(isinstance(path, Stream) for kind, files in parts if kind == "files"
           for path, _ in files):
        return lines  # looking for a first line would take it from the one reading
    for _ in lines.take(1):
        return lines
    within = f" within its first {max_lines} lines" if max_lines is not None else ""
    raise ValueError(f"Corpus {_describe(source)} is empty: it has no non-blank line{within}.")


def check_utf8(path, max_lines=None):
    """Refuses a text file that is not UTF-8, naming the line, column and how to convert.

    Decoding by guess (Latin-1, Windows-1252) would teach the vocabulary wrong characters
    silently. Reads the first `max_lines` lines (all when `None`) a block at a time.
    """
    decoder = codecs.getincrementaldecoder("utf-8")()
    newlines, line_start, read = 0, 0, 0  # so far: "\n" read, where the line began, bytes
    with open(path, "rb") as f:
        while True:
            block = f.read(_BATCH_BYTES)
            final = not block
            if max_lines is not None and block.count(b"\n") >= max_lines - newlines:
                position = -1  # the `max_lines`-th newline: read no further
                for _ in range(max_lines - newlines):
                    position = block.find(b"\n", position + 1)
                block, final = block[:position + 1], True
            # The decoder holds back an incomplete character at a block's end.
            held = decoder.getstate()[0]
            data, offset = held + block, read - len(held)
            try:
                decoder.decode(block, final=final)
            except UnicodeDecodeError as error:
                start = error.start  # in `data`
                line = newlines + data.count(b"\n", 0, start) + 1
                last = data.rfind(b"\n", 0, start)
                column = start - last if last >= 0 else offset + start - line_start + 1
                raise ValueError(
                    f"Corpus file {path} is not UTF-8 text: line {line}, column {column} has "
                    f"the byte 0x{data[start]:02x}. Convert it to UTF-8 first, e.g. `iconv -f "
                    f"latin1 -t utf-8 {path} > {path}.utf8` for Latin-1 text."
                ) from None
            if final:
                return
            newlines += block.count(b"\n")
            last = block.rfind(b"\n")
            if last >= 0:
                line_start = read + last + 1
            read += len(block)


def line_batches(source, max_lines=None, text_feature="text", progress=None):
    """`line_dataset` before its final unbatch: 1-D `tf.string` batches of lines, which the
    packer tokenizes directly (unbatching and re-batching ~300k enwiki lines costs
    seconds an epoch). Checks the paths but not emptiness. Arguments as for
    `line_dataset`, and:

    Args:
        progress: callable or None. Called with `(lines, num_bytes)` as the raw text is
            read (lines counted when they end), e.g. to print a progress figure.
    """
    if max_lines is not None:
        check_int("max_lines", max_lines, 1)
    parts = [_part_lines(part, index, text_feature, max_lines, progress)
             for index, part in enumerate(_parts(source))]
    raw = parts[0]
    for part in parts[1:]:
        raw = raw.concatenate(part)
    if max_lines is not None:
        raw = _truncate(raw, max_lines)
    else:
        raw = raw.map(lambda lines, unit, mode, whole, ends: (lines, unit, mode, whole))
    raw = raw.map(_classify, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    return raw.scan(_initial_state(), _mark_documents)


def _truncate(batches, max_lines):
    """The first `max_lines` lines of a stream of batches (every piece of them); no further."""

    def cut(read, batch):
        lines, unit, mode, whole, ends = batch
        ends = tf.cast(ends, tf.int64)
        # An element is kept when fewer than `max_lines` lines ended before it.
        keep = tf.reduce_sum(tf.cast(read + tf.cumsum(ends, exclusive=True) < max_lines,
                                     tf.int32))
        return (read + tf.reduce_sum(ends[:keep]),
                (read, lines[:keep], unit[:keep], mode[:keep], whole[:keep]))

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
        if isinstance(item, Stream):
            files = [(item, _PLAIN)]
        elif not isinstance(item, (str, os.PathLike)):
            raise ValueError(
                "A corpus source must be a path, a list of paths or 'tfds:NAME[:SPLIT]'. "
                f"Received: {item!r}"
            )
        else:
            files = [(str(path), _WIKITEXT if path.name.endswith(".tokens") else _PLAIN)
                     for path in _files(Path(item))]
        if parts and parts[-1][0] == "files":
            parts[-1][1].extend(files)  # consecutive files share one reader
        else:
            parts.append(("files", files))
    return parts


def _files(path):
    kind = corpus_kind(path, "Corpus path")
    if kind == "stream":  # opened here, it would be read in a thread no signal reaches
        raise ValueError(f"Corpus path {path} is a pipe: pass "
                         f"`keras_tupe_base.corpus_files.open_stream({str(path)!r})` instead, "
                         "which reads it once.")
    if kind == "file":
        return [path]
    files = sorted(child for child in path.glob("*.txt") if child.is_file())
    if not files:
        raise ValueError(f"Corpus directory {path} is empty: it holds no *.txt file.")
    return files


def _part_lines(part, index, text_feature, max_lines=None, progress=None):
    """Batches of (line, unit, mode, whole, ends) of one part.

    `unit` changes at each file or tfds example; `whole` is False for the pieces of a
    line longer than `_PIECE_BYTES`, `ends` True for the element that ends a line.
    """
    offset = index * _UNIT_STRIDE
    if part[0] == "tfds":
        return _tfds_lines(part[1], text_feature, tf.constant(offset, tf.int64), progress)
    paths, modes = zip(*part[1])
    spec = tuple(tf.TensorSpec([None], dtype) for dtype, _ in _COLUMNS)
    return tf.data.Dataset.from_generator(
        lambda: _read_files(paths, modes, offset, max_lines, progress), output_signature=spec)


def _read_files(paths, modes, offset, max_lines=None, progress=None):
    """Yields batches of the files' lines, a long line in pieces; reads `max_lines` at most.

    A Python reader (`readline` with a size limit) rather than `TextLineDataset`, which
    holds a whole line in memory however long it is (a 50 MB line took 4 GB to pack).
    """
    batch, size, lines_read = [], 0, 0

    def flush():
        nonlocal batch, size
        out = tuple(np.array(column, dtype) for column, (_, dtype) in zip(zip(*batch), _COLUMNS))
        if progress is not None:
            progress(int(out[4].sum()), size)
        batch, size = [], 0
        return out

    pieces = ((offset + unit, mode, piece)
              for unit, (path, mode) in enumerate(zip(paths, modes)) for piece in _pieces(path))
    for unit, mode, (text, whole, ends) in pieces:
        batch.append((text, unit, mode, whole, ends))
        size += len(text)
        lines_read += ends
        if len(batch) == _LINES_PER_BATCH or size >= _BATCH_BYTES:
            yield flush()
        if max_lines is not None and lines_read >= max_lines:
            break
    if batch:
        yield flush()


def _pieces(path):
    """(text, whole, ends) for each line of a file (or `Stream`), a line over `_PIECE_BYTES`
    in pieces.

    A piece ends after the last space or tab within `_PIECE_BYTES` (so the pieces hold
    the line's words whole), or, in a run without one, before a UTF-8 character that
    does not fit. `whole`: the element is a complete line; `ends`: it ends its line.
    """
    opened = contextlib.nullcontext(path) if isinstance(path, Stream) else open(path, "rb")
    with opened as f:
        pending = b""
        while True:
            data = f.readline(_PIECE_BYTES)
            if not data:
                if pending:
                    yield pending, False, True
                return
            text = pending + data
            if data.endswith(b"\n") or len(data) < _PIECE_BYTES:  # the line ends here
                yield text.rstrip(b"\n"), not pending, True
                pending = b""
                continue
            cut = max(text.rfind(b" "), text.rfind(b"\t")) + 1
            if cut == 0:  # no space: cut before an incomplete UTF-8 character
                cut = _utf8_boundary(text)
            yield text[:cut], False, False
            pending = text[cut:]


def _utf8_boundary(data):
    """The largest `n <= len(data)` such that `data[:n]` ends with a complete character."""
    start = len(data)
    while start > 0 and data[start - 1] & 0xC0 == 0x80:  # continuation bytes
        start -= 1
    if start == 0 or data[start - 1] < 0xC0:  # ASCII before them (or nothing): all whole
        return len(data)
    lead = data[start - 1]
    needed = 2 if lead < 0xE0 else 3 if lead < 0xF0 else 4
    return len(data) if len(data) - (start - 1) >= needed else start - 1


def _tfds_lines(spec, text_feature, offset, progress=None):
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
        every = tf.fill([n], True)
        return lines, tf.fill([n], offset + unit), tf.fill([n], _DOCUMENT), every, every

    batches = examples.enumerate().map(lines)  # a batch per example
    if progress is None:
        return batches

    def count(lines, *rest):
        size = tf.reduce_sum(tf.strings.length(lines))
        counted = tf.py_function(lambda n, b: progress(int(n), int(b)) or 0,
                                 [tf.size(lines), size], tf.int32)
        with tf.control_dependencies([counted]):
            return (tf.identity(lines), *rest)

    return batches.map(count)


def _load_tfds(name, split):
    return load_tfds(
        name, split, f"tensorflow-datasets {name!r}",
        "Pass a local corpus path instead, e.g. <data folder>/enwiki/train.txt.",
        f"Could not load tensorflow-datasets {name!r} (split {split!r}): neither prepared in "
        "the tfds data_dir nor downloadable (offline?). Prepare it on a machine with internet "
        "access (`tfds build`), or pass a local corpus path, e.g. <data folder>/enwiki/train.txt.",
        shuffle_files=False)


def _classify(line, unit, mode, whole):
    """(text, kind, unit): what each raw line of a batch is, given its unit's layout.

    A piece of a long line is text, or nothing when blank: only a whole line can be a
    document boundary, a title or a heading.
    """
    text = tf.strings.strip(line)
    blank = tf.equal(text, "")
    title = tf.strings.regex_full_match(text, _WIKITEXT_TITLE) & whole
    heading = tf.strings.regex_full_match(text, _WIKITEXT_HEADING) & whole
    if_blank = tf.where(tf.equal(mode, _PLAIN) & whole, _BOUNDARY, _SKIP)
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
