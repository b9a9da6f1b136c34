"""WordPiece vocabularies: training, loading, fingerprinting."""

import contextlib
import hashlib
import time
from pathlib import Path

import keras_hub
import tensorflow as tf

from keras_tupe.data.corpus import line_batches, line_dataset
from keras_tupe.data.masking import SPECIAL_TOKENS  # ids 0..4; the MLM pipelines rely on them
from keras_tupe.progress import Heartbeat


# Unicode space separators (no-break space, thin space, ideographic space, ...). keras-hub's
# pretokenizer does not split on them but its NFKC normalization turns them into " " after
# splitting, so "a\xa0b" was one word "a b" and the vocabulary learned the tokens " " and
# "## " (which the tokenizer can never use, and which keras-hub warns about on export).
_SPACE_SEPARATORS = r"\p{Z}"


def _plain_spaces(lines, lowercase=True):
    """Space separators as " "; with `lowercase`, NFKC-normalized first.

    Lowercasing decomposes characters and strips their accents after the split into
    words, so a spacing accent inside a word (U+00B4 ´ in "i´j", ¨, ¸, ‾: NFKC makes
    each a space and a combining mark) became "i j", one word holding a space, and
    the tokens " " and "## " again (one ´ in 20,000 lines of enwiki was enough).
    Normalizing before the split makes that space split the word. Cased text keeps
    the accent, which holds no space.
    """
    if lowercase:
        import tensorflow_text as tf_text

        lines = tf_text.normalize_utf8(lines, "NFKC")
    return tf.strings.regex_replace(lines, _SPACE_SEPARATORS, " ")


class _Progress:
    """Prints lines read, lines/s and (when the total is known) an ETA, every `every` s."""

    def __init__(self, total=None, every=5.0, heartbeat=None):
        self.total, self.every, self.heartbeat = total, every, heartbeat
        self.lines, self.start = 0, time.perf_counter()
        self.last = self.start

    def __call__(self, count):
        self.lines += int(count)
        now = time.perf_counter()
        if now - self.last >= self.every:
            self.last = now
            rate = self.lines / (now - self.start)
            eta = (f", about {max(self.total - self.lines, 0) / rate:.0f}s left"
                   if self.total and rate else "")
            of = f" of at most {self.total:,}" if self.total else ""
            print(f"  vocabulary: {self.lines:,} lines{of} read, {rate:,.0f} lines/s{eta}",
                  flush=True)
        if self.heartbeat is not None:
            self.heartbeat.touch()  # still reading: the heartbeat is for the learning after
        return 0

    def watch(self, lines):
        """`lines` (a batch) unchanged, counted when tf.data reads it."""
        counted = tf.py_function(self, [tf.size(lines)], tf.int32)
        with tf.control_dependencies([counted]):
            return tf.identity(lines)


def train_vocabulary(source, vocabulary_size, output_file, lowercase=True, max_lines=None,
                     verbose=True):
    """Trains a WordPiece vocabulary on a corpus and writes it, one token a line.

    Uses `keras_hub.tokenizers.compute_word_piece_vocabulary` (tf-text's
    WordPiece learner: words seen fewer than 10 times only contribute their
    pieces) with `reserved_tokens=SPECIAL_TOKENS`, so [PAD]=0, [CLS]=1, [SEP]=2,
    [UNK]=3, [MASK]=4. A small corpus may give fewer than `vocabulary_size` tokens.

    Args:
        source: a corpus, as for `line_dataset`.
        vocabulary_size: int. The largest number of tokens, special ones included.
        output_file: path of the vocabulary file to create (parents are created).
        lowercase: bool. Lowercase the text first; `load_tokenizer` must be given
            the same value. Defaults to `True`.
        max_lines: int or None. Read at most this many lines of the corpus.
        verbose: bool. Print progress (lines read, lines/s, ETA) every 5 seconds, then
            a heartbeat line every 5 seconds while the learner runs (it reports
            nothing itself: about a minute on a large corpus). Defaults to `True`.

    Returns:
        `output_file`, as a string.

    Raises:
        FileExistsError: `output_file` exists (it is never overwritten).
    """
    if isinstance(vocabulary_size, bool) or not isinstance(vocabulary_size, int) or (
            vocabulary_size <= len(SPECIAL_TOKENS)):
        raise ValueError(
            f"`vocabulary_size` must be an int > {len(SPECIAL_TOKENS)} (the special tokens). "
            f"Received: vocabulary_size={vocabulary_size!r}"
        )
    output_file = Path(output_file)
    if output_file.exists():
        raise FileExistsError(
            f"Vocabulary file {output_file} already exists; refusing to overwrite it "
            "(checkpoints are matched to their vocabulary). Choose another path or delete it."
        )
    line_dataset(source, max_lines=max_lines)  # clear errors for missing, empty, non-UTF-8 corpora
    # Batches of lines, document boundaries ("") included: they hold no word.
    lines = line_batches(source, max_lines=max_lines).map(
        lambda batch: _plain_spaces(batch, lowercase))
    heartbeat = Heartbeat("  vocabulary: learning the word pieces", every=5.0)
    if verbose:
        lines = lines.map(_Progress(max_lines, heartbeat=heartbeat).watch)
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
        ValueError: the file does not start with `SPECIAL_TOKENS`, in that order.
    """
    vocabulary_file = Path(vocabulary_file)
    if not vocabulary_file.is_file():
        raise FileNotFoundError(f"Vocabulary file {vocabulary_file} does not exist.")
    with open(vocabulary_file, encoding="utf-8") as f:
        head = [f.readline().rstrip("\n") for _ in SPECIAL_TOKENS]
    if head != SPECIAL_TOKENS:
        raise ValueError(
            f"Vocabulary file {vocabulary_file} must start with the special tokens "
            f"{SPECIAL_TOKENS} (ids 0-4), in that order. Received first lines: {head}"
        )
    return keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=str(vocabulary_file),
        sequence_length=sequence_length,
        lowercase=lowercase,
        oov_token="[UNK]",
        dtype="int32",
    )


def vocabulary_fingerprint(vocabulary_file):
    """The sha256 hex digest of the vocabulary file's bytes (to match checkpoints)."""
    with open(vocabulary_file, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()
