"""`pack_segments` packs exactly as keras-hub's `MultiSegmentPacker`, also with a tensor length."""

import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_tupe.data.packing import pack_segments

CLS, SEP, PAD = 1, 2, 0


def _random_segments(rng, num_segments, batch, max_len):
    return [
        tf.ragged.constant(
            [list(rng.integers(5, 100, rng.integers(0, max_len + 1))) for _ in range(batch)],
            dtype=tf.int32, ragged_rank=1)
        for _ in range(num_segments)
    ]


@pytest.mark.parametrize("num_segments", [1, 2])
@pytest.mark.parametrize("length", [4, 9, 16, 40])
def test_pack_segments_equals_keras_hub_packer(num_segments, length):
    rng = np.random.default_rng(length * 10 + num_segments)
    segments = _random_segments(rng, num_segments, batch=16, max_len=25)
    packer = keras_hub.layers.MultiSegmentPacker(
        sequence_length=length, start_value=CLS, end_value=SEP, pad_value=PAD,
        truncate="round_robin", dtype="int32")
    expected_ids, expected_types = packer(tuple(segments))
    packed = pack_segments(segments, length, CLS, SEP, PAD)
    np.testing.assert_array_equal(packed["token_ids"], expected_ids)
    np.testing.assert_array_equal(packed["segment_ids"], expected_types)
    # The mask counts the real tokens: min(total, L - specials) + specials.
    total = sum(s.row_lengths().numpy() for s in segments)
    packed_length = np.minimum(total, length - num_segments - 1) + num_segments + 1
    expected_mask = np.arange(length)[None, :] < packed_length[:, None]
    np.testing.assert_array_equal(packed["padding_mask"], expected_mask.astype("int32"))


def test_pack_segments_takes_a_tensor_length_in_a_graph():
    spec = tf.RaggedTensorSpec([None, None], tf.int32, ragged_rank=1)

    @tf.function(input_signature=[spec, spec, tf.TensorSpec([], tf.int32)])
    def pack(a, b, length):
        return pack_segments([a, b], length, CLS, SEP, PAD)

    segments = _random_segments(np.random.default_rng(0), 2, batch=5, max_len=12)
    for length in (6, 20):
        from_graph = pack(*segments, tf.constant(length))
        eager = pack_segments(segments, length, CLS, SEP, PAD)
        for key in eager:
            assert from_graph[key].shape == (5, length)
            np.testing.assert_array_equal(from_graph[key], eager[key])
