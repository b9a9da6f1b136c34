"""The engines that train a fine-tuning task's runs: an argument of the task's one function
(`train_glue`, `train_squad`), not a second copy of it.

- `FIT`: Keras's `model.fit`, a run at a time, on tf.data or Grain (`config.data_loader`);
  any backend. The engine of one run. Under JAX, across the processes JAX joined
  (`keras_tupe.processes`), each run is data-parallel over every process's devices.
- `Grid(precision, steps_per_dispatch, inits)`: every run at once, in one compiled program
  (`keras_tupe.grid.GridTrainer`, JAX).

A run is a *member*, `(seed, learning_rate)`. Either engine builds a member with
`build(seed)` (or `build(seed, init)` for a grid of several encoders) after
`keras.utils.set_random_seed(seed)`, trains it on the task's inputs, prepared once by the
data side, and predicts each evaluation split; `train(config, build, data, members)`
returns a `Trained` a member, which the task evaluates and records in its one way. What
an engine reads of `data` (a task's `GlueData` or `SquadData`):

- `source`: `(x, y)`, the packed train inputs and labels; `orders(seeds, batch_size)`:
  each seed's batches, `(rows, weights)`, `(steps, K, batch)`; `fit_batches(seed,
  batch_size, loader)`: the same seed's batches for `fit`, `(dataset, steps_per_epoch)`;
- `evaluated`: `{split: x}`, the packed inputs of each evaluation split;
- `task` (its name), `epochs`, `train_length` (the packed train length) and `head` (the
  task model of a backbone, for `check_grid_memory`'s parameter count).
"""

import contextlib
import dataclasses
import time
from contextlib import nullcontext
from typing import NamedTuple

import keras
import numpy as np

from keras_tupe.finetuning.batches import batches, resolve_loader
from keras_tupe.finetuning.loading import encoder_config
from keras_tupe.grid import GridTrainer, Schedule, check_backend, check_grid_memory
from keras_tupe.optimization import create_optimizer
from keras_tupe.callbacks import StepProgress
from keras_tupe.processes import current
from keras_tupe_base.progress import Heartbeat

# What a grid's K is the product of (`--learning-rates` x `--seeds` in a command's words).
GRID_MEMBERS = "a learning rate and a seed each: `learning_rates=` x `seeds=`"


class Trained(NamedTuple):
    """What an engine gives back of a member: its `outputs` on each evaluation split
    (`{split: outputs}`, a task's `predict` outputs), the seconds it trained, its data
    `loader`, what only this engine records (`engine`) and its `model` (the `fit`
    engine's, trained; None from a grid)."""

    outputs: dict
    seconds: float
    loader: str
    engine: dict
    model: object = None


class Fit:
    """Keras's `model.fit`, a member at a time, on `config.data_loader` (tf.data or Grain;
    `resolve_loader`). Any backend.

    Across processes (JAX, after `keras_tupe.processes.join`): every process calls it
    alike; a member trains under `keras.distribution.DataParallel` over every process's
    devices, each process feeding its rows of every global batch (`fit_batches`'s
    `part`), so the run is the one-device run of the same global batch; then each
    process evaluates its own copy of the trained weights (replicated: each holds them
    whole)."""

    name = "fit"

    def check(self, config, members):
        """Refuses, before anything is read, a loader that cannot run here and a `save_dir`
        for more than one member."""
        resolve_loader(config.data_loader)
        if config.save_dir and len(members) > 1:
            raise ValueError(f"save_dir keeps one run's model; received {len(members)} "
                             "members.")
        check_global_batch(config.batch_size)

    def train(self, config, build, data, members, talk=False):
        """Each member trained by `fit_task` on `data.fit_batches`, then its outputs on
        each of `data.evaluated`; progress lines of our own when `talk`."""
        loader, processes = resolve_loader(config.data_loader), current()
        talk = talk and processes.writer  # one process talks
        trained = []
        for seed, rate in members:
            run = dataclasses.replace(config, seed=seed, learning_rate=rate,
                                      verbose=config.verbose if processes.writer else 0)
            keras.utils.set_random_seed(seed)
            with data_parallel(processes):
                model = build(seed)
                train, steps_per_epoch = data.fit_batches(seed, run.batch_size, loader,
                                                          processes.part)
                seconds, epoch_seconds = fit_task(model, train, run, data.epochs,
                                                  steps_per_epoch, talk)
            if processes.count > 1:  # this process's copy: no collective from here on
                weights = model.get_weights()
                keras.utils.set_random_seed(seed)
                model = build(seed)
                model.set_weights(weights)
            outputs = {split: _predict(model, x, run.batch_size, loader,
                                       f"{data.task} on {split}" if talk else None)
                       for split, x in data.evaluated.items()}
            trained.append(Trained(outputs, seconds, loader, {"epoch_seconds": epoch_seconds},
                                   model))
        return trained


FIT = Fit()


def check_global_batch(batch_size):
    """Across processes, refuses a batch size that their devices do not divide."""
    processes = current()
    if processes.count == 1:
        return
    devices = len(keras.distribution.list_devices())
    if batch_size % devices:
        raise ValueError(f"--batch-size {batch_size} (the global batch) must be a multiple of "
                         f"the {devices} devices of the {processes.count} processes, so each "
                         f"gets the same share: e.g. {max(devices, batch_size // devices * devices)}"
                         ".")


