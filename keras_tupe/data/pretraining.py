"""The masked-LM pre-training pipeline: text -> WordPiece ids -> packing -> masking -> batches.

One function a step: `line_dataset` (corpus.py) reads the corpus, the tokenizer of
`load_tokenizer` (vocabulary.py) maps lines to ids, `packed_sequences` builds
FULL-SENTENCES sequences, `mlm_dataset` shuffles, masks and batches them.
"""

import keras_hub
import tensorflow as tf

from keras_tupe.data.corpus import line_batches, line_dataset
from keras_tupe.data.masking import UNSELECTABLE_IDS, check_mask_rates
from keras_tupe.data.vocabulary import (
    SPECIAL_TOKENS,
    check_vocabulary,
    load_tokenizer,
    train_vocabulary,
    vocabulary_fingerprint,
)
from keras_tupe.models.tupe_masked_lm_preprocessor import mask_selection_length
from keras_tupe_base.checks import check_int
from keras_tupe_base.settings import MIN_SEQUENCE_LENGTH

__all__ = [
    "SPECIAL_TOKENS",
    "check_vocabulary",
    "line_dataset",
    "load_tokenizer",
    "mask_selection_length",
    "mlm_dataset",
    "packed_sequences",
    "train_vocabulary",
    "vocabulary_fingerprint",
]

PAD, CLS, SEP, UNK, MASK = SPECIAL_TOKENS
UNSELECTABLE_TOKENS = [SPECIAL_TOKENS[i] for i in UNSELECTABLE_IDS]


