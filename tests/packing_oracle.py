"""An oracle of BERT packing for the GLUE tests, apart from the task's preprocessor.

`pack_texts` is `keras_tupe.data.packing.pack_segments` (which tests/data/test_packing.py holds
equal to keras-hub's `MultiSegmentPacker`) on a WordPiece tokenizer's ragged ids;
`packed_batches` packs the raw-sentence batches of `keras_tupe.finetuning.batches` with it.
The task's `TupeTextClassifierPreprocessor` packs with keras-hub's packer layer instead, so
the two routes check each other.
"""

import numpy as np
import tensorflow as tf

from keras_tupe.data.packing import pack_segments, ragged_ids, special_ids
from keras_tupe.finetuning.batches import batches


def pack_texts(tokenizer, sequence_length, first, second=None):
    """`[CLS] first [SEP] (second [SEP])` of strings (a list, a 1-D tensor or one string):
    int32 `token_ids`, `padding_mask`, `segment_ids` `(B, L)` (`(L,)` for one string)."""
    texts = [tf.convert_to_tensor(text, tf.string) for text in (first, second) if text is not None]
    unbatched = texts[0].shape.rank == 0
    segments = [ragged_ids(tokenizer(text[tf.newaxis] if unbatched else text)) for text in texts]
    outputs = pack_segments(segments, sequence_length, *special_ids(tokenizer))
    return {key: value[0] for key, value in outputs.items()} if unbatched else outputs


def packed_batches(examples, tokenizer, sequence_length, batch_size, shuffle=False, seed=0,
                   fill_last_batch=False, pad_multiple=None):
    """The `GlueExamples` as `batches` gives them on tf.data, each packed by `pack_texts`
    and, with `pad_multiple`, cut after its longest example rounded up to that multiple."""
    pair = examples.sentence2 is not None
    texts = (examples.sentence1, examples.sentence2) if pair else examples.sentence1
    labels = np.asarray(examples.labels,
                        np.float32 if examples.labels.dtype.kind == "f" else np.int32)
    dataset, _ = batches(texts, labels, batch_size, shuffle=shuffle, seed=seed,
                         fill_last_batch=fill_last_batch, loader="tf.data")

    def pack(x, *rest):
        x = pack_texts(tokenizer, sequence_length, *(x if pair else (x,)))
        if pad_multiple is not None:
            longest = tf.reduce_max(tf.reduce_sum(x["padding_mask"], axis=1))
            length = tf.minimum(sequence_length, -(-longest // pad_multiple) * pad_multiple)
            x = {name: value[:, :length] for name, value in x.items()}
        return (x, *rest)

    return dataset.map(pack, deterministic=True)
