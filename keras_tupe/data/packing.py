"""BERT input packing for the exported preprocessor SavedModel (`keras_tupe.export`).

`pack_segments` is keras-hub's `MultiSegmentPacker` (round-robin truncation) written
with the tensorflow-text ops it uses, so that the length may be a scalar tensor (a
SavedModel's `seq_length` argument), which the packer does not take.
"""

import tensorflow as tf
import tensorflow_text as tf_text

from keras_tupe.models.tupe_tokenizer import special_ids  # noqa: F401  (imported from here too)


def pack_segments(segments, sequence_length, cls_id, sep_id, pad_id):
    """`[CLS] a [SEP]` or `[CLS] a [SEP] b [SEP]`, truncated round-robin, padded.

    Args:
        segments: a list of one or more int ragged tensors `(B, None)`: the token
            ids of each segment.
        sequence_length: int or scalar int32 tensor L, at least `len(segments) + 1`.
        cls_id, sep_id, pad_id: int. The special token ids.

    Returns:
        A dict of int32 tensors `(B, L)`: `token_ids`; `padding_mask`, 1 on real
        tokens (specials included), 0 on padding; `segment_ids`, segment `s` (and
        its [SEP]) gets `s`, [CLS] and padding 0.
    """
    segments = [tf.cast(segment, tf.int32) for segment in segments]
    num_special = len(segments) + 1
    # Round robin: the segments lose tokens alternately from their ends, the longer first.
    trimmed = tf_text.RoundRobinTrimmer(sequence_length - num_special).trim(segments)
    word_ids, type_ids = tf_text.combine_segments(
        trimmed, start_of_sequence_id=cls_id, end_of_segment_id=sep_id)
    word_ids, mask = tf_text.pad_model_inputs(word_ids, sequence_length, pad_value=pad_id)
    type_ids, _ = tf_text.pad_model_inputs(type_ids, sequence_length, pad_value=0)
    return {
        "token_ids": tf.cast(word_ids, tf.int32),
        "padding_mask": tf.cast(mask, tf.int32),
        "segment_ids": tf.cast(type_ids, tf.int32),
    }


def ragged_ids(token_ids):
    """The tokenizer's output as int32 ragged ids (B, None): keras-hub gives a ragged tensor
    in graph mode, eagerly lists (rows of different lengths) or a dense tensor."""
    if isinstance(token_ids, list):
        return tf.ragged.constant(token_ids, dtype=tf.int32, ragged_rank=1)
    if not isinstance(token_ids, tf.RaggedTensor):
        token_ids = tf.RaggedTensor.from_tensor(tf.convert_to_tensor(token_ids))
    return tf.cast(token_ids, tf.int32)
