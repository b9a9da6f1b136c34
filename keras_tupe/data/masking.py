"""Masked-LM masking in NumPy (`mask_batch`, the rule of tf-text's ops in `mlm_dataset`)
and the check of the masking rates. Nothing here imports TensorFlow. The number of target slots, which the masked-LM preprocessor needs too,
is `keras_tupe.models.tupe_masked_lm_preprocessor.mask_selection_length`.
"""

import numpy as np

from keras_tupe_base.checks import check_rate

# Ids 0..4 of every vocabulary keras_tupe trains; both pipelines rely on them.
SPECIAL_TOKENS = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
PAD_ID, CLS_ID, SEP_ID, UNK_ID, MASK_ID = range(len(SPECIAL_TOKENS))
# Never selected for masking. [SEP] is excluded like [CLS], as BERT and keras-hub's
# BertMaskedLMPreprocessor do: it marks structure, and predicting it teaches little.
UNSELECTABLE_IDS = (PAD_ID, CLS_ID, SEP_ID)
assert UNSELECTABLE_IDS == tuple(range(3))  # `mask_batch` relies on it


def mask_batch(ids, rng, vocabulary_size, num_slots, mask_rate=0.15, mask_token_rate=0.8,
               random_token_rate=0.1):
    """Masked-LM inputs for a batch of sequences, vectorized (NumPy).

    In each row, of the `n` tokens that are not [PAD], [CLS] or [SEP], exactly
    `k = min(num_slots, ceil(mask_rate * n))` are selected uniformly without
    replacement (tf-text's `RandomItemSelector` rule, the product in float32).
    Each selected token becomes [MASK] with probability `mask_token_rate`, a
    uniformly random id of `[0, vocabulary_size)` with `random_token_rate`, and
    stays as it is otherwise. Slots beyond `k` have position 0, id 0, weight 0.

    Args:
        ids: int array `(B, L)`, unmasked sequences.
        rng: a `numpy.random.Generator`; the only source of randomness.
        vocabulary_size: int. `V`, the range of random replacement ids.
        num_slots: int. `P`, the slots of each row.
        mask_rate, mask_token_rate, random_token_rate: floats, as for `mlm_dataset`.

    Returns:
        `(x, y, sample_weight)` as `mlm_dataset` yields them: `x["token_ids"]`,
        `x["padding_mask"]` (ones), `x["segment_ids"]` (zeros) int32 `(B, L)`,
        `x["mask_positions"]` int32 `(B, P)`; `y` int32 `(B, P)`; `sample_weight`
        float32 `(B, P)`.
    """
    ids = np.asarray(ids, dtype=np.int32)
    batch_size, length = ids.shape
    # UNSELECTABLE_IDS are the ids 0..2: one comparison, not `np.isin`.
    unselectable = ids <= max(UNSELECTABLE_IDS)                       # (B, L)
    selectable = ~unselectable
    counts = selectable.sum(axis=1)                                   # (B,)
    wanted = np.ceil(counts.astype(np.float32) * np.float32(mask_rate)).astype(np.int64)
    k = np.minimum(wanted, num_slots)                                 # (B,)
    # A uniform random subset: the k smallest of i.i.d. uniform keys, the
    # unselectable tokens pushed past every selectable one.
    keys = rng.random((batch_size, length), dtype=np.float32)       # [0, 1)
    keys += unselectable                                              # [1, 2)
    width = min(num_slots, length)
    chosen = np.argpartition(keys, width - 1, axis=1)[:, :width]      # (B, width), unordered
    # Keep the k of smallest key, then list them by position (as tf-text does).
    chosen_keys = np.take_along_axis(keys, chosen, axis=1)
    rank = np.argsort(chosen_keys, axis=1)
    chosen = np.take_along_axis(chosen, rank, axis=1)                 # by key
    slot = np.arange(width)[None, :]
    valid = slot < k[:, None]                                         # (B, width)
    positions = np.sort(np.where(valid, chosen, length), axis=1)      # by position
    positions = np.where(positions == length, 0, positions)
    if width < num_slots:
        pad = np.zeros((batch_size, num_slots - width), positions.dtype)
        positions = np.concatenate([positions, pad], axis=1)
        valid = np.concatenate([valid, pad.astype(bool)], axis=1)
    labels = np.where(valid, np.take_along_axis(ids, positions, axis=1), 0)   # (B, P)

    draw = rng.random((batch_size, num_slots), dtype=np.float32)
    random_ids = rng.integers(0, vocabulary_size, (batch_size, num_slots), dtype=np.int32)
    replacement = np.where(draw < mask_token_rate, MASK_ID,
                           np.where(draw < mask_token_rate + random_token_rate, random_ids,
                                    labels))
    token_ids = ids.copy()
    rows = np.nonzero(valid)
    token_ids[rows[0], positions[rows]] = replacement[rows]
    x = {
        "token_ids": token_ids,
        "padding_mask": np.ones_like(token_ids),
        "segment_ids": np.zeros_like(token_ids),
        "mask_positions": positions.astype(np.int32),
    }
    return x, labels.astype(np.int32), valid.astype(np.float32)


def check_mask_rates(mask_rate, mask_token_rate, random_token_rate):
    for name, rate in [("mask_rate", mask_rate), ("mask_token_rate", mask_token_rate),
                       ("random_token_rate", random_token_rate)]:
        check_rate(name, rate)
    if mask_token_rate + random_token_rate > 1:
        raise ValueError(
            "`mask_token_rate + random_token_rate` must be <= 1. Received: "
            f"mask_token_rate={mask_token_rate}, random_token_rate={random_token_rate}")
