"""WordPiece token ids with the character span of each token, with or without TensorFlow.

SQuAD reads answers back as substrings of the context; keras-hub's `WordPieceTokenizer`
gives ids only. `WordPieceOffsets` redoes its pure-Python path keeping offsets;
`TfWordPieceOffsets` gives the same on tensorflow-text's ops (SQuAD v1.1 dev: 1.3 s
against 1.8 s). `wordpiece_offsets(tokenizer)` picks tensorflow-text where it imports.
"""

import numpy as np
import regex
# keras-hub's own building blocks of its pure-Python tokenizer path (keras-hub is
# pinned), so that the words, their folding and the 100-byte limit are the tokenizer's
# by construction; keras-hub exposes no public route to them.
from keras_hub.src.tokenizers import word_piece_tokenizer as patterns
from keras_hub.src.tokenizers.word_piece_tokenizer import MAX_BYTES_PER_WORD
from keras_hub.src.tokenizers.word_piece_tokenizer import PY_CJK_REGEX
from keras_hub.src.tokenizers.word_piece_tokenizer import PY_PUNCTUATION_REGEX
from keras_hub.src.tokenizers.word_piece_tokenizer import PY_WHITESPACE_REGEX
from keras_hub.src.utils.tensor_utils import casefold_utf8

from keras_tupe.models.tupe_tokenizer import special_ids


def wordpiece_offsets(tokenizer):
    """`TfWordPieceOffsets(tokenizer)` where tensorflow-text imports, else `WordPieceOffsets`."""
    try:
        import tensorflow_text  # noqa: F401
    except ImportError:
        return WordPieceOffsets(tokenizer)
    return TfWordPieceOffsets(tokenizer)