@contextlib.contextmanager
def data_parallel(processes):
    """Across processes, `keras.distribution.DataParallel` over every process's devices
    meanwhile, each process feeding its own rows (no dataset sharding of Keras's);
    otherwise nothing."""
    if processes.count == 1:
        yield
        return
    before = keras.distribution.distribution()
    keras.distribution.set_distribution(keras.distribution.DataParallel(
        devices=keras.distribution.list_devices(), auto_shard_dataset=False))
    try:
        yield
    finally:
        keras.distribution.set_distribution(before)


def _predict(model, x, batch_size, loader, talk):
    """`model`'s outputs on every example of `x` (batches of one shape, the last one filled
    and its copies dropped); a line and a heartbeat naming `talk` when given."""
    count = len(next(iter(x.values())))
    dataset, _ = batches(x, None, batch_size, fill_last_batch=True, loader=loader)
    if talk:
        print(f"Evaluating {talk} ({count:,} examples) ...", flush=True)
    with Heartbeat(f"  evaluating {talk}") if talk else nullcontext():
        outputs = model.predict(dataset, verbose=0)
    return keras.tree.map_structure(lambda output: output[:count], outputs)


def fit_task(model, train, config, epochs, steps_per_epoch, progress):
    """Compiles `model` with `create_optimizer` (warm-up over `config.warmup_ratio` of the
    steps, then linear decay) and fits it on `train`, with `StepProgress` lines when
    `progress`, else Keras's at `config.verbose`. Returns the seconds `fit` took and the
    seconds of each epoch (the first holds the compilations; the last shows the pace)."""
    steps = epochs * steps_per_epoch
    build_preprocessor(model)
    model.compile(optimizer=create_optimizer(model, config.learning_rate, total_steps=steps,
                                             warmup_steps=int(config.warmup_ratio * steps),
                                             weight_decay=config.weight_decay),
                  jit_compile=config.xla, steps_per_execution=config.steps_per_execution)
    ends = []
    callbacks = [StepProgress(steps, steps_per_epoch)] if progress else []
    start = time.perf_counter()
    try:
        model.fit(train, epochs=epochs, steps_per_epoch=steps_per_epoch, shuffle=False,
                  verbose=0 if progress else config.verbose, callbacks=callbacks + [
                      keras.callbacks.LambdaCallback(
                          on_epoch_end=lambda epoch, logs: ends.append(time.perf_counter()))])
    finally:
        for callback in callbacks:
            callback.close()  # its heartbeat thread, when fit raised
    return time.perf_counter() - start, np.diff([start, *ends]).round(3).tolist()


def build_preprocessor(model):
    """Builds `model`'s preprocessor here, once, if it is not: keras-hub builds it at its
    first call, which Grain's threads can make at once (one then finds the other's
    half-built packer: `'NoneType' object is not callable`)."""
    if model.preprocessor is not None and not model.preprocessor.built:
        model.preprocessor.build(None)


@dataclasses.dataclass(frozen=True)
class Grid:
    """Every member at once, in one compiled program (`keras_tupe.grid.GridTrainer`, JAX):
    the task at one length (one shape, one compile), the schedule stepped on the device,
    each member's batches `data.orders`'s. `inits`: one encoder a member (of one
    architecture and the config's vocabulary), built as `build(seed, init)`; None:
    `config.init` for every member."""

    precision: str = "float32"
    steps_per_dispatch: int = 100
    inits: list = None
    name = "grid"

    def check(self, config, members):
        """Refuses, before anything is read, another backend than JAX and a `save_dir`."""
        check_backend()
        if config.save_dir:
            raise ValueError("A grid keeps no model: leave save_dir out, or train that run "
                             "alone (the fit engine).")

    def trainer(self, config, build, data, members, steps):
        """The `GridTrainer` of `members` for `steps` steps, its memory checked first
        (`check_grid_memory`, from the encoder's configuration)."""
        check_grid_memory(encoder_config(config.init), len(members), config.batch_size,
                          data.train_length, self.precision, task=data.head,
                          members_are=GRID_MEMBERS + (" x encoders" if self.inits else ""))
        return GridTrainer(build, [seed for seed, _ in members], [rate for _, rate in members],
                           Schedule(steps, int(config.warmup_ratio * steps),
                                    config.weight_decay),
                           precision=self.precision, steps_per_dispatch=self.steps_per_dispatch,
                           inits=self.inits)

    def train(self, config, build, data, members, talk=False):
        """The members trained on `data.source` in their `data.orders`, then every member's
        outputs on each of `data.evaluated`."""
        rows, weights = data.orders([seed for seed, _ in members], config.batch_size)
        trainer = self.trainer(config, build, data, members, len(rows))
        start = time.perf_counter()
        trainer.fit(data.source, rows, weights)
        seconds = time.perf_counter() - start
        outputs = {split: trainer.predict(x, config.batch_size)
                   for split, x in data.evaluated.items()}
        engine = {"grid_members": len(members), "grid_compiles": trainer.compiles,
                  "precision": self.precision}
        return [Trained({split: keras.tree.map_structure(lambda output: output[index], found)
                         for split, found in outputs.items()}, seconds, "grid", engine)
                for index in range(len(members))]
