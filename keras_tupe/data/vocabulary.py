"""WordPiece vocabularies: training, loading, fingerprinting."""

import contextlib
import os
import time
from pathlib import Path

import keras_hub
import tensorflow as tf

from keras_tupe.data.corpus import _parts, line_batches, line_dataset
from keras_tupe.data.masking import SPECIAL_TOKENS  # ids 0..4; the MLM pipelines rely on them
from keras_tupe_base.checks import check_int
from keras_tupe_base.files import check_unique_tokens, file_sha256, vocabulary_tokens
from keras_tupe_base.progress import Heartbeat


# Unicode space separators (no-break space, thin space, ideographic space, ...). keras-hub's
# pretokenizer does not split on them but its NFKC normalization turns them into " " after
# splitting, so "a\xa0b" was one word "a b" and the vocabulary learned the tokens " " and
# "## " (which the tokenizer can never use, and which keras-hub warns about on export).
_SPACE_SEPARATORS = r"\p{Z}"


def _plain_spaces(lines, lowercase=True):
    """Space separators as " "; with `lowercase`, NFKC-normalized first.

    Lowercasing normalizes after the split into words, so a spacing accent inside a
    word (´ in "i´j", ¨, ¸, ‾: NFKC makes each a space and a combining mark) became one
    word holding a space, and the tokens " " and "## " again; normalizing first splits it.
    """
    if lowercase:
        import tensorflow_text as tf_text

        lines = tf_text.normalize_utf8(lines, "NFKC")
    return tf.strings.regex_replace(lines, _SPACE_SEPARATORS, " ")


class _Progress:
    """Prints lines and MB read, MB/s and (when the size is known) the time left, every `every` s.

    Fed by the corpus reader (`line_batches(progress=...)`) as it reads, so a corpus on
    one enormous line shows its bytes going by too. The share done is the larger of
    the lines read of `max_lines` and the bytes read of the files' size.
    """

    def __init__(self, max_lines=None, total_bytes=None, every=5.0, heartbeat=None,
                 print_fn=None):
        self.max_lines, self.total_bytes = max_lines, total_bytes
        self.every, self.heartbeat = every, heartbeat
        self.print_fn = print_fn or (lambda line: print(line, flush=True))
        self.lines = self.bytes = 0
        self.start = self.last = time.perf_counter()

    def __call__(self, lines, num_bytes):
        self.lines += int(lines)
        self.bytes += int(num_bytes)
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            self.print_fn(self.line(now - self.start))
        if self.heartbeat is not None:
            self.heartbeat.touch()  # still reading: the heartbeat is for the learning after

    def line(self, elapsed):
        """`vocabulary: 1,234 lines, 5.6 MB read (12%), 1.2 MB/s, about 40s left`."""
        shares = [self.lines / self.max_lines if self.max_lines else 0,
                  self.bytes / self.total_bytes if self.total_bytes else 0]
        done = min(max(shares), 1.0)
        rate = self.bytes / 1e6 / elapsed if elapsed > 0 else 0.0
        left = (f" ({100 * done:.0f}%), about {elapsed * (1 - done) / done:.0f}s left"
                if done > 0 else "")
        return (f"  vocabulary: {self.lines:,} lines, {self.bytes / 1e6:,.1f} MB read{left}, "
                f"{rate:,.1f} MB/s")


def _corpus_bytes(source):
    """The size of a corpus's files, or None when it has a tfds part (size unknown)."""
    total = 0
    for kind, files in _parts(source):
        if kind != "files":
            return None
        total += sum(os.path.getsize(path) for path, _ in files)
    return total