class WordPieceOffsets:
    """A keras-hub `WordPieceTokenizer`'s ids, with each token's character span in the text.

    The tokenizer's steps (BERT's basic tokenizer, then WordPiece), each keeping offsets:

    1. Split on whitespace, control and format characters, punctuation and (with
       `split_on_cjk`) CJK characters; punctuation and CJK characters are kept as words
       (keras-hub's `PY_*` patterns, its `pretokenize_python`).
    2. With `lowercase`, fold each word with Unicode NFKC_Casefold (keras-hub's
       `casefold_utf8`, equal to tensorflow-text's `case_fold_utf8`).
    3. Greedy longest-match-first WordPiece on the folded word: the longest vocabulary
       entry that prefixes the rest of the word (`suffix_indicator` + it after the
       first piece), again until the word is used up. A word with no such split, or
       longer than 100 UTF-8 bytes once folded (tensorflow-text's
       `FastWordpieceTokenizer` limit), is one `oov_token`.

    Offsets are Python `str` (code point) indices into the original text, end
    exclusive. Folding can change a word's length (`"ß"` → `"ss"`, `"…"` → `"..."`):
    the pieces of such a (rare) word are mapped back through the folding of each of
    its characters (both pieces of `"ss"` span `"ß"`), or, where folding composes
    characters (`"e"` + a combining accent → `"é"`), proportionally, the first piece
    starting at the word's start and the last ending at its end. An unknown word is
    one `oov_token` spanning the word; a word that folds to nothing has no token.

    Args:
        tokenizer: a `keras_hub.tokenizers.WordPieceTokenizer` (a `TupeTokenizer`)
            splitting raw text (`split=True`), without accent stripping and without
            special tokens in strings.

    Example:
    >>> tokenizer = WordPieceOffsets(TupeTokenizer("vocab.txt"))
    >>> [(ids, starts, ends)] = tokenizer.tokenize(["Fine films."])
    """

    def __init__(self, tokenizer):
        unsupported = [setting for setting, used in (
            ("strip_accents=True", tokenizer.strip_accents),
            ("special_tokens_in_strings=True", tokenizer.special_tokens_in_strings),
            ("split=False", not tokenizer.split)) if used]
        if unsupported:
            raise ValueError(
                "Character offsets are kept for a WordPiece tokenizer that splits raw text, "
                "without accent stripping or special tokens in strings (a TupeTokenizer). "
                f"Received: a {type(tokenizer).__name__} with {', '.join(unsupported)}")
        self.tokenizer = tokenizer
        self.lowercase = tokenizer.lowercase
        self.suffix_indicator = tokenizer.suffix_indicator
        vocabulary = tokenizer.get_vocabulary()
        # As keras-hub's `set_vocabulary`: a repeated token keeps its last id.
        self._token_ids = {token: i for i, token in enumerate(vocabulary)}
        self._oov_id = self._token_ids[tokenizer.oov_token]
        keep = [PY_PUNCTUATION_REGEX] + ([PY_CJK_REGEX] if tokenizer.split_on_cjk else [])
        # Every delimiter is one character, kept as a word when it is punctuation or CJK,
        # so the words are the kept delimiters and the runs of other characters.
        other = _character_class("|".join([PY_WHITESPACE_REGEX] + keep), negate=True)
        self._words = regex.compile(f"{'|'.join(keep)}|{other}+", regex.V1)
        self._pieces_of = {}  # folded word pieces, per word: most words recur

    def tokenize(self, texts):
        """`[(ids, start_chars, end_chars)]`, three int32 arrays for each text of `texts`."""
        outputs = []
        for text in texts:
            ids, starts, ends, word_starts, counts = [], [], [], [], []
            for match in self._words.finditer(text):
                word = match.group()
                pieces = self._pieces_of.get(word)
                if pieces is None:
                    pieces = self._pieces_of[word] = self._word_pieces(word)
                ids.extend(pieces[0])
                starts.extend(pieces[1])
                ends.extend(pieces[2])
                word_starts.append(match.start())
                counts.append(len(pieces[0]))
            word_starts = np.repeat(np.array(word_starts, np.int32), counts)  # one a piece
            outputs.append((np.array(ids, np.int32), word_starts + np.array(starts, np.int32),
                            word_starts + np.array(ends, np.int32)))
        return outputs

    def _word_pieces(self, word):
        """`(ids, starts, ends)`: the word's pieces and their characters in `word`."""
        folded = word
        if self.lowercase:
            # NFKC_Casefold of ASCII is `lower()` (NFKC keeps ASCII, which has no default
            # ignorable character): most words skip the slow general case.
            folded = word.lower() if word.isascii() else casefold_utf8(word)
        if not folded:
            return (), (), ()
        ids, starts, ends = zip(*self._greedy_pieces(folded))
        if folded != word and not word.isascii():  # folding moved characters
            starts, ends = _unfold_offsets(word, folded, np.array(starts), np.array(ends))
            starts, ends = starts.tolist(), ends.tolist()
        return ids, tuple(starts), tuple(ends)

    def _greedy_pieces(self, word):
        """Greedy longest-match-first WordPiece: `((id, start, end), ...)` in `word`."""
        if len(word.encode("utf-8")) > MAX_BYTES_PER_WORD:
            return ((self._oov_id, 0, len(word)),)
        pieces, start = [], 0
        while start < len(word):
            prefix = self.suffix_indicator if start else ""
            for end in range(len(word), start, -1):
                piece_id = self._token_ids.get(prefix + word[start:end])
                if piece_id is not None:
                    break
            else:
                return ((self._oov_id, 0, len(word)),)
            pieces.append((piece_id, start, end))
            start = end
        return tuple(pieces)

    def special_ids(self):
        """`(cls_id, sep_id, pad_id)` of the vocabulary, which SQuAD windows need."""
        return special_ids(self.tokenizer)


def _character_class(alternation, negate=False):
    """One regex character class (V1 syntax) for an alternation of classes, `[..]|\\p{..}|..`.

    keras-hub writes its patterns as alternations of one-character classes; one class
    matches a run of them several times faster than a lookahead per character.
    """
    alternatives = alternation.split("|")
    if not all(regex.fullmatch(r"\[(?:\\.|[^\\\]])+\]|\\p\{\w+\}", a) for a in alternatives):
        raise ValueError(f"Not an alternation of character classes: {alternation!r}")
    return f"[{'^' if negate else ''}{''.join(alternatives)}]"


def _unfold_offsets(word, folded, starts, ends):
    """Character offsets in `word` of pieces at `starts`/`ends` (characters) of its folding.

    Through the folding of each character where folding the characters one by one gives
    `folded` (the piece spans the characters whose folding holds its first and last
    character); else (NFKC composed characters across the word) proportionally, exact at
    both ends of the word, no piece left empty.
    """
    parts = [casefold_utf8(character) for character in word]
    if "".join(parts) == folded:
        alignment = np.cumsum([0] + [len(part) for part in parts])  # where char k's folding starts
        return (np.searchsorted(alignment, starts, side="right") - 1,
                np.searchsorted(alignment, ends, side="left"))
    return starts * len(word) // len(folded), -(-ends * len(word) // len(folded))


