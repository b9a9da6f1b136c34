"""The tokenizer of the TUPE authors' checkpoints: Moses + BPE (`@@ `) + a fairseq dictionary."""

import io
import os
import re
import sys

import keras
import numpy as np
from subword_nmt.apply_bpe import BPE

import keras_hub

from keras_tupe.models.preset_folders import StagedPresetSaving, check_backbone_vocabulary_size
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_tokenizer import add_special_tokens


def _is_tf(value, name):
    """`isinstance(value, tf.<name>)`, without importing TensorFlow (an optional extra):
    where it is not imported, no value is one of its tensors."""
    tf = sys.modules.get("tensorflow")
    return tf is not None and isinstance(value, getattr(tf, name))


# The fork's `fairseq.data.Dictionary` puts these before the `dict.txt` lines
# (ids 0-6); the masked_lm task appends `<mask>` after them.
FAIRSEQ_SPECIAL_TOKENS = ("<s>", "<pad>", "</s>", "<unk>", "<file>", "<email>", "<url>")
MASK_TOKEN = "<mask>"
BPE_SEPARATOR = "@@"
VOCABULARY_ASSET = "vocabulary.txt"
BPE_CODES_ASSET = "bpe_codes.txt"
_CODES_FORMATS = ("a subword-nmt codes file (`#version: 0.2`, then `left right` a line) or a "
                  "fastBPE codes file (`left right count` a line).")


# -- vocabulary and codes files -------------------------------------------------------------


def read_fairseq_dictionary(path):
    """The id-ordered tokens of a fairseq `dict.txt`, as the fork's `Dictionary` numbers them.

    The 7 specials, then the words (`read_fairseq_dictionary_words`), then `<mask>`
    unless the file already holds it (`add_symbol` returns the existing id then).
    """
    tokens = [*FAIRSEQ_SPECIAL_TOKENS, *read_fairseq_dictionary_words(path)]
    if MASK_TOKEN not in tokens:
        tokens.append(MASK_TOKEN)
    return tokens


def read_fairseq_dictionary_words(path):
    """The words of a fairseq `dict.txt` in file order: the one reader of that format.

    A line is `<token> <count>` split at its last space, as the fork's
    `Dictionary.add_from_file` splits it; a repeated token is a word each time.
    Refused, naming the line: a line without a space (a blank one too: the fork
    fails on it), an empty token, a count that is not a non-negative integer, and
    later fairseq's `#fairseq:overwrite` flag (the fork cannot read it).
    """
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Vocabulary file {path} does not exist. TupeBpeTokenizer takes the fairseq "
            "`dict.txt` of the checkpoint (one `<token> <count>` a line) or a list of tokens "
            "in id order."
        )
    words = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            word, _, count = line.rstrip("\n").rpartition(" ")
            if not word or not count.strip().isdecimal():
                raise ValueError(
                    f"Vocabulary file {path}, line {number}: expected `<token> <count>` (a "
                    f"fairseq dict.txt line, count a non-negative integer). Received: "
                    f"{line.rstrip(chr(10))!r}. Pass a fairseq dict.txt (specials not listed), "
                    "or a Python list of tokens in id order."
                )
            words.append(word)
    return words