def train_vocabulary(source, vocabulary_size, output_file, lowercase=True, max_lines=None,
                     verbose=True):
    """Trains a WordPiece vocabulary on a corpus and writes it, one token a line.

    `keras_hub.tokenizers.compute_word_piece_vocabulary` (words seen fewer than 10
    times only contribute their pieces) with `SPECIAL_TOKENS` as ids 0-4. A small
    corpus may give fewer than `vocabulary_size` tokens.

    Args:
        source: a corpus, as for `line_dataset`.
        vocabulary_size: int. The largest number of tokens, special ones included.
        output_file: path of the vocabulary file to create (parents are created).
        lowercase: bool. Lowercase the text first; `load_tokenizer` must be given
            the same value. Defaults to `True`.
        max_lines: int or None. Read at most this many lines of the corpus.
        verbose: bool. Print progress (lines, MB, MB/s, time left) every 5 s while
            reading, then a heartbeat while the learner runs. Defaults to `True`.

    Returns:
        `output_file`, as a string.

    Raises:
        FileExistsError: `output_file` exists (it is never overwritten).
    """
    check_int("vocabulary_size", vocabulary_size, len(SPECIAL_TOKENS) + 1)  # room for a word
    output_file = Path(output_file)
    if output_file.exists():
        raise FileExistsError(
            f"Vocabulary file {output_file} already exists; refusing to overwrite it "
            "(checkpoints are matched to their vocabulary). Choose another path or delete it."
        )
    line_dataset(source, max_lines=max_lines)  # clear errors for missing, empty, non-UTF-8 corpora
    heartbeat = Heartbeat("  vocabulary: learning the word pieces", every=5.0)
    progress = _Progress(max_lines, _corpus_bytes(source), heartbeat=heartbeat) if verbose else None
    # Batches of lines, document boundaries ("") included: they hold no word.
    lines = line_batches(source, max_lines=max_lines, progress=progress).map(
        lambda batch: _plain_spaces(batch, lowercase))
    started = time.perf_counter()
    with heartbeat if verbose else contextlib.nullcontext():
        vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
            lines,
            vocabulary_size,
            lowercase=lowercase,
            reserved_tokens=SPECIAL_TOKENS,
        )
    if verbose:
        print(f"  vocabulary: {len(vocabulary):,} tokens learned in "
              f"{time.perf_counter() - started:.0f}s", flush=True)
    output_file.parent.mkdir(parents=True, exist_ok=True)
    # "x": fails if the file appeared while training.
    with open(output_file, "x", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token in vocabulary))
    return str(output_file)


def check_vocabulary(vocabulary_file):
    """Refuses a vocabulary file the tokenizer cannot use, naming the file and the line.

    A vocabulary is UTF-8 text, one token a line (its line number, from 0, is its id),
    starting with `SPECIAL_TOKENS` in order, each token once. Tokens are compared as
    keras-hub reads them (trailing whitespace stripped). Without this check a repeated
    token fails deep inside tensorflow-text, naming neither the file nor the token.

    Returns:
        The path, as a `Path`.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: it is not UTF-8, lacks the special tokens, or repeats a token.
    """
    vocabulary_file = Path(vocabulary_file)
    if not vocabulary_file.is_file():
        raise FileNotFoundError(f"Vocabulary file {vocabulary_file} does not exist.")
    tokens = vocabulary_tokens(vocabulary_file)
    head = tokens[:len(SPECIAL_TOKENS)]
    if head != SPECIAL_TOKENS:
        missing = [token for token in SPECIAL_TOKENS if token not in tokens]
        what = (f"lacks {', '.join(missing)}" if missing
                else "has them elsewhere or in another order")
        raise ValueError(
            f"Vocabulary file {vocabulary_file} must start with the special tokens "
            f"{SPECIAL_TOKENS} (ids 0-4), in that order; it {what}. Received first lines: "
            f"{head}"
        )
    check_unique_tokens(vocabulary_file, tokens)
    return vocabulary_file


def load_tokenizer(vocabulary_file, lowercase=True, sequence_length=None):
    """A `keras_hub.tokenizers.WordPieceTokenizer` for a vocabulary of `train_vocabulary`.

    Args:
        vocabulary_file: path of the vocabulary, one token a line.
        lowercase: bool. Must match the value the vocabulary was trained with.
            Defaults to `True`.
        sequence_length: int or None. Pad/truncate every output to this length;
            `None` (the default) gives ragged outputs, which `mlm_dataset` needs.

    Raises:
        FileNotFoundError: the file does not exist.
        ValueError: the file is not a usable vocabulary (`check_vocabulary`).
    """
    vocabulary_file = check_vocabulary(vocabulary_file)
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=str(vocabulary_file),
        sequence_length=sequence_length,
        lowercase=lowercase,
        oov_token="[UNK]",
        dtype="int32",
    )


def vocabulary_fingerprint(vocabulary_file):
    """The sha256 hex digest of the vocabulary file's bytes (to match checkpoints)."""
    return file_sha256(vocabulary_file)
