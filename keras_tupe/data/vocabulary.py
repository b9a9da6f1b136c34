"""WordPiece vocabularies: training, loading, fingerprinting."""

import collections
import contextlib
import os
import time
from pathlib import Path

import keras_hub
import numpy as np
import tensorflow as tf
from tokenizers import Tokenizer, models, pre_tokenizers, trainers

from keras_tupe.data.corpus import _parts, line_batches, line_dataset
from keras_tupe.data.masking import SPECIAL_TOKENS  # ids 0..4; the MLM pipelines rely on them
from keras_tupe_base.checks import check_int
from keras_tupe_base.files import check_unique_tokens, file_sha256, vocabulary_tokens
from keras_tupe_base.progress import Heartbeat

SUFFIX_INDICATOR = "##"  # keras-hub's WordPieceTokenizer default, which `load_tokenizer` keeps
# The learner's settings (`train_vocabulary` says why).
_MIN_PAIR_COUNT = 10
_MAX_ALPHABET = 1000
# keras-hub's tokenizer makes a longer word [UNK] whatever the vocabulary
# (`tf_text.FastWordpieceTokenizer`'s limit), so the learner skips it.
_MAX_WORD_BYTES = 100

# What keras-hub's WordPieceTokenizer splits words on and drops (ASCII whitespace, \p{Cc},
# \p{Cf}), and the Unicode space separators (no-break space, thin space, ideographic space,
# ...), which it does not split on but whose NFKC normalization, after the split, is " ":
# "a\xa0b" was one word "a b", and the vocabulary learned the tokens " " and "## " (which the
# tokenizer can never use, and which keras-hub warns about on export). All become " " before
# case folding, which would delete the format characters (zero-width space, soft hyphen)
# and join the words keras-hub keeps apart.
_SPACE_SEPARATORS = r"[\p{Z}\p{Cc}\p{Cf}]"
# What keras-hub's tokenizer keeps as words of one character: ASCII's printable characters
# but letters, digits and space; Unicode punctuation; CJK ideographs (BERT's ranges).
_PUNCTUATION_AND_CJK = (
    r"[!-/:-@\[-`{-~\p{P}\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{20000}-\x{2A6DF}"
    r"\x{2A700}-\x{2B73F}\x{2B740}-\x{2B81F}\x{2B820}-\x{2CEAF}\x{F900}-\x{FAFF}"
    r"\x{2F800}-\x{2FA1F}]"
)


def _plain_spaces(lines, lowercase=True):
    """Space separators and control characters as " "; with `lowercase`, NFKC-normalized first.

    Lowercasing normalizes after the split into words, so a spacing accent inside a
    word (´ in "i´j", ¨, ¸, ‾: NFKC makes each a space and a combining mark) became one
    word holding a space, and the tokens " " and "## " again; normalizing first splits it.
    """
    if lowercase:
        import tensorflow_text as tf_text

        lines = tf_text.normalize_utf8(lines, "NFKC")
    return tf.strings.regex_replace(lines, _SPACE_SEPARATORS, " ")


def _learner_text(lines, lowercase=True):
    """A batch of lines as the learner reads them: `_plain_spaces`, then, with `lowercase`,
    case-folded by the op keras-hub's tokenizer folds each word with (NFKC_Casefold, not
    `str.lower`: "ß" is "ss", "ς" is "σ"), so the learner sees the words the tokenizer will.
    """
    lines = _plain_spaces(lines, lowercase)
    if lowercase:
        import tensorflow_text as tf_text

        lines = tf_text.case_fold_utf8(lines)
    return lines


def _words(text):
    """The words of a batch of `_learner_text` lines, split as keras-hub's tokenizer splits
    (RE2, as it does): on spaces, each punctuation and CJK character a word. 1-D."""
    spaced = tf.strings.regex_replace(text, _PUNCTUATION_AND_CJK, r" \0 ")
    return tf.strings.split(spaced).flat_values


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


def _count(source, lowercase, max_lines, progress):
    """(words, characters): how often each word (UTF-8 bytes) and each code point occurs
    in the corpus, as the learner reads it. One pass: a pipe can be read only once."""

    def batch_counts(lines):
        text = _learner_text(lines, lowercase)
        words, _, counts = tf.unique_with_counts(_words(text))
        return words, counts, tf.strings.unicode_decode(text, "UTF-8").flat_values

    batches = line_batches(source, max_lines=max_lines, progress=progress).map(batch_counts)
    words, characters = collections.Counter(), np.zeros(0x110000, np.int64)
    for batch_words, counts, code_points in batches.as_numpy_iterator():
        for word, count in zip(batch_words.tolist(), counts.tolist()):
            words[word] += count
        characters += np.bincount(code_points, minlength=characters.size)
    characters[ord(" ")] = 0  # between words, never in one
    return words, characters