def packed_sequences(source, tokenizer, sequence_length, max_lines=None):
    """FULL-SENTENCES packing: unmasked `[CLS] + chunk` sequences of `sequence_length` ids.

    The WordPiece ids of every line, in corpus order, form one stream with one
    [SEP] between documents (lines of a document are simply contiguous). The
    stream is cut into chunks of `sequence_length - 1` ids and each sequence is
    [CLS] + chunk, so every sequence is full; the last partial chunk is dropped.

    Args:
        source: a corpus, as for `line_dataset`.
        tokenizer: a `WordPieceTokenizer` from `load_tokenizer` (no `sequence_length`).
        sequence_length: int >= 8.
        max_lines: int or None. Read at most this many lines of the corpus.

    Returns:
        A `tf.data.Dataset` of int32 tensors of shape `(sequence_length,)`.
    """
    check_int("sequence_length", sequence_length, MIN_SEQUENCE_LENGTH)
    special = _special_ids(tokenizer)
    cls_id, sep_id = special[CLS], special[SEP]
    line_dataset(source, max_lines=max_lines)  # clear errors for missing or empty corpora
    chunk = sequence_length - 1

    def tokenize(lines):                                            # (n,) strings
        ids = tokenizer(lines)                                      # (n, None) ragged
        # A boundary line ("") has no token: give it the [SEP].
        is_boundary = tf.equal(lines, "")
        seps = tf.RaggedTensor.from_row_lengths(
            tf.fill([tf.reduce_sum(tf.cast(is_boundary, tf.int32))], sep_id),
            tf.cast(is_boundary, tf.int64),
        )
        return tf.concat([tf.cast(ids, tf.int32), seps], axis=1).flat_values

    def cut(remainder, ids):
        stream = tf.concat([remainder, ids], 0)
        num_chunks = tf.size(stream) // chunk
        full = num_chunks * chunk
        return stream[full:], tf.reshape(stream[:full], [num_chunks, chunk])

    def add_cls(chunks):                                            # (k, L - 1)
        cls = tf.fill([tf.shape(chunks)[0], 1], cls_id)
        return tf.concat([cls, chunks], axis=1)                     # (k, L)

    # The tokenizer is deterministic: parallel calls, kept in order.
    ids = line_batches(source, max_lines=max_lines).map(
        tokenize, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
    # `scan` carries the ids that do not fill a chunk over to the next batch of lines.
    chunks = ids.scan(tf.zeros([0], tf.int32), cut)
    return chunks.map(add_cls).unbatch()


def mlm_dataset(source, tokenizer, sequence_length, batch_size, seed=0, mask_rate=0.15,
                mask_token_rate=0.8, random_token_rate=0.1, shuffle_buffer=10_000, repeat=True,
                max_lines=None, drop_remainder=True):
    """Masked-LM batches for pre-training, deterministic given `seed`.

    `packed_sequences` -> seeded shuffle -> repeat (reshuffled each epoch) ->
    `keras_hub.layers.MaskedLMMaskGenerator`, one sequence at a time -> batch. Of each
    sequence's `n` selectable tokens (not [PAD], [CLS], [SEP]) exactly
    `ceil(mask_rate * n)` are selected, anew each epoch; each becomes [MASK] with
    `mask_token_rate`, a random id with `random_token_rate`, else stays.

    Determinism: tf-text's masking ops are unseeded and take their seeds from
    TensorFlow's global seed when traced, so this calls `tf.random.set_seed(seed)` (and
    leaves it set) and masks one sequence a call, in order (see the comment at the
    map): the same arguments give the same batches, in one process or two, whatever
    the batch size. The cost: masking runs on one core (~4k sequences/s of 128 ids).

    Args:
        source: a corpus, as for `line_dataset`.
        tokenizer: a `WordPieceTokenizer` from `load_tokenizer` (no `sequence_length`).
        sequence_length: int >= 8. `L`, the length of every sequence.
        batch_size: int >= 1. `B`.
        seed: int. Seeds the shuffle and the masking. Defaults to `0`.
        mask_rate: float in [0, 1]. Fraction of tokens selected. Defaults to `0.15`.
        mask_token_rate: float in [0, 1]. Selected tokens replaced by [MASK].
            Defaults to `0.8`.
        random_token_rate: float in [0, 1]. Selected tokens replaced by a random
            token. Defaults to `0.1`; `mask_token_rate + random_token_rate <= 1`.
        shuffle_buffer: int or None. Shuffle buffer, in sequences. Defaults to `10_000`.
        repeat: bool. Repeat the corpus forever. Defaults to `True`.
        max_lines: int or None. Read at most this many lines of the corpus.
        drop_remainder: bool. Drop the last partial batch (static batch size).
            Defaults to `True`.

    Returns:
        A `tf.data.Dataset` of `(x, y, sample_weight)`, `P = mask_selection_length(L,
        mask_rate)`: `x` int32 `token_ids` (masked), `padding_mask` (ones), `segment_ids`
        (zeros) `(B, L)` and `mask_positions` `(B, P)`; `y` int32 `(B, P)`, the original
        ids; `sample_weight` float32 `(B, P)`, 0 on padded slots (position 0, id 0).
    """
    check_int("sequence_length", sequence_length, MIN_SEQUENCE_LENGTH)
    check_int("batch_size", batch_size, 1)
    check_mask_rates(mask_rate, mask_token_rate, random_token_rate)
    if shuffle_buffer is not None:
        check_int("shuffle_buffer", shuffle_buffer, 0)
    check_int("seed", seed, 0)
    special = _special_ids(tokenizer)
    num_slots = mask_selection_length(sequence_length, mask_rate)

    # Before anything is traced: every random op below derives its seed from it.
    tf.random.set_seed(seed)
    sequences = packed_sequences(source, tokenizer, sequence_length, max_lines=max_lines)
    if shuffle_buffer:
        sequences = sequences.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    if repeat:
        sequences = sequences.repeat()

    masker = keras_hub.layers.MaskedLMMaskGenerator(
        vocabulary_size=tokenizer.vocabulary_size(),
        mask_selection_rate=mask_rate,
        mask_token_id=special[MASK],
        mask_selection_length=num_slots,
        unselectable_token_ids=[special[token] for token in UNSELECTABLE_TOKENS],
        mask_token_rate=mask_token_rate,
        random_token_rate=random_token_rate,
    )

    def mask(ids):                                                  # (L,)
        masked = masker(ids)
        token_ids = tf.ensure_shape(tf.cast(masked["token_ids"], tf.int32), [sequence_length])

        def slots(value, dtype):
            return tf.ensure_shape(tf.cast(value, dtype), [num_slots])  # (P,)

        x = {
            "token_ids": token_ids,
            "padding_mask": tf.ones_like(token_ids),
            "segment_ids": tf.zeros_like(token_ids),
            "mask_positions": slots(masked["mask_positions"], tf.int32),
        }
        return x, slots(masked["mask_ids"], tf.int32), slots(masked["mask_weights"], tf.float32)

    # One sequence a call, calls in sequence: the masking ops draw from one random
    # stream, in call order. Parallel calls would draw in a racy order, and so would
    # a batch: tf-text selects each row's positions in a `tf.map_fn` whose
    # iterations run concurrently in graph mode (this made the first batches of
    # two identical pipelines differ).
    examples = sequences.map(mask, num_parallel_calls=None)
    batches = examples.batch(batch_size, drop_remainder=drop_remainder)
    options = tf.data.Options()
    options.deterministic = True
    return batches.prefetch(tf.data.AUTOTUNE).with_options(options)


def _special_ids(tokenizer):
    """{token: id} of the special tokens; checks the tokenizer suits packing."""
    if getattr(tokenizer, "sequence_length", None) is not None:
        raise ValueError(
            "The tokenizer must not pad or truncate (packing needs every id): build it "
            "with `load_tokenizer(..., sequence_length=None)`. Received: tokenizer with "
            f"sequence_length={tokenizer.sequence_length}"
        )
    vocabulary = tokenizer.get_vocabulary()
    if vocabulary[: len(SPECIAL_TOKENS)] != SPECIAL_TOKENS:
        raise ValueError(
            f"The tokenizer's vocabulary must start with {SPECIAL_TOKENS}. "
            f"Received: {vocabulary[: len(SPECIAL_TOKENS)]}"
        )
    return {token: index for index, token in enumerate(SPECIAL_TOKENS)}

