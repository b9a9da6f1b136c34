"""The order of a task's examples, batch by batch, for both engines: `fit`'s loaders
(`keras_tupe.finetuning.batches`) and a grid's members (`keras_tupe.grid.GridTrainer`)
take the same batches from the same seed.
"""

import numpy as np


def epoch_rows(count, batch_size, seed, epochs, shuffle=True):
    """The example rows of every batch, `(epochs * per_epoch, batch_size)`, and their
    weights: what `keras_tupe.finetuning.batches` feeds `fit` (`epoch_order`, then
    `filled_batch`) and a grid's members train on (`keras_tupe.grid`)."""
    per_epoch = -(-count // batch_size)
    rows, weights = zip(*(
        filled_batch(epoch_order(count, seed, epoch, shuffle)[
            step * batch_size:(step + 1) * batch_size], batch_size)
        for epoch in range(epochs) for step in range(per_epoch)))
    return np.stack(rows).astype(np.int32), np.stack(weights)


def members_rows(count, batch_size, seeds, epochs):
    """Each seed's `epoch_rows`, side by side: `(rows, weights)`, each `(steps, len(seeds),
    batch_size)`, the batches of a grid whose members each take their seed's order."""
    orders = [epoch_rows(count, batch_size, seed, epochs) for seed in seeds]
    return tuple(np.stack(parts, axis=1) for parts in zip(*orders))


def epoch_order(count, seed, epoch, shuffle=True):
    """The examples of one epoch in order: a fresh permutation from `(seed, epoch)`."""
    if not shuffle:
        return np.arange(count)
    return np.random.default_rng([seed, epoch]).permutation(count)


def filled_batch(rows, batch_size):
    """`rows` (at most `batch_size`) completed with copies of its first rows, and their
    weights: `batch_size / n` on the `n` real rows, 0 on the copies (a mean over the
    batch is then the mean over the real rows; every batch has one shape)."""
    n = len(rows)
    weights = np.where(np.arange(batch_size) < n, np.float32(batch_size / n), np.float32(0.0))
    return rows[np.arange(batch_size) % n], weights
