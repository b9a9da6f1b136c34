"""Token-id shards: the TensorFlow-free pre-training input.

A shard folder holds packed sequences (`[CLS] + chunk`, as `packed_sequences` makes
them) in `shard_00000.npy`, ... (uint16 while the vocabulary fits, else int32), the
vocabulary (`vocab.txt`) and `manifest.json` (format, vocabulary sha256, sequence
length, counts, command, versions). `keras_tupe.data.sharding` writes one with
TensorFlow (`keras-tupe-shard-corpus`); this module reads it with NumPy only:

    batches = MaskedLMShards("shards/", batch_size=256, seed=0)
    x, y, sample_weight = batches[0]          # the structure of `mlm_dataset`
    # Keras's fit: keras-hub's `Task.fit` has no case for a `PyDataset`.
    keras.Model.fit(masked_lm, batches, steps_per_epoch=1000, epochs=10)
"""

import concurrent.futures
import io
import os
import shutil
import threading

import keras
import numpy as np

from keras_tupe.data.masking import SPECIAL_TOKENS, check_mask_rates, mask_batch
from keras_tupe.models.tupe_masked_lm_preprocessor import mask_selection_length
from keras_tupe_base.checks import check_int
from keras_tupe_base.files import file_sha256
from keras_tupe_base.folders import made_folder
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.shard_folders import (FORMAT_VERSION, MANIFEST, VOCABULARY, ShardError,
                                           read_manifest)
from keras_tupe_base.staging import WriteError, staged, write_bytes, write_json

UINT16_VOCABULARY_LIMIT = 2**16


def shard_name(index):
    """The file name of shard `index`: `shard_00000.npy`, ..."""
    return f"shard_{index:05d}.npy"


def shard_dtype(vocabulary_size):
    """uint16 while every id fits (vocabulary_size <= 65536), else int32."""
    return np.uint16 if vocabulary_size <= UINT16_VOCABULARY_LIMIT else np.int32


def write_shard_folder(out, batches, vocabulary_file, lowercase, sequence_length,
                       sequences_per_shard, overwrite=False, **record):
    """Writes sequences as a shard folder, staged and renamed once whole, under `out`'s
    lock. Returns the manifest.

    Args:
        out: the folder to create. A non-empty one is refused unless `overwrite`.
        batches: an iterable of integer arrays of shape `(n, sequence_length)`,
            the sequences in order (any `n`).
        vocabulary_file: the vocabulary the ids refer to; copied into the folder.
        lowercase: bool. Whether the tokenizer lowercased (recorded).
        sequence_length: int. `L`.
        sequences_per_shard: int >= 1. Rows of each shard (the last may have fewer).
        overwrite: bool. Replace a non-empty `out`. Defaults to `False`.
        **record: more fields for the manifest (the command, corpus names, versions).

    Raises:
        FileExistsError: `out` is not empty and `overwrite` is false.
        ValueError: a batch has the wrong length or an id outside the vocabulary.
        keras_tupe_base.staging.WriteError: no room, a file-size limit, a read-only folder;
            nothing is written and an existing `out` is as it was.
    """
    out = os.path.normpath(out)
    if os.path.isdir(out) and os.listdir(out) and not overwrite:
        raise FileExistsError(f"--out {out} is not empty; refusing to write into it. Choose "
                              "another --out, or pass --overwrite to replace it.")
    kept = f"Kept: {out} as it was" if os.path.exists(out) else "Nothing was kept"
    try:
        return _write_shard_folder(out, batches, vocabulary_file, lowercase, sequence_length,
                                   sequences_per_shard, record)
    except WriteError as error:
        raise error.with_note(
            f"{kept} (a shard folder is written whole or not at all); free some space, or "
            "raise the file-size limit (ulimit -f), and run the same command again.") from None