class TfWordPieceOffsets(WordPieceOffsets):
    """`WordPieceOffsets`'s tokens and offsets on tensorflow-text's ops (faster).

    `regex_split_with_offsets` with keras-hub's own RE2 patterns, `case_fold_utf8` per
    word, and a `FastWordpieceTokenizer` built like keras-hub's (same vocabulary list,
    `no_pretokenization=True`) whose `tokenize_with_offsets` gives each piece's bytes in
    its folded word; those of a word whose folding moved characters are mapped back as
    in `WordPieceOffsets`.

    Args:
        tokenizer: as for `WordPieceOffsets`.
    """

    def __init__(self, tokenizer):
        super().__init__(tokenizer)
        import tensorflow as tf  # here: the optional TensorFlow route; the base class needs none
        import tensorflow_text as tf_text

        self._tf, self._tf_text = tf, tf_text
        self._wordpiece = tf_text.FastWordpieceTokenizer(
            vocab=tokenizer.get_vocabulary(),
            suffix_indicator=tokenizer.suffix_indicator,
            unknown_token=tokenizer.oov_token,
            no_pretokenization=True,
            token_out_type=tf.int32,
        )
        if tokenizer.split_on_cjk:
            self._patterns = (patterns.WHITESPACE_PUNCTUATION_AND_CJK_REGEX,
                              patterns.PUNCTUATION_AND_CJK_REGEX)
        else:
            self._patterns = (patterns.WHITESPACE_AND_PUNCTUATION_REGEX,
                              patterns.PUNCTUATION_REGEX)

    def tokenize(self, texts):
        """`[(ids, start_chars, end_chars)]`, three int32 arrays for each text of `texts`."""
        tf, tf_text = self._tf, self._tf_text
        texts = list(texts)
        if not texts:
            return []
        words, word_starts, _ = tf_text.regex_split_with_offsets(
            tf.constant(texts, tf.string), delim_regex_pattern=self._patterns[0],
            keep_delim_regex_pattern=self._patterns[1],
        )  # (texts, words), byte offsets into the text
        folded = tf_text.case_fold_utf8(words) if self.lowercase else words
        ids, piece_starts, piece_ends = self._wordpiece.tokenize_with_offsets(folded)
        # (texts, words, pieces), byte offsets into the folded word
        word_splits = words.row_splits.numpy()
        piece_splits = ids.values.row_splits.numpy()  # pieces of each word, all texts
        ids = ids.flat_values.numpy().astype(np.int32)
        piece_starts, piece_ends, word_starts, words, folded = (
            tensor.flat_values.numpy() for tensor in (piece_starts, piece_ends, word_starts,
                                                      words, folded))
        piece_word = np.repeat(np.arange(len(word_starts)), np.diff(piece_splits))
        # Folding kept the bytes of most words (all of them without `lowercase`, every
        # ASCII word): their pieces' bytes map straight back into the text.
        changed = np.array([i for i, (word, fold) in enumerate(zip(words, folded))
                            if word != fold and not word.isascii()], np.int64)
        outputs = []
        for t, text in enumerate(texts):
            w0, w1 = word_splits[t], word_splits[t + 1]
            p0, p1 = piece_splits[w0], piece_splits[w1]
            char_of_byte = _char_of_byte(text)
            w = piece_word[p0:p1]
            # Right for the words whose folding kept their bytes; the others are set below
            # (clipped: a folding can be longer in bytes than its word, "ᾼ" → "αι").
            last = len(char_of_byte) - 1
            starts = char_of_byte[np.minimum(word_starts[w] + piece_starts[p0:p1], last)]
            ends = char_of_byte[np.minimum(word_starts[w] + piece_ends[p0:p1], last)]
            for i in changed[np.searchsorted(changed, w0):np.searchsorted(changed, w1)]:
                lo, hi = piece_splits[i], piece_splits[i + 1]
                if lo == hi:  # folded to nothing
                    continue
                fold = folded[i].decode("utf-8")
                in_fold = _char_of_byte(fold)
                first, last = _unfold_offsets(words[i].decode("utf-8"), fold,
                                              in_fold[piece_starts[lo:hi]],
                                              in_fold[piece_ends[lo:hi]])
                starts[lo - p0:hi - p0] = char_of_byte[word_starts[i]] + first
                ends[lo - p0:hi - p0] = char_of_byte[word_starts[i]] + last
            outputs.append((ids[p0:p1], starts.astype(np.int32), ends.astype(np.int32)))
        return outputs


def _char_of_byte(text):
    """`a[b]`: the code point index of UTF-8 byte offset `b` of `text` (`len(a)` = bytes + 1)."""
    encoded = np.frombuffer(text.encode("utf-8"), np.uint8)
    if len(encoded) == len(text):
        return np.arange(len(text) + 1)
    is_start = (encoded & 0xC0) != 0x80  # not a continuation byte
    return np.concatenate([[0], np.cumsum(is_start)])