def parse_bpe_codes(lines, source="bpe_codes"):
    """Merge ranks and format version from the lines of a subword-nmt or fastBPE codes file.

    Formats (rank = line order; a repeated pair keeps its first rank, as both
    tools do):
    - subword-nmt with a `#version: 0.2` first line: `left right` lines; the
      last symbol of a word carries `</w>`.
    - subword-nmt without a header (its version 0.1): `</w>` is a separate
      symbol after the word.
    - fastBPE (the TUPE authors' `bpe-code`): `left right count` lines, no
      header; it handles `</w>` as subword-nmt 0.2 does.

    Returns:
        `(ranks, version, lines)`: a dict `(left, right) -> rank`, the version
        tuple `(0, 1)` or `(0, 2)`, and the merges as `left right` strings.
    """
    lines = [" ".join(line) if isinstance(line, (tuple, list)) else str(line)
             for line in lines]
    while lines and not lines[-1].strip():
        lines.pop()
    version, offset = None, 0
    if lines and lines[0].startswith("#version:"):
        number = re.sub(r"(\.0+)*$", "", lines[0].split()[-1])
        version = tuple(int(x) for x in number.split("."))
        if version not in ((0, 1), (0, 2)):
            raise ValueError(f"BPE codes {source}: unsupported {lines[0]!r}; subword-nmt "
                             "codes are `#version: 0.1` or `#version: 0.2`.")
        offset = 1
    merges = [line.strip("\r\n ").split(" ") for line in lines[offset:]]
    if not merges:
        raise ValueError(f"BPE codes {source} hold no merges. Pass {_CODES_FORMATS}")
    widths = {len(m) for m in merges}
    fastbpe = version is None and widths == {3} and all(m[2].isdigit() for m in merges)
    for number, merge in enumerate(merges, start=offset + 1):
        if not (len(merge) == 2 or (fastbpe and len(merge) == 3)) or not all(merge[:2]):
            raise ValueError(f"BPE codes {source}, line {number}: {' '.join(merge)!r} is not a "
                             f"merge. Expected {_CODES_FORMATS}")
    if version is None and not fastbpe and all(m[1].isdigit() for m in merges):
        raise ValueError(
            f"BPE codes {source}: every line is `<token> <integer>`, the form of a fairseq "
            "dict.txt, not of BPE codes. Pass the codes file (subword-nmt `#version: 0.2` + "
            "`left right` lines, or fastBPE `left right count` lines) as `bpe_codes` and the "
            "dict.txt as `vocabulary`."
        )
    if version is None:
        version = (0, 2) if fastbpe else (0, 1)
    ranks = {}
    for rank, merge in enumerate(merges):
        ranks.setdefault((merge[0], merge[1]), rank)
    return ranks, version, [f"{m[0]} {m[1]}" for m in merges]


def read_bpe_codes(path):
    """`parse_bpe_codes` of a file, with a clear error for a missing one."""
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"BPE codes file {path} does not exist. TupeBpeTokenizer takes the checkpoint's "
            "codes (fastBPE `bpe-code` or subword-nmt codes) or a list of `left right` merges."
        )
    try:
        with open(path, encoding="utf-8") as f:
            lines = f.read().split("\n")
    except UnicodeDecodeError as error:
        raise ValueError(f"BPE codes file {path} is not UTF-8 text ({error}); it is not a "
                         "subword-nmt or fastBPE codes file.") from None
    return parse_bpe_codes(lines, source=f"file {path}")


def _to_python_strings(inputs):
    """`(list of str, batched)` for a str/bytes, a list, a NumPy array or a tf tensor."""
    if _is_tf(inputs, "RaggedTensor"):
        raise ValueError("TupeBpeTokenizer takes a string or a rank-1 batch of strings. "
                         f"Received a ragged tensor of shape {inputs.shape}.")
    if _is_tf(inputs, "Tensor"):
        inputs = inputs.numpy()
    if isinstance(inputs, np.ndarray):
        if inputs.ndim > 1:
            raise ValueError("TupeBpeTokenizer takes a string or a rank-1 batch of strings. "
                             f"Received an array of shape {inputs.shape}.")
        batched = inputs.ndim == 1
        inputs = inputs.tolist() if batched else [inputs.item()]
    elif isinstance(inputs, (list, tuple)):
        batched = True
        inputs = list(inputs)
    else:
        batched, inputs = False, [inputs]
    strings = []
    for text in inputs:
        if isinstance(text, bytes):
            text = text.decode("utf-8")
        if not isinstance(text, str):
            raise ValueError("TupeBpeTokenizer takes strings (a string, a list of strings, a "
                             f"string array or tensor). Received an element {text!r}.")
        strings.append(text)
    return strings, batched


