"""Batches for a task's `fit` and `predict`: tf.data where TensorFlow is, Grain where not.

The task's own preprocessor packs the examples: each batch inside keras-hub's `predict`
(traced into tf.data, or on keras-hub's pure-Python path with Grain), or a whole split
once before `fit` (`packed`), as keras-hub advises for speed. Both loaders give the same
examples in batches of `batch_size`, a fresh seeded permutation every epoch, but they
shuffle differently: a seed's run is the same run only on the same loader.
"""

import functools

import numpy as np

from keras_tupe.data.order import epoch_order, filled_batch
from keras_tupe.models.tupe_text_classifier_preprocessor import trim_packed
from keras_tupe_base.checks import check_int
from keras_tupe_base.settings import LOADERS


@functools.cache
def tensorflow_available():
    try:
        import tensorflow  # noqa: F401  (optional: Grain stands in where it is absent)
    except ImportError:
        return False
    return True


def resolve_loader(loader=None):
    """`loader`, or with None the default: "tf.data" where TensorFlow imports, else "grain"."""
    if loader is None:
        return "tf.data" if tensorflow_available() else "grain"
    if loader not in LOADERS:
        raise ValueError(f"Unknown data loader {loader!r}. Valid loaders: {', '.join(LOADERS)} "
                         "(or None: tf.data where TensorFlow imports, else grain).")
    if loader == "tf.data" and not tensorflow_available():
        raise ValueError("The tf.data loader needs TensorFlow, which does not import here; "
                         "use the grain loader (`pip install grain`).")
    if loader == "grain":
        try:
            import grain  # noqa: F401  (optional: the `jax` extra installs it)
        except ImportError as error:
            raise ValueError("The grain loader needs Grain: `pip install grain` (keras-tupe's "
                             "`jax` extra installs it).") from error
    return loader


def packed(preprocessor, x, chunk=1024):
    """`preprocessor`'s packed inputs for every example of `x`, as NumPy arrays.

    A split tokenized and packed once, `chunk` examples a call, for `fit` to train on
    with the task's preprocessor set aside: on keras-hub's pure-Python path (no
    TensorFlow) packing a batch of 32 costs more host time than a small encoder's step on
    a GPU, every step of every epoch.
    """
    count = _count(x)
    # `(x, None)`: a pair alone would read as `(x, y)`.
    parts = [preprocessor(_map(x, lambda leaf: _array(leaf)[start:start + chunk]), None)
             for start in range(0, count, chunk)]
    return {name: np.concatenate([np.asarray(part[name]) for part in parts])
            for name in parts[0]}


