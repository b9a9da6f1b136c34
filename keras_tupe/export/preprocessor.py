"""The text preprocessor as a SavedModel: strings to the encoder's inputs (TF-Hub style)."""

import os

import tensorflow as tf

from keras_tupe.data import load_tokenizer
from keras_tupe.data.packing import pack_segments, ragged_ids, special_ids
from keras_tupe.export.tfhub_names import to_tfhub
from keras_tupe.export.versions import save_version

_TEXT = tf.TensorSpec([None], tf.string, name="text")
_SEGMENT = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)
_SEQ_LENGTH = tf.TensorSpec([], tf.int32, name="seq_length")
MAX_SEGMENTS = 2


def _tokenizer_and_specials(vocabulary_file, lowercase):
    tokenizer = load_tokenizer(vocabulary_file, lowercase=lowercase)

    def tokenize(text):
        return ragged_ids(tokenizer(text))

    return tokenize, special_ids(tokenizer)


def preprocessor_module(vocabulary_file, seq_length=128, lowercase=True):
    """The TF-Hub BERT preprocessor API over a keras_tupe WordPiece vocabulary.

    - `__call__(text)`: a `[batch]` string tensor of single sentences -> the dict of
      int32 `input_word_ids`, `input_mask`, `input_type_ids` `(batch, seq_length)`.
    - `tokenize(text)`: `[batch]` strings -> int32 token ids, ragged `(batch, None)`.
    - `bert_pack_inputs(segments, seq_length=seq_length)`: a list of one or two
      tokenized segments -> the packed dict, `[CLS] a [SEP] (b [SEP])`, truncated
      round-robin; `seq_length` may be any int at call time.
    - `vocab_file` (an asset, the vocabulary copied into the SavedModel) and
      `do_lower_case`.

    Packing is `keras_tupe.data.packing.pack_segments`, the function fine-tuning uses,
    so the ids equal the training pipeline's for the same text.
    """
    tokenize_fn, (cls_id, sep_id, pad_id) = _tokenizer_and_specials(vocabulary_file, lowercase)
    root = tf.__internal__.tracking.AutoTrackable()
    root.vocab_file = tf.saved_model.Asset(vocabulary_file)
    root.do_lower_case = tf.Variable(lowercase, trainable=False, name="do_lower_case")
    root.seq_length = tf.Variable(seq_length, trainable=False, name="seq_length")

    @tf.function(input_signature=[_TEXT])
    def tokenize(text):
        return tokenize_fn(text)

    packer = tf.__internal__.tracking.AutoTrackable()

    @tf.function
    def pack(segments, seq_length=seq_length):
        if not 1 <= len(segments) <= MAX_SEGMENTS:
            raise ValueError(f"bert_pack_inputs takes 1 to {MAX_SEGMENTS} segments. "
                             f"Received: {len(segments)}")
        tf.debugging.assert_greater(
            seq_length, len(segments) + 1,
            message="seq_length must exceed the number of special tokens ([CLS] + one "
                    "[SEP] per segment)")
        return to_tfhub(pack_segments(list(segments), seq_length, cls_id, sep_id, pad_id))

    for count in range(1, MAX_SEGMENTS + 1):
        pack.get_concrete_function([_SEGMENT] * count, _SEQ_LENGTH)
    packer.__call__ = pack
    root.tokenize = tokenize
    root.bert_pack_inputs = packer

    @tf.function(input_signature=[_TEXT])
    def call(text):
        return to_tfhub(pack_segments([tokenize_fn(text)], seq_length, cls_id, sep_id, pad_id))

    root.__call__ = call
    return root, {"serving_default": call}


def export_preprocessor(vocabulary_file, export_dir, seq_length=128, lowercase=True,
                        version=None, overwrite=False):
    """Exports `preprocessor_module` as `export_dir/<version>/`; returns its path.

    Load it with `import tensorflow_text` first (its WordPiece ops live there), then
    `tf.saved_model.load(path)`.
    """
    if isinstance(seq_length, bool) or not isinstance(seq_length, int) or seq_length < 3:
        raise ValueError(f"`seq_length` must be an int >= 3. Received: {seq_length!r}")
    root, signatures = preprocessor_module(vocabulary_file, seq_length, lowercase)
    metadata = {"vocabulary": os.path.basename(vocabulary_file), "lowercase": lowercase,
                "seq_length": seq_length}
    return save_version(export_dir, root, signatures, "preprocessor", metadata, version,
                        overwrite)