def _to_python_ids(inputs):
    """`(list of id lists, batched)` for ids as a list, a NumPy array or a (ragged) tf tensor."""
    if _is_tf(inputs, "RaggedTensor"):
        inputs = inputs.to_list()
    elif (_is_tf(inputs, "Tensor") or isinstance(inputs, np.ndarray)) or keras.ops.is_tensor(inputs):
        inputs = keras.ops.convert_to_numpy(inputs).tolist()
    elif np.isscalar(inputs):
        inputs = [inputs]
    inputs = list(inputs)
    batched = bool(inputs) and isinstance(inputs[0], (list, tuple, np.ndarray))
    rows = inputs if batched else [inputs]
    return [[int(i) for i in row] for row in rows], batched


# -- the tokenizer --------------------------------------------------------------------------


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeBpeTokenizer(StagedPresetSaving, keras_hub.tokenizers.Tokenizer):
    """The TUPE authors' text pipeline: lowercase, Moses, BPE with `@@ `, fairseq ids.

    `guolinke/TUPE` (a fairseq fork) prepared text with `preprocess/pretrain/
    process.sh` (GLUE: `preprocess/glue/process.sh`): lowercase, split every
    hyphen into ` - ` (`replace_patterns.py`), Moses `tokenizer.perl -no-escape
    -l en` (no `-a`), fastBPE `applybpe`, then `preprocess.py` maps BPE tokens
    to ids with the fork's `Dictionary`. This class runs those four steps in
    Python on each string:

    1. `text.lower()` (if `lowercase`), then `-` -> ` - ` (if `split_hyphens`).
    2. `sacremoses.MosesTokenizer("en").tokenize(escape=False,
       aggressive_dash_splits=False)`, with the fairseq special tokens
       (`<unk>`, `</s>`, `<url>`, ...) protected as `process.sh` protects them.
    3. BPE by `subword_nmt.apply_bpe.BPE` (fastBPE applies the same merges),
       pieces joined by `@@ `; the codes may be fastBPE (`a b count`) or
       subword-nmt codes.
    4. ids: `<s>`=0 `<pad>`=1 `</s>`=2 `<unk>`=3 `<file>`=4 `<email>`=5
       `<url>`=6, then the `dict.txt` lines, then `<mask>`; unknown -> `<unk>`.

    The authors' other clean-up steps (punctuation normalisation, removing
    non-printing characters, replacing URLs/e-mails/file names by `<url>`,
    `<email>`, `<file>`, spaCy sentence splitting) are not applied: text
    already like Wikipedia prose gets the same ids, other text may differ.

    Where it runs: eagerly, `tokenize` is plain Python (no TensorFlow op) and
    returns a list of id lists for a batch, an int32 array for one string.
    Inside a `tf.function` or `tf.data.Dataset.map` it runs through
    `tf.py_function` and returns a `tf.RaggedTensor` (`(batch, None)` int32),
    so `TupeMaskedLMPreprocessor` and `TupeTextClassifierPreprocessor` work in
    `Dataset.map`. It cannot go into a SavedModel that takes raw strings
    (TF Serving, `keras_tupe.export`): a `py_function` is not serialised, so
    such a model would fail at load or call. Export a model that takes token
    ids instead, and tokenize in the client with this class.

    Needs `sacremoses` and `subword-nmt` at runtime (dependencies of keras_tupe).

    Args:
        vocabulary: the path of the checkpoint's fairseq `dict.txt`, or a list
            of all tokens in id order (specials included, as
            `get_vocabulary()` returns).
        bpe_codes: the path of the BPE codes (fastBPE or subword-nmt), or a
            list of `"left right"` merges in rank order (optionally preceded
            by `"#version: 0.2"`; without it the subword-nmt file rules apply).
        lowercase: bool. Lowercase first. Defaults to `True` (the authors'
            data was lowercased).
        split_hyphens: bool. Put spaces around every `-` before Moses, as the
            authors' `replace_patterns.py` does. Defaults to `True`.
        **kwargs: `keras_hub.tokenizers.Tokenizer` arguments (`name`, `dtype`,
            default `"int32"`).

    Example:
    >>> tokenizer = TupeBpeTokenizer("tupe_ckp/dict.txt", "tupe_ckp/bpe-code")
    >>> tokenizer(["The quick brown fox.", "A fine film"])
    >>> tokenizer.detokenize(tokenizer("The quick brown fox."))
    'the quick brown fox .'
    """

    backbone_cls = TupeBackbone

    # fairseq's sentence_prediction task (the fork's GLUE fine-tuning) packs a pair
    # as `<s> a </s> </s> b </s>`: two separators between the segments, as RoBERTa.
    # `TupeTextClassifierPreprocessor` reads this.
    pair_separators = 2

    def __init__(self, vocabulary=None, bpe_codes=None, lowercase=True, split_hyphens=True,
                 **kwargs):
        kwargs.setdefault("dtype", "int32")
        super().__init__(**kwargs)
        self.lowercase = lowercase
        self.split_hyphens = split_hyphens
        self.oov_token = "<unk>"
        self.file_assets = [VOCABULARY_ASSET, BPE_CODES_ASSET]
        self._moses = None
        add_special_tokens(self, cls="<s>", sep="</s>", pad="<pad>", mask="<mask>")
        self.set_vocabulary_and_codes(vocabulary, bpe_codes)

    # -- state ---------------------------------------------------------------------------

    def _set_vocabulary(self, vocabulary):
        if vocabulary is None:
            self.vocabulary, self._token_to_id = None, None
            return
        if isinstance(vocabulary, (str, os.PathLike)):
            vocabulary = read_fairseq_dictionary(vocabulary)
        elif isinstance(vocabulary, (list, tuple)) and all(isinstance(t, str) for t in vocabulary):
            vocabulary = list(vocabulary)
        else:
            raise ValueError("`vocabulary` must be the path of a fairseq dict.txt or a list of "
                             f"token strings in id order. Received: {type(vocabulary).__name__}")
        self.vocabulary = vocabulary
        # A repeated token takes its last id, as `Dictionary.add_from_file` does.
        self._token_to_id = {token: i for i, token in enumerate(vocabulary)}

    def _set_bpe_codes(self, bpe_codes):
        if bpe_codes is None:
            self.bpe_codes, self._bpe = None, None
            return
        if isinstance(bpe_codes, (str, os.PathLike)):
            ranks, version, merges = read_bpe_codes(bpe_codes)
        elif isinstance(bpe_codes, (list, tuple)):
            ranks, version, merges = parse_bpe_codes(bpe_codes, source="list")
        else:
            raise ValueError("`bpe_codes` must be the path of a BPE codes file or a list of "
                             f"'left right' merges. Received: {type(bpe_codes).__name__}")
        self.bpe_codes = [f"#version: {version[0]}.{version[1]}"] + merges
        # subword-nmt applies them (its own rank and version rules, and its word cache);
        # fastBPE codes reach it as the `left right` lines of version 0.2.
        self._bpe = BPE(io.StringIO("\n".join(self.bpe_codes)), separator=BPE_SEPARATOR)

    def set_vocabulary_and_codes(self, vocabulary, bpe_codes):
        """Sets (or, with `None`, clears) the dictionary and the BPE codes."""
        self._set_vocabulary(vocabulary)
        self._set_bpe_codes(bpe_codes)
        if self.vocabulary is not None:
            if self.oov_token not in self._token_to_id:
                raise ValueError(f"The vocabulary has no oov token {self.oov_token!r}; a TUPE "
                                 f"vocabulary starts with {list(FAIRSEQ_SPECIAL_TOKENS)}.")
            self._update_special_token_ids()

    def _check_vocabulary(self):
        if self.vocabulary is None or self._bpe is None:
            raise ValueError("No vocabulary or BPE codes have been set for TupeBpeTokenizer. "
                             "Pass `vocabulary` (dict.txt) and `bpe_codes` when creating it, "
                             "or load it with `from_preset`.")

    # -- vocabulary API ------------------------------------------------------------------

    def get_vocabulary(self):
        """All tokens in id order: the 7 fairseq specials, the dict.txt words, `<mask>`."""
        self._check_vocabulary()
        return list(self.vocabulary)

    def vocabulary_size(self):
        """The number of ids (the encoder's embedding rows; 113 for the reference dict)."""
        self._check_vocabulary()
        return len(self.vocabulary)

    def id_to_token(self, id):
        self._check_vocabulary()
        if not 0 <= int(id) < len(self.vocabulary):
            raise ValueError(f"`id` must be in range [0, {len(self.vocabulary) - 1}]. "
                             f"Received: {id}")
        return self.vocabulary[int(id)]

    def token_to_id(self, token):
        """The id of `token`; `<unk>`'s id for a token not in the dictionary (as fairseq)."""
        self._check_vocabulary()
        return self._token_to_id.get(token, self._token_to_id[self.oov_token])

    # -- text -> ids ---------------------------------------------------------------------

    def _moses_tokenizer(self):
        if self._moses is None:
            try:
                from sacremoses import MosesTokenizer
            except ImportError as error:
                raise ImportError("TupeBpeTokenizer needs sacremoses for Moses tokenization: "
                                  "`pip install sacremoses`.") from error
            self._moses = MosesTokenizer(lang="en")
            # `process.sh` passes these to tokenizer.perl `-protected`, so Moses keeps
            # `<unk>` whole instead of writing `< unk >`.
            self._protected = [re.escape(t) for t in (*FAIRSEQ_SPECIAL_TOKENS, MASK_TOKEN)]
        return self._moses

    def pretokenize(self, text):
        """The Moses tokens of `text` (steps 1-2), before BPE."""
        if self.lowercase:
            text = text.lower()
        if self.split_hyphens:
            text = text.replace("-", " - ")
        if not text.strip():
            return []
        return self._moses_tokenizer().tokenize(
            text,
            escape=False,  # tokenizer.perl -no-escape: `"` stays `"`, not `&quot;`.
            aggressive_dash_splits=False,  # no `-a`: `@-@` is not in the authors' dict.
            protected_patterns=self._protected,
        )

    def bpe(self, words):
        """The BPE tokens (with `@@` on every piece but a word's last) of Moses tokens."""
        return self._bpe.segment_tokens(words)

    def encode(self, text):
        """The ids of one Python string."""
        unk = self._token_to_id[self.oov_token]
        return [self._token_to_id.get(t, unk) for t in self.bpe(self.pretokenize(text))]

    def _encode_tensor(self, strings):
        # Runs inside `tf.py_function`: a (n,) string tensor -> flat ids, row lengths.
        rows = [self.encode(s.decode("utf-8")) for s in strings.numpy().tolist()]
        values = np.fromiter((i for row in rows for i in row), dtype=np.int32)
        return values, np.array([len(row) for row in rows], dtype=np.int64)

    def tokenize(self, inputs):
        """Strings -> ids: a list of id lists (eager) or a `tf.RaggedTensor` (in a graph)."""
        self._check_vocabulary()
        if self._use_tf_workflow():
            return self._tokenize_tf(inputs)
        strings, batched = _to_python_strings(inputs)
        rows = [self.encode(s) for s in strings]
        return rows if batched else np.array(rows[0], dtype=self.compute_dtype)

    def call(self, inputs, *args, training=None, **kwargs):
        # As keras-hub's WordPieceTokenizer: no `preprocessing_function` wrapper, so an
        # eager call returns Python lists / NumPy, not backend tensors.
        return self.tokenize(inputs, *args, **kwargs)

    def _tokenize_tf(self, inputs):
        import tensorflow as tf  # only in a graph (`_use_tf_workflow`): TensorFlow is there

        inputs = tf.convert_to_tensor(inputs)
        if inputs.dtype != tf.string or inputs.shape.rank not in (0, 1):
            raise ValueError("TupeBpeTokenizer takes a string or a rank-1 batch of strings. "
                             f"Received dtype {inputs.dtype.name}, shape {inputs.shape}.")
        values, lengths = tf.py_function(self._encode_tensor, [tf.reshape(inputs, [-1])],
                                         [tf.int32, tf.int64])
        values.set_shape([None])
        lengths.set_shape([None])
        ids = tf.cast(tf.RaggedTensor.from_row_lengths(values, lengths), self.compute_dtype)
        if inputs.shape.rank == 0:
            return ids[0]
        return ids

    # -- ids -> text ---------------------------------------------------------------------

    def decode(self, ids):
        """The text of one id sequence: tokens joined by spaces, `@@ ` removed.

        This is fairseq's `--remove-bpe` output: still lowercased and
        Moses-tokenized (`the cat 's hat .`); Moses detokenization would not
        restore the original text (case and hyphen spacing are lost anyway).
        """
        text = " ".join(self.id_to_token(i) for i in ids)
        return (text + " ").replace(BPE_SEPARATOR + " ", "").rstrip(" ")

    def _decode_tensor(self, ids):
        values = [self.decode(row) for row in ids.to_list()]
        return np.array([v.encode("utf-8") for v in values], dtype=object)

    def detokenize(self, inputs):
        """Ids -> strings (see `decode`): str or list of str eagerly, a string tensor in a graph."""
        self._check_vocabulary()
        if self._use_tf_workflow():
            return self._detokenize_tf(inputs)
        rows, batched = _to_python_ids(inputs)
        texts = [self.decode(row) for row in rows]
        return texts if batched else texts[0]

    def _detokenize_tf(self, inputs):
        import tensorflow as tf  # only in a graph (`_use_tf_workflow`): TensorFlow is there

        ids = inputs if isinstance(inputs, tf.RaggedTensor) else tf.convert_to_tensor(inputs)
        unbatched = ids.shape.rank == 1
        if unbatched:
            ids = tf.expand_dims(ids, 0)
        if isinstance(ids, tf.Tensor):
            ids = tf.RaggedTensor.from_tensor(ids)
        text = tf.py_function(lambda v, s: self._decode_tensor(
            tf.RaggedTensor.from_row_splits(v, s)), [ids.flat_values, ids.row_splits], tf.string)
        text.set_shape([None])
        return text[0] if unbatched else text

    # -- saving --------------------------------------------------------------------------

    def save_assets(self, dir_path):
        """Writes the full id-ordered token list and the codes (with their version line)."""
        self._check_vocabulary()
        for name, lines in ((VOCABULARY_ASSET, self.vocabulary), (BPE_CODES_ASSET, self.bpe_codes)):
            with open(os.path.join(dir_path, name), "w", encoding="utf-8", newline="\n") as f:
                f.write("".join(line + "\n" for line in lines))

    def load_assets(self, dir_path):
        path = os.path.join(dir_path, VOCABULARY_ASSET)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"Tokenizer assets {dir_path} have no {VOCABULARY_ASSET}: "
                                    "the vocabulary is missing. Copy the whole preset folder.")
        with open(path, encoding="utf-8", newline="\n") as f:
            vocabulary = f.read().split("\n")[:-1]
        self.set_vocabulary_and_codes(vocabulary, os.path.join(dir_path, BPE_CODES_ASSET))

    def load_preset_assets(self, preset):
        """Reads the assets back; checks the vocabulary against the backbone's size (if any)."""
        super().load_preset_assets(preset)
        check_backbone_vocabulary_size(preset)

    def get_config(self):
        config = super().get_config()
        # The vocabulary and codes travel as assets (`save_assets`), as in keras-hub.
        config.update({"vocabulary": None, "bpe_codes": None, "lowercase": self.lowercase,
                       "split_hyphens": self.split_hyphens})
        return config
