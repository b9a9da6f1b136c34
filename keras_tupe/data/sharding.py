"""Corpus -> token-id shards, on a machine with TensorFlow (`keras-tupe-shard-corpus`).

The sequences of `packed_sequences`, in corpus order: the token stream of `mlm_dataset`
before its shuffle, which `keras_tupe.data.shards` reads back with NumPy only.
"""

import sys

import numpy as np

from keras_tupe.data import shards
from keras_tupe.data.pretraining import packed_sequences
from keras_tupe.data.vocabulary import load_tokenizer
from keras_tupe.provenance import versions
from keras_tupe_base.checks import check_int
from keras_tupe_base.corpus_files import Stream

# Sequences tokenized and written at a time: bounds the memory of the writer.
_WRITE_BATCH = 4096


def shard_corpus(source, vocabulary_file, out, sequence_length, sequences_per_shard=100_000,
                 lowercase=True, max_lines=None, overwrite=False, command=None):
    """Tokenizes and packs a corpus into a shard folder. Returns its manifest (a dict).

    Args:
        source: a corpus, as for `line_dataset` (a path, a list of paths, `tfds:NAME`, an
            opened pipe: this reads a corpus once).
        vocabulary_file: a WordPiece vocabulary of `train_vocabulary`.
        out: the shard folder to create; written as `<out>.partial`, then renamed.
        sequence_length: int >= 8. `L` of every sequence.
        sequences_per_shard: int >= 1. Rows of each `.npy` file. Defaults to
            `100_000` (25.6 MB of uint16 at `L=128`).
        lowercase: bool. As the vocabulary was trained. Defaults to `True`.
        max_lines: int or None. Read at most this many lines of the corpus.
        overwrite: bool. Replace a non-empty `out`. Defaults to `False`.
        command: str or None. Recorded in the manifest; defaults to `sys.argv`.

    Raises:
        FileExistsError: `out` is not empty and `overwrite` is false.
        FileNotFoundError, ValueError: a missing or empty corpus or vocabulary, a
            stream's line that is not UTF-8 or has no end (`Stream.check`).
    """
    check_int("sequences_per_shard", sequences_per_shard, 1)
    tokenizer = load_tokenizer(vocabulary_file, lowercase=lowercase)
    sequences = packed_sequences(source, tokenizer, sequence_length, max_lines=max_lines)
    sources = source if isinstance(source, (list, tuple)) else [source]
    batches = _checked(sequences.batch(_WRITE_BATCH).as_numpy_iterator(),
                       [item for item in sources if isinstance(item, Stream)])
    return shards.write_shard_folder(
        out, batches, vocabulary_file, lowercase, sequence_length, sequences_per_shard,
        overwrite=overwrite,
        command=command if command is not None else " ".join(sys.argv),
        corpus=[str(path) for path in sources], max_lines=max_lines, versions=versions())


def _checked(batches, streams):
    """The batches as arrays; at their end, a stream's refusal (before the folder is written)."""
    for batch in batches:
        yield np.asarray(batch)
    for stream in streams:
        stream.check()