def _write_shard_folder(out, batches, vocabulary_file, lowercase, sequence_length,
                        sequences_per_shard, record):
    """`write_shard_folder` of an `out` it may write."""
    with open(vocabulary_file, encoding="utf-8") as f:
        vocabulary_size = sum(1 for _ in f)  # a token a line, as keras-hub reads it
    dtype = shard_dtype(vocabulary_size)
    # One writer per folder; staged as `<out>.partial` and renamed when whole (an old `out`
    # is replaced only then); an interruption (Ctrl-C, SIGTERM, a full disk, an error)
    # leaves no staging folder, nor the parents this call created.
    with output_lock(out, command="shard_corpus", flag="`out=`"), \
            made_folder(os.path.dirname(os.path.abspath(out))), \
            staged(out, folder=True) as staging:
        shards, pending, num_pending = [], [], 0

        def flush(rows):
            block = np.concatenate(pending)
            # Saved to memory, then written: numpy's own file writes report a full disk
            # or a file-size limit without the errno ("N requested and M written").
            npy = io.BytesIO()
            np.save(npy, block[:rows].astype(dtype))
            write_bytes(os.path.join(staging, shard_name(len(shards))), npy.getbuffer())
            shards.append({"file": shard_name(len(shards)), "sequences": rows})
            return [block[rows:]] if rows < len(block) else []

        for batch in batches:
            batch = np.asarray(batch)
            if batch.ndim != 2 or batch.shape[1] != sequence_length:
                raise ValueError(f"Expected sequences of shape (n, {sequence_length}). "
                                 f"Received: shape={batch.shape}")
            if batch.size and (batch.min() < 0 or batch.max() >= vocabulary_size):
                raise ValueError(f"Ids must lie in [0, {vocabulary_size}). Received: "
                                 f"[{batch.min()}, {batch.max()}]")
            pending.append(batch)
            num_pending += len(batch)
            while num_pending >= sequences_per_shard:
                pending = flush(sequences_per_shard)
                num_pending -= sequences_per_shard
        if num_pending:
            flush(num_pending)
        if not shards:
            raise ValueError("No sequence to write: the corpus is shorter than one sequence of "
                             f"{sequence_length} tokens.")
        shutil.copyfile(vocabulary_file, os.path.join(staging, VOCABULARY))
        num_sequences = sum(entry["sequences"] for entry in shards)
        manifest = {
            "format_version": FORMAT_VERSION,
            "vocabulary_sha256": file_sha256(vocabulary_file),
            "vocabulary_size": vocabulary_size,
            "special_tokens": SPECIAL_TOKENS,
            "lowercase": lowercase,
            "sequence_length": sequence_length,
            "dtype": np.dtype(dtype).name,
            "sequences_per_shard": sequences_per_shard,
            "num_sequences": num_sequences,
            "num_tokens": num_sequences * sequence_length,
            "shards": shards,
            **record,
        }
        write_json(os.path.join(staging, MANIFEST), manifest, sync=False)
    return manifest


class ShardSequences:
    """The sequences of a shard folder, memory-mapped: `len()` and `gather(indices)`."""

    def __init__(self, directory, flag="--shards"):
        self.directory = directory
        self.manifest = read_manifest(directory, flag)
        self.sequence_length = self.manifest["sequence_length"]
        self.vocabulary_size = self.manifest["vocabulary_size"]
        self.arrays = []
        for entry in self.manifest["shards"]:
            path = os.path.join(directory, entry["file"])
            array = np.load(path, mmap_mode="r")  # reads the header only
            if array.shape != (entry["sequences"], self.sequence_length):
                raise ShardError(
                    f"{flag}: {path} holds an array of shape {array.shape}, where {MANIFEST} "
                    f"says ({entry['sequences']}, {self.sequence_length}). Re-make the shards.")
            self.arrays.append(array)
        # Global index -> (shard, row) through the first index of each shard.
        self.starts = np.cumsum([0] + [len(array) for array in self.arrays])

    def __len__(self):
        return int(self.starts[-1])

    def gather(self, indices):
        """The sequences at `indices` (any order), as int32 `(len(indices), L)`."""
        indices = np.asarray(indices, dtype=np.int64)
        shard = np.searchsorted(self.starts, indices, side="right") - 1
        out = np.empty((len(indices), self.sequence_length), np.int32)
        for s in np.unique(shard):
            rows = shard == s
            # Sorted reads of a memory map touch each page once.
            local = indices[rows] - self.starts[s]
            order = np.argsort(local)
            block = np.empty((len(local), self.sequence_length), np.int32)
            block[order] = self.arrays[s][local[order]]
            out[rows] = block
        return out