def batches(x, y=None, batch_size=32, shuffle=False, seed=0, fill_last_batch=False, epochs=1,
            loader=None, trim_to_multiple_of=None, part=(0, 1)):
    """`(x, y)` batches of `x` for a keras-hub task, on tf.data or Grain.

    Args:
        x: the examples, first axis = examples: a list (or array) of strings, a tuple of
            two such lists (sentence pairs), or a dict of arrays (packed inputs).
        y: the labels: an array, a dict of arrays, or None (prediction).
        batch_size: int >= 1.
        shuffle: bool. A new permutation of the examples every epoch, from `seed`.
            Defaults to `False` (the given order).
        seed: int. Defaults to `0`.
        fill_last_batch: bool. Complete the last, smaller batch to `batch_size` rows
            with copies of its first rows, and add a `sample_weight`: `batch_size / n`
            on its `n` real rows, 0 on the copies (1 everywhere in a full batch). The
            loss reduced over the batch is then the mean over the real rows, weighted
            metrics count only them, and every batch has one shape: one compiled step.
            For prediction keep the first `len(x)` outputs. Defaults to `False`.
        epochs: int. The passes Keras will make (Grain's dataset holds them all, each
            its own permutation; tf.data reshuffles as it repeats).
        loader: "tf.data", "grain" or None (`resolve_loader`).
        trim_to_multiple_of: int or None. With packed `x` (a dict holding
            `padding_mask`): cut each batch after its longest example, rounded up to
            a multiple of this, as `TupeTextClassifierPreprocessor(pad_to_multiple_of=)`
            cuts the batches it packs. Defaults to `None`: no cut.
        part: `(index, count)`: of every batch (filled, then cut), only rows
            `index * batch_size / count` up to `(index + 1) * batch_size / count`, the
            rows process `index` of `count` feeds a run across processes
            (`keras_tupe.processes`); needs `fill_last_batch` and `count` dividing
            `batch_size`. Defaults to `(0, 1)`: every row.

    Returns:
        `(dataset, steps_per_epoch)`: a `tf.data.Dataset` or a `grain.MapDataset` of
        `(x, y)` or `(x, y, sample_weight)` batches (`(x,)` without `y`), and the
        batches in one epoch.
    """
    check_int("batch_size", batch_size, 1)
    count = _count(x)
    if not count:
        raise ValueError("No examples to batch.")
    steps = -(-count // batch_size)
    if trim_to_multiple_of is not None:
        check_int("trim_to_multiple_of", trim_to_multiple_of, 1)
        if not isinstance(x, dict) or "padding_mask" not in x:
            raise ValueError("`trim_to_multiple_of` cuts packed inputs: `x` must be a dict "
                             f"holding `padding_mask`. Received: {type(x).__name__}"
                             + (f" with {sorted(x)}" if isinstance(x, dict) else ""))
    rows = _part_rows(part, batch_size, fill_last_batch)
    if resolve_loader(loader) == "tf.data":
        dataset = _tf_batches(x, y, count, batch_size, shuffle, seed, fill_last_batch)
        import tensorflow as tf  # optional: only the tf.data loader needs it

        if trim_to_multiple_of is not None:
            dataset = dataset.map(
                lambda x, *rest: (trim_packed(x, trim_to_multiple_of, tf), *rest))
        if rows is not None:
            dataset = dataset.map(lambda *element: tuple(
                tf.nest.map_structure(lambda tensor: tensor[rows], nest) for nest in element))
        return dataset, steps
    import grain  # optional: only the grain loader needs it

    source = _Batches(x, y, count, batch_size, shuffle, seed, fill_last_batch, epochs,
                      trim_to_multiple_of, rows)
    return grain.MapDataset.source(source), steps


def _part_rows(part, batch_size, fill_last_batch):
    """The slice of each batch's rows that `part`, `(index, count)`, takes (None: all)."""
    index, count = part
    if count == 1:
        return None
    if not fill_last_batch or batch_size % count or not 0 <= index < count:
        raise ValueError(f"part {part!r}: each of {count} processes feeds an equal share of "
                         f"every batch, so the batch size ({batch_size}) must be a multiple "
                         f"of {count} and the last batch filled (fill_last_batch=True).")
    share = batch_size // count
    return slice(index * share, (index + 1) * share)


def _count(x):
    if isinstance(x, dict):
        return len(next(iter(x.values())))
    if isinstance(x, tuple):
        return len(x[0])
    return len(x)


def _map(nest, fn):
    if isinstance(nest, tuple):
        return tuple(fn(leaf) for leaf in nest)
    if isinstance(nest, dict):
        return {name: fn(leaf) for name, leaf in nest.items()}
    return fn(nest)


def _element(x, y, sample_weight=None):
    if y is None:
        return (x,)  # a 1-tuple: a pair `(a, b)` alone would read as `(x, y)`
    return (x, y) if sample_weight is None else (x, y, sample_weight)


def _tf_batches(x, y, count, batch_size, shuffle, seed, fill_last_batch):
    import tensorflow as tf  # optional: only the tf.data loader needs it

    def tensor(leaf):
        if isinstance(leaf, (list, tuple)) or getattr(leaf, "dtype", None) == object:
            return tf.constant(list(leaf), tf.string, shape=[count])
        return tf.convert_to_tensor(leaf)

    x = _map(x, tensor)
    dataset = tf.data.Dataset.from_tensor_slices(_element(x, None if y is None else _map(y, tensor)))
    if shuffle:
        dataset = dataset.shuffle(count, seed=seed, reshuffle_each_iteration=True)
    dataset = dataset.batch(batch_size)
    if not fill_last_batch:
        return dataset

    def fill(*element):
        x, y = element[0], element[1] if len(element) > 1 else None
        n = tf.shape(tf.nest.flatten(x)[0])[0]
        rows = tf.range(batch_size) % n  # the real rows, then copies of the first ones
        weight = tf.cast(batch_size, tf.float32) / tf.cast(n, tf.float32)
        sample_weight = tf.where(tf.range(batch_size) < n, weight, 0.0)
        x, y = (None if nest is None else tf.nest.map_structure(lambda t: tf.gather(t, rows), nest)
                for nest in (x, y))
        return _element(x, y if y is not None else tf.zeros([batch_size]), sample_weight)

    return dataset.map(fill)


class _Batches:
    """A Grain source: batch `i` is batch `i % per_epoch` of epoch `i // per_epoch`."""

    def __init__(self, x, y, count, batch_size, shuffle, seed, fill_last_batch, epochs,
                 trim_to_multiple_of=None, part_rows=None):
        self.x = _map(x, _array)
        self.y = None if y is None else _map(y, _array)
        self.count, self.batch_size, self.shuffle, self.seed = count, batch_size, shuffle, seed
        self.fill_last_batch = fill_last_batch
        self.per_epoch = -(-count // batch_size)
        self.epochs = epochs
        self.trim_to_multiple_of = trim_to_multiple_of
        self.part_rows = part_rows

    def __len__(self):
        return self.per_epoch * self.epochs

    @functools.lru_cache(maxsize=4)
    def _order(self, epoch):
        return epoch_order(self.count, self.seed, epoch, self.shuffle)

    def __getitem__(self, index):
        epoch, step = divmod(index, self.per_epoch)
        rows = self._order(epoch)[step * self.batch_size:(step + 1) * self.batch_size]
        sample_weight = None
        if self.fill_last_batch:
            rows, sample_weight = filled_batch(rows, self.batch_size)
        x = _map(self.x, lambda leaf: leaf[rows])
        if self.trim_to_multiple_of is not None:
            x = trim_packed(x, self.trim_to_multiple_of)
        y = None if self.y is None else _map(self.y, lambda leaf: leaf[rows])
        if y is None and sample_weight is not None:
            y = np.zeros(self.batch_size, np.float32)
        element = _element(x, y, sample_weight)
        if self.part_rows is None:
            return element
        return tuple(_map(nest, lambda leaf: leaf[self.part_rows]) for nest in element)


def _array(leaf):
    if isinstance(leaf, (list, tuple)):
        return np.asarray(leaf, dtype=object)  # strings: Grain hands them to the Python path
    return np.asarray(leaf)