def _alphabet(characters, size):
    """The `size` most frequent characters (ties by code point), in code point order."""
    seen = np.flatnonzero(characters)
    return [chr(code_point) for code_point in
            sorted(seen[np.lexsort((seen, -characters[seen]))[:size]])]


def _word_batches(words, alphabet, batch_words=1 << 16):
    """The learner's input: lists of strings that repeat each word as often as it occurs.

    A word longer than `_MAX_WORD_BYTES` or with a character outside `alphabet` is left
    out: the tokenizer makes it [UNK] whatever the vocabulary.
    """
    allowed = frozenset(alphabet)
    batch, size = [], 0
    for word, count in words.items():
        text = word.decode("utf-8")
        if len(word) > _MAX_WORD_BYTES or not allowed.issuperset(text):
            continue
        while count:
            repeats = min(count, batch_words)
            batch.append(" ".join([text] * repeats))
            count -= repeats
            size += repeats
            if size >= batch_words:
                yield batch
                batch, size = [], 0
    if batch:
        yield batch


def train_vocabulary(source, vocabulary_size, output_file, lowercase=True, max_lines=None,
                     verbose=True):
    """Trains a WordPiece vocabulary on a corpus and writes it, one token a line.

    Reads the corpus once, as keras-hub's `WordPieceTokenizer` (made by `load_tokenizer`)
    will see it: with `lowercase`, NFKC and case folding (`_learner_text`), then split
    into words on spaces, control characters, punctuation and CJK characters (`_words`);
    it counts the words. Hugging Face `tokenizers`' `WordPieceTrainer` then learns the
    pieces: from single characters, it merges the most frequent pair of adjacent pieces
    until `vocabulary_size` tokens, but never a pair seen fewer than 10 times, so a small
    corpus may give fewer tokens (tensorflow-text's learner, used before, kept no piece
    seen fewer than 10 times either). `SPECIAL_TOKENS` are ids 0-4, then the alphabet,
    "c" and "##c" for each character (a punctuation mark can end up inside a word: the
    tokenizer splits "…" off, then NFKC makes it "..."), then the pieces in the order
    they were learned.

    The alphabet is the 1,000 most frequent characters (as before), and at most half
    the room left beyond the special tokens, so that pieces fit. A word with another
    character (as before), or longer than 100 bytes, is left out: the tokenizer makes
    it [UNK].
    Fixing the alphabet's ids before learning makes the learner deterministic (left
    to itself, `tokenizers` numbers "##c" in hash order, which breaks ties between
    merges differently from run to run): the same corpus gives the same file.

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
    started = time.perf_counter()
    with heartbeat if verbose else contextlib.nullcontext():
        words, characters = _count(source, lowercase, max_lines, progress)
        alphabet = _alphabet(characters, min(
            _MAX_ALPHABET, (vocabulary_size - len(SPECIAL_TOKENS)) // 2))
        tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]",
                                               continuing_subword_prefix=SUFFIX_INDICATOR))
        tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()  # words joined by " "
        trainer = trainers.WordPieceTrainer(
            vocab_size=vocabulary_size,
            min_frequency=_MIN_PAIR_COUNT,
            # The alphabet as fixed ids, with no other character (limit 0).
            special_tokens=(SPECIAL_TOKENS + alphabet
                            + [SUFFIX_INDICATOR + character for character in alphabet]),
            limit_alphabet=0,
            continuing_subword_prefix=SUFFIX_INDICATOR,
            show_progress=False,  # its progress bars; `verbose` prints ours
        )
        tokenizer.train_from_iterator(_word_batches(words, alphabet), trainer)
    ids = tokenizer.get_vocab(with_added_tokens=True)
    vocabulary = sorted(ids, key=ids.get)
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
        suffix_indicator=SUFFIX_INDICATOR,
        oov_token="[UNK]",
        dtype="int32",
    )


def vocabulary_fingerprint(vocabulary_file):
    """The sha256 hex digest of the vocabulary file's bytes (to match checkpoints)."""
    return file_sha256(vocabulary_file)