class MaskedLMShards(keras.utils.PyDataset):
    """Masked-LM batches from a shard folder, for `model.fit` on any backend.

    The NumPy counterpart of `mlm_dataset`: the same structure, masking rule and
    rates (not tf-text's random numbers). Batch `i` is a pure function of `(seed,
    start_batch + i)`: its sequences come from a seeded permutation of all sequences
    for each pass (passes follow one another, so a batch may span two), its masks
    from a generator seeded with `(seed, batch)`; a resumed run seeks (`start_batch`).

    Args:
        directory: a shard folder (see the module docstring).
        batch_size: int >= 1. `B`.
        seed: int >= 0. Seeds the permutations and the masks. Defaults to `0`.
        mask_rate, mask_token_rate, random_token_rate: floats, as for `mlm_dataset`.
        shuffle: bool. Permute the sequences each pass. Defaults to `True`.
        repeat: bool. Infinite (`num_batches` is `None`); otherwise one pass,
            the last partial batch dropped. Defaults to `True`.
        start_batch: int >= 0. The stream's batch that index 0 returns. Defaults to `0`.
        max_batches: int or None. With `repeat=False`, at most this many batches.
        threads: int >= 0. Threads computing the next batches meanwhile (NumPy releases
            the GIL); `0`: in `__getitem__`. The same batches either way. Defaults to
            `min(4, os.cpu_count())`.
        flag: str. The command-line flag named in errors. Defaults to `"--shards"`.
        part: `(index, count)`. Feed rows `index*B/count .. (index+1)*B/count` of each
            batch of `B`, masked as in the whole batch: process `index` of `count`
            training together (`keras_tupe.processes`). Defaults to `(0, 1)`.
        **kwargs: `keras.utils.PyDataset` arguments. Leave `workers` at its
            default 1 (use `threads`): under `fit` with `steps_per_epoch`, Keras
            stops its worker pool at each epoch's end and drops the batches it
            had prepared, so the stream would skip batches.
    """

    def __init__(self, directory, batch_size, seed=0, mask_rate=0.15, mask_token_rate=0.8,
                 random_token_rate=0.1, shuffle=True, repeat=True, start_batch=0,
                 max_batches=None, threads=None, flag="--shards", part=(0, 1), **kwargs):
        super().__init__(**kwargs)
        for name, value, minimum in [("batch_size", batch_size, 1), ("seed", seed, 0),
                                     ("start_batch", start_batch, 0)]:
            check_int(name, value, minimum)
        index, count = part
        if batch_size % count or not 0 <= index < count:
            raise ValueError(f"A batch of {batch_size} does not split into {count} equal "
                             f"parts (part {index} of {count}): the batch size must be a "
                             "multiple of the number of processes.")
        share = batch_size // count
        self.rows = slice(index * share, (index + 1) * share)
        check_mask_rates(mask_rate, mask_token_rate, random_token_rate)
        self.sequences = ShardSequences(directory, flag)
        if len(self.sequences) < batch_size:
            raise ShardError(f"{flag} {directory} holds {len(self.sequences)} sequences, fewer "
                             f"than one batch of {batch_size}. Shard a larger corpus.")
        self.directory, self.batch_size, self.seed = directory, batch_size, seed
        self.mask_rate, self.mask_token_rate = mask_rate, mask_token_rate
        self.random_token_rate = random_token_rate
        self.shuffle, self.repeat = shuffle, repeat
        self.start_batch, self.max_batches = start_batch, max_batches
        self.num_slots = mask_selection_length(self.sequences.sequence_length, mask_rate)
        self.threads = min(4, os.cpu_count() or 1) if threads is None else threads
        self._permutations = {}
        self._lock = threading.Lock()
        self._executor = None
        self._pending = {}  # index -> Future of batches computed ahead

    @property
    def manifest(self):
        """The shard folder's manifest (a dict)."""
        return self.sequences.manifest

    @property
    def num_batches(self):
        if self.repeat:
            return None
        full = len(self.sequences) // self.batch_size - self.start_batch
        return max(0, full if self.max_batches is None else min(full, self.max_batches))

    def __len__(self):
        if self.repeat:
            raise TypeError("An infinite MaskedLMShards (repeat=True) has no length.")
        return self.num_batches

    def permutation(self, epoch):
        """The order of the sequences in pass `epoch` (the identity without shuffle)."""
        if not self.shuffle:
            return None
        with self._lock:  # threads may ask for the same pass
            if epoch not in self._permutations:
                if len(self._permutations) >= 2:  # the batches ahead span at most two passes
                    self._permutations.pop(min(self._permutations))
                rng = np.random.default_rng([self.seed, epoch, 0x5EED])
                self._permutations[epoch] = rng.permutation(len(self.sequences))
            return self._permutations[epoch]

    def sequence_indices(self, batch):
        """The indices (into the shards) of the sequences of stream batch `batch`."""
        total = len(self.sequences)
        stream = batch * self.batch_size + np.arange(self.batch_size, dtype=np.int64)
        epochs, offsets = np.divmod(stream, total)
        if not self.shuffle:
            return offsets
        indices = np.empty_like(offsets)
        for epoch in np.unique(epochs):
            here = epochs == epoch
            indices[here] = self.permutation(int(epoch))[offsets[here]]
        return indices

    def unmasked(self, index):
        """The sequences of batch `index`, before masking: int32 `(B, L)`; with a `part`,
        only its rows are read, the others are [PAD] (id 0)."""
        if self.num_batches is not None and not 0 <= index < self.num_batches:
            raise IndexError(f"Batch {index} out of range [0, {self.num_batches}).")
        indices = self.sequence_indices(self.start_batch + index)
        if self.rows == slice(0, self.batch_size):
            return self.sequences.gather(indices)
        ids = np.zeros((self.batch_size, self.sequences.sequence_length), np.int32)
        ids[self.rows] = self.sequences.gather(indices[self.rows])
        return ids

    def batch(self, index):
        """Batch `index`, computed now: `(x, y, sample_weight)`, the part's rows of it."""
        rng = np.random.default_rng([self.seed, self.start_batch + index])
        # The whole batch's random draws, then the part's rows: `mask_batch` treats each
        # row alone, from its ids and its rows of the draws, so a part is masked exactly
        # as in the whole batch (the unread rows, all [PAD], cost a few microseconds).
        x, y, weights = mask_batch(self.unmasked(index), rng, self.sequences.vocabulary_size,
                                   self.num_slots, self.mask_rate, self.mask_token_rate,
                                   self.random_token_rate)
        if self.rows == slice(0, self.batch_size):
            return x, y, weights
        return {key: value[self.rows] for key, value in x.items()}, y[self.rows], weights[self.rows]

    def masks(self, index):
        """Batch `index` as a grid trains it from the shards held whole on its device
        (`keras_tupe.grid.given_masks`): the indices of its sequences, `(B,)`, and its
        masks, `(positions, replacements, labels, weights)`, each `(B, P)`: the token id
        each slot writes at its position, the ids it hides, and the slots' weights. Applied
        to those sequences, they give `batch(index)` (the whole batch: no `part`)."""
        if self.rows != slice(0, self.batch_size):
            raise ValueError("masks gives the whole batch: build it without a part.")
        x, labels, weights = self.batch(index)
        positions = x["mask_positions"]
        replacements = np.take_along_axis(x["token_ids"], positions, axis=1)
        return (self.sequence_indices(self.start_batch + index),
                (positions, replacements, labels, weights))

    def __getitem__(self, index):
        if not self.threads:
            return self.batch(index)
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self.threads, thread_name_prefix="MaskedLMShards")
        end = index + 2 * self.threads
        if self.num_batches is not None:
            end = min(end, self.num_batches)
        for ahead in range(index, end):
            if ahead not in self._pending:
                self._pending[ahead] = self._executor.submit(self.batch, ahead)
        # Batches behind `index` or far ahead of it will not be asked for next.
        for stale in [i for i in self._pending if not index <= i < end]:
            self._pending.pop(stale).cancel()
        return self._pending.pop(index).result()

    def __getstate__(self):  # threads, locks and futures do not pickle
        state = {**self.__dict__, "_executor": None, "_pending": {}}
        state.pop("_lock")
        return state

    def __setstate__(self, state):
        self.__dict__.update(state, _lock=threading.Lock())
