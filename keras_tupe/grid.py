"""Many runs of one keras-hub task in one compiled program (JAX): `GridTrainer`.

A grid is K *members*, each a `(seed, learning_rate)`: the same task model (one
architecture), each member with its own initialization, dropout seeds, data order and
peak learning rate, under one warm-up/decay schedule. The members' weights and optimizer
variables are stacked on a leading member axis; one training step is `jax.vmap` of the
task's own loss and gradient (`model.compute_loss_and_updates`, what `fit` runs on JAX:
Keras does not document it, tests/training/test_keras_contract.py holds its signature and
result to what the grid unpacks) and the optimizer's `stateless_apply` (Keras's documented
JAX training-loop API), and
`jax.lax.scan` runs many steps a dispatch, gathering each member's batch from arrays
already on the device. A member is the run `fit` makes from the same start on the same
batches (tests/training/test_grid.py holds it to that).

Why: a small encoder's step leaves an accelerator idle between Python dispatches, and a
run per process compiles its program again; a grid compiles one program for all its runs
and dispatches once every `steps_per_dispatch` steps at most: a `fit` of any number of
steps is cut into dispatches of one length, the last one's surplus steps computed and
discarded (a scan of another length would be a second compile, 30-40 s on a GPU host).
"""

import dataclasses
import functools
import math
import os
import time
import warnings

import keras
import numpy as np

from keras_tupe.data.shards import ShardSequences
from keras_tupe.models import TupeBackbone
from keras_tupe.optimization import LinearWarmupLinearDecay, adamw
from keras_tupe.processes import Processes
from keras_tupe_base.checks import check_int, check_seed
from keras_tupe_base.settings import GRID_PRECISIONS

if keras.backend.backend() == "jax":  # JAX is optional: a grid runs on that backend alone
    import jax
    import jax.numpy as jnp
    from jax.experimental import multihost_utils

# Bytes a parameter holds in a member's training state: float32 weights, the two Adam
# moments and the gradient.
STATE_BYTES_PER_PARAMETER = 16


def check_backend():
    """Raises ValueError unless Keras runs on JAX (the grid's `vmap` and `scan`)."""
    backend = keras.backend.backend()
    if backend != "jax":
        raise ValueError(f"A grid trains on the JAX backend; this process runs Keras on "
                         f"{backend}. Set KERAS_BACKEND=jax (valid: jax) before Keras is "
                         "imported, or train the runs one by one with `fit`.")


def check_members(seeds, learning_rates):
    """The members `(seed, learning_rate)` of two equal-length lists, or one clear error."""
    seeds, learning_rates = list(seeds), list(learning_rates)
    if len(seeds) != len(learning_rates) or not seeds:
        raise ValueError(f"learning_rates must give one rate per seed (a member each): "
                         f"received {len(seeds)} seeds {seeds} and {len(learning_rates)} "
                         f"learning_rates {learning_rates}.")
    for seed in seeds:
        check_seed("seeds", seed)
    bad = [rate for rate in learning_rates
           if isinstance(rate, bool) or not isinstance(rate, (int, float)) or rate <= 0]
    if bad:
        raise ValueError(f"learning_rates must be positive numbers; received {bad}.")
    return list(zip(seeds, map(float, learning_rates)))


def _member(key):
    seed, init = key
    return f"seed {seed}" + ("" if init is None else f" from {init}")


def _differences(model, other):
    """`: name a against b, ...` for the backbone settings on which two models differ."""
    configs = [getattr(m, "backbone", m).get_config() for m in (model, other)]
    differ = [f"{name} {configs[0].get(name)!r} against {configs[1].get(name)!r}"
              for name in sorted(configs[0].keys() | configs[1].keys())
              if name not in ("name", "trainable") and configs[0].get(name) != configs[1].get(name)]
    return f" ({', '.join(differ)})" if differ else ""


def merged_members(seeds, learning_rates, inits=None):
    """`(seeds, learning_rates, inits)` with each member once, where `seeds[i]`,
    `learning_rates[i]` (and `inits[i]`) are member `i`. A member listed twice would train
    the same model twice and be counted twice: it is one member, and a warning names it
    (the commands' rule for `--seeds 3 3`). `GridTrainer` itself trains its members as
    given (compiling a grid's shapes may list one encoder for several)."""
    check_members(seeds, learning_rates)
    keys = list(zip(seeds, map(float, learning_rates),
                    inits if inits is not None else [None] * len(seeds)))
    kept = list(dict.fromkeys(keys))
    if len(kept) < len(keys):
        repeated = "; ".join(
            f"seed {seed} at learning rate {rate:g}" + ("" if init is None else f" from {init}")
            + f" ({keys.count((seed, rate, init))} times)"
            for seed, rate, init in kept if keys.count((seed, rate, init)) > 1)
        warnings.warn(f"The same member is listed more than once: {repeated}; each trains "
                      f"once ({len(kept)} members).", stacklevel=3)
    return ([seed for seed, _, _ in kept], [rate for _, rate, _ in kept],
            None if inits is None else [init for _, _, init in kept])


@dataclasses.dataclass(frozen=True)
class Schedule:
    """The optimizer every member shares, but for its peak rate: AdamW (`adamw`), linear
    warm-up over `warmup_steps` and decay to 0 at `total_steps`, as `create_optimizer`."""

    total_steps: int
    warmup_steps: int
    weight_decay: float = 0.01
    clip_norm: float = 1.0
    beta_1: float = 0.9
    beta_2: float = 0.999
    epsilon: float = 1e-6


class GridTrainer:
    """K runs of one task model trained at once, in one compiled program (JAX).

    Args:
        build: called as `build(seed)` after `keras.utils.set_random_seed(seed)`: returns
            a built, uncompiled keras-hub task (e.g. a `TupeTextClassifier` without
            preprocessor, a `TupeMaskedLM`). Members with the same seed share one call.
        seeds: the members' seeds (initialization, dropout; the data order is the
            caller's, through `rows`).
        learning_rates: the members' peak learning rates, one per seed.
        schedule: a `Schedule`: steps, warm-up, weight decay, clipping. Its steps and
            warm-up are inputs of the compiled program, read at each `fit` from the
            `schedule` attribute: a grid built and compiled (`compile_fit`) before its
            length is chosen trains for any length once `schedule` is set to it, before
            its first step (after it, another schedule is refused). The optimizer's
            settings are built in; a schedule that changes them is refused.
        precision: "float32" or "mixed_bfloat16" (Keras's dtype policy while the
            members are built). Defaults to "float32".
        steps_per_dispatch: int. The most steps one call of the compiled program runs
            (`jax.lax.scan`); a `fit` runs dispatches of one length, at most this.
            Defaults to 100.
        inits: None, or one start a member (e.g. the path of the encoder it fine-tunes):
            then `build(seed, init)` builds each member's model, members with the same
            seed and init sharing one call, so one program trains several encoders of one
            architecture. Defaults to None (`build(seed)`).
        devices: the devices the members are spread over, K/D each (the member axis of
            every state array sharded over a `jax.sharding.Mesh` of them; the data
            replicated); where D does not divide K, copies of the first member fill the
            last device and their results are dropped. Defaults to every device of every
            process (`jax.devices()`): one GPU, or one CPU, holds every member; after
            `jax.distributed.initialize` (or `keras_tupe.processes.join`), the members are
            split across the processes, each holding K/D on each of its devices. Then
            every process builds the grid with the same arguments and calls `fit`,
            `predict` and `member_model` in the same order (each is a program over every
            process's devices), and each gets every member's results.
        accuracy: bool. Also sum each member's weighted correct predictions (the argmax of
            the task's class logits against the labels) and weights a step, as the
            weighted accuracy `fit` logs for a keras-hub classifier or masked LM:
            `accuracy_sums` after each `fit`, `(steps, K, 2)`. Defaults to False.
        memory_for: None, or `(batch_size, sequence_length)`: the grid's memory is then
            checked (`check_grid_memory`) once its first member is built, before the
            others: a K too large is refused with one member in memory, not K. Without
            it, call `check_memory` (after every member is built) or `check_grid_memory`
            (before any, from the encoder's configuration). Defaults to None.

    Example:
    >>> trainer = GridTrainer(lambda seed: TupeTextClassifier(backbone(), num_classes=2),
    ...                       seeds=[0, 1], learning_rates=[2e-5, 3e-5],
    ...                       schedule=Schedule(total_steps=100, warmup_steps=6))
    >>> losses = trainer.fit(source, rows, weights)       # (100, 2): a loss a step a member
    >>> outputs = trainer.predict(x)                      # (2, len(x), 2)
    """

    def __init__(self, build, seeds, learning_rates, schedule, precision="float32",
                 steps_per_dispatch=100, inits=None, memory_for=None, devices=None,
                 accuracy=False):
        check_backend()
        self.accuracy, self.accuracy_sums = accuracy, None
        self._memory_for = memory_for
        self.members = check_members(seeds, learning_rates)
        self.devices = list(jax.devices() if devices is None else devices)
        if not self.devices:
            raise ValueError("devices must name at least one device; received none.")
        # Copies of the first member fill the last device (K/D each); their results are
        # dropped.
        self._slots = -(-len(self.members) // len(self.devices)) * len(self.devices)
        if inits is not None and len(inits) != len(self.members):
            raise ValueError(f"inits must give one start per member: received {len(inits)} "
                             f"inits for {len(self.members)} members.")
        # A member's model, by (seed, init): `build(seed)`, or `build(seed, init)` where
        # the members start from several encoders.
        self._with_inits = inits is not None
        self._keys = [(seed, init) for (seed, _), init in zip(
            self.members, inits if self._with_inits else [None] * len(self.members))]
        if precision not in GRID_PRECISIONS:
            raise ValueError(f"Unknown precision {precision!r}. Valid: {', '.join(GRID_PRECISIONS)}.")
        check_int("steps_per_dispatch", steps_per_dispatch, 1)
        # `schedule` may be replaced (its steps); the optimizer keeps the settings it was
        # built with.
        self.schedule = self._built_schedule = schedule
        self.precision = precision
        self.steps_per_dispatch = steps_per_dispatch
        models = self._build(build)
        self.model = models[self._keys[0]]
        self._check_one_architecture(models)
        self.optimizer = adamw(self.model, 0.0, schedule.weight_decay, schedule.beta_1,
                               schedule.beta_2, schedule.epsilon, schedule.clip_norm)
        self.model.compile(optimizer=self.optimizer)
        self.optimizer.build(self.model.trainable_variables)
        self._decay = LinearWarmupLinearDecay(1.0, schedule.warmup_steps, schedule.total_steps)
        variables = self.optimizer.variables
        # The optimizer was made with a number, so its public `learning_rate` is the variable
        # itself (a schedule's would be a value): found by identity, as the step counter is.
        [self._rate_index] = [i for i, v in enumerate(variables)
                              if v is self.optimizer.learning_rate]
        [self._step_index] = [i for i, v in enumerate(variables)
                              if v is self.optimizer.iterations]
        stack = lambda values: [jnp.stack(column) for column in zip(*values)]  # noqa: E731
        slots = self._padded(self._keys)
        self.state = (
            stack([[v.value for v in models[key].trainable_variables] for key in slots]),
            stack([[v.value for v in models[key].non_trainable_variables] for key in slots]),
            [jnp.stack([v.value] * self._slots) for v in variables],
            jnp.asarray([rate for _, rate in self._padded(self.members)], jnp.float32),
        )
        mesh = jax.sharding.Mesh(np.asarray(self.devices), ("members",))
        # A member's state on its device; a step's rows by member; the data on every device.
        self._by_member, self._by_step, self._everywhere = (
            jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(*spec))
            for spec in (("members",), (None, "members"), ()))
        self.state = _place(self.state, self._by_member)
        self._programs = {}
        self._member_copy = None
        self.compiles = 0
        # Steps trained so far: a later `fit` goes on from them (its batches' masking keys).
        self.steps_done = 0
        self._trained_on = None  # the schedule's (warmup_steps, total_steps) once it trains

    def _build(self, build):
        models = {}
        previous = keras.config.dtype_policy()
        keras.config.set_dtype_policy(self.precision)
        try:
            for seed, init in dict.fromkeys(self._keys):
                keras.utils.set_random_seed(seed)
                models[seed, init] = build(seed, init) if self._with_inits else build(seed)
                if self._memory_for and len(models) == 1:
                    first = models[seed, init]
                    check_grid_memory(
                        first.backbone.get_config(), self._slots, *self._memory_for,
                        self.precision, parameters=sum(
                            math.prod(v.shape) for v in first.trainable_variables),
                        devices=len(self.devices))
        finally:
            keras.config.set_dtype_policy(previous)
        return models

    def _check_one_architecture(self, models):
        # Layer names differ (Keras numbers them); the classes, shapes and dtypes must not.
        shapes = {key: (type(model), [(tuple(v.shape), v.dtype) for v in model.variables])
                  for key, model in models.items()}
        first = self._keys[0]
        other = [key for key, found in shapes.items() if found != shapes[first]]
        if other:
            raise ValueError(
                f"The members of a grid share one architecture: {_member(other[0])} made a "
                f"model whose variables differ from {_member(first)}'s"
                f"{_differences(models[first], models[other[0]])}. Build one task class and "
                "config for every member" + (", from encoders of one architecture (inits)"
                                             if self._with_inits else "") + ".")

    @property
    def size(self):
        return len(self.members)

    def _padded(self, per_member, axis=0):
        """`per_member` (a list, or an array along `axis`) with the first member's entry
        repeated for each filling copy (`self._slots`)."""
        extra = self._slots - self.size
        if isinstance(per_member, list):
            return per_member + per_member[:1] * extra
        first = np.take(per_member, [0] * extra, axis=axis)
        return np.concatenate([per_member, first], axis=axis)

    def check_memory(self, batch_size, sequence_length, limit_bytes=None):
        """Raises ValueError when K members' training state and activations would not fit
        the device (`check_grid_memory`, with this grid's own parameter count). Returns
        the bytes estimated."""
        parameters = sum(math.prod(v.shape) for v in self.model.trainable_variables)
        return check_grid_memory(self.model.backbone.get_config(), self._slots, batch_size,
                                 sequence_length, self.precision, parameters=parameters,
                                 limit_bytes=limit_bytes, devices=len(self.devices))

    def fit(self, source, rows, sample_weight=None, transform=None, step_inputs=None):
        """Trains every member; returns the losses, `(steps, K)` (NumPy). A second `fit`
        goes on from the first: its steps follow (`steps_done`), so `fit(rows[:n])` then
        `fit(rows[n:])` is `fit(rows)`.

        Args:
            source: `(x, y)` or `(x, y, sample_weight)`: nests of arrays (the task's
                inputs, labels and weights), first axis the examples, put on the device
                once and shared by the members.
            rows: int `(steps, K, batch)`: the examples of each member's batch at each step.
            sample_weight: float `(steps, K, batch)` or None (ones): each member's weight of
                each row, for a source without weights of its own.
            transform: None, or `transform(key, x, y, inputs) -> (x, y, sample_weight)`
                applied to each gathered batch on the device, with a key of the member and
                step and the member's `step_inputs` of that step (or None): e.g. a masked
                LM's masks drawn by the data side (`given_masks`).
            step_inputs: None, or a nest of arrays `(steps, K, ...)`: what `transform`
                takes at each step for each member.
        """
        steps, dispatches = self._dispatches(source, rows, sample_weight, transform,
                                             step_inputs)
        chunks = []
        for program, arguments in dispatches:
            self.state, chunk = program(self.state, *arguments)
            chunks.append(chunk)
        self.steps_done += steps
        self._trained_on = self.schedule.warmup_steps, self.schedule.total_steps
        losses, *sums = [_fetch(jnp.concatenate(part))[:steps, :self.size]
                         for part in zip(*chunks)]
        if self.accuracy:
            self.accuracy_sums = np.stack(sums, axis=-1)
        return losses

    def compile_fit(self, source, rows, sample_weight=None, transform=None, step_inputs=None):
        """Compiles the program `fit` runs on these arguments, without training: with JAX's
        persistent compilation cache set, another process's `fit` of the same shapes (other
        weights, rates, seeds, schedule) loads it instead of compiling it. Returns seconds."""
        start = time.perf_counter()
        _, dispatches = self._dispatches(source, rows, sample_weight, transform, step_inputs)
        program, arguments = next(dispatches)
        program.lower(self.state, *arguments).compile()
        return time.perf_counter() - start

    def _dispatches(self, source, rows, sample_weight, transform, step_inputs=None):
        """`(steps, dispatches)`: the steps of `rows` and, lazily, each dispatch's
        `(program, arguments but the state)`."""
        rows = np.asarray(rows, np.int32)
        if rows.ndim != 3 or rows.shape[1] != self.size:
            raise ValueError(f"rows must be (steps, K={self.size}, batch); received shape "
                             f"{rows.shape}.")
        steps = rows.shape[0]
        if sample_weight is None:
            sample_weight = np.ones(rows.shape, np.float32)
        rows = self._padded(rows, axis=1)
        sample_weight = self._padded(np.asarray(sample_weight, np.float32), axis=1)
        # Dispatches of one length (one program); the last one's surplus steps repeat the
        # last batch and leave the state as it was (`_scan_fit`).
        count = -(-steps // self.steps_per_dispatch)
        length = -(-steps // count)
        last = np.minimum(np.arange(count * length), steps - 1)
        rows, sample_weight = rows[last], np.asarray(sample_weight, np.float32)[last]
        if step_inputs is not None:
            step_inputs = keras.tree.map_structure(
                lambda leaf: self._padded(np.asarray(leaf), axis=1)[last], step_inputs)
        everywhere = functools.partial(_place, sharding=self._everywhere)
        by_step = functools.partial(_place, sharding=self._by_step)
        source = everywhere(keras.tree.map_structure(np.asarray, source))
        keys = _place(np.stack([jax.random.key_data(jax.random.PRNGKey(seed))
                                for seed, _ in self._padded(self.members)]), self._by_member)
        metrics = everywhere([np.asarray(v.value) for v in self.model.metrics_variables])
        first, end = self.steps_done, everywhere(np.int32(self.steps_done + steps))
        # An input of the compiled program, not constants in it: grids of one shape share
        # one program whatever their schedules (`LinearWarmupLinearDecay.fraction`).
        schedule = everywhere(np.asarray(self._schedule_steps(), np.float32))
        program = self._program("fit", length, transform)
        return steps, ((program, (source, metrics, keys, by_step(rows[start:start + length]),
                                  by_step(sample_weight[start:start + length]),
                                  everywhere(np.arange(first + start, first + start + length)),
                                  end, schedule, None if step_inputs is None else by_step(
                                      keras.tree.map_structure(
                                          lambda leaf: leaf[start:start + length], step_inputs))))
                       for start in range(0, count * length, length))

    def _schedule_steps(self):
        """`(warmup_steps, total_steps)` of `schedule`, refused where it changes the
        optimizer's settings, which the grid was built with."""
        built = self._built_schedule
        changed = [field.name for field in dataclasses.fields(Schedule)
                   if field.name not in ("total_steps", "warmup_steps")
                   and getattr(self.schedule, field.name) != getattr(built, field.name)]
        if changed:
            raise ValueError(f"A grid's schedule may change its total_steps and warmup_steps; "
                             f"this one changes {', '.join(changed)}, built into the "
                             "optimizer: build another grid.")
        steps = self.schedule.warmup_steps, self.schedule.total_steps
        # (A grid restored from backups, `steps_done` set, has not trained in this process.)
        if self.steps_done and self._trained_on not in (None, steps):
            raise ValueError(f"This grid trained {self.steps_done} steps on a schedule of "
                             f"{self._trained_on[1]} steps ({self._trained_on[0]} warming up); "
                             "its schedule changes only before its first step: build another "
                             "grid.")
        return steps

    def _program(self, kind, length, transform):
        key = (kind, length, transform)
        if key not in self._programs:
            self._programs[key] = jax.jit(
                self._scan_fit(transform) if kind == "fit" else self._scan_predict(),
                donate_argnums=(0,) if kind == "fit" else ())
            self.compiles += 1
        return self._programs[key]

    def _scan_fit(self, transform):
        model, optimizer, decay = self.model, self.optimizer, self._decay

        def member_step(state, metrics, x, y, sample_weight, schedule_steps):
            trainable, non_trainable, optimizer_variables, peak = state
            optimizer_variables = list(optimizer_variables)
            # The schedule's rate at this member's step, as `LinearWarmupLinearDecay` gives
            # it (peak x fraction), into the optimizer's learning-rate variable.
            optimizer_variables[self._rate_index] = peak * decay.fraction(
                optimizer_variables[self._step_index], schedule_steps)
            grad_fn = jax.value_and_grad(model.compute_loss_and_updates, has_aux=True)
            (_, (loss, y_pred, non_trainable, _)), grads = grad_fn(
                trainable, non_trainable, metrics, x, y, sample_weight, training=True,
                optimizer_variables=optimizer_variables)
            trainable, optimizer_variables = optimizer.stateless_apply(
                optimizer_variables, grads, trainable)
            found = (loss,)
            if self.accuracy:  # summed as Keras's weighted accuracy sums them
                weight = jnp.broadcast_to(sample_weight, y.shape).astype(jnp.float32)
                hit = (jnp.argmax(y_pred, axis=-1) == y).astype(jnp.float32)
                found += (jnp.sum(weight * hit), jnp.sum(weight))
            return (trainable, non_trainable, optimizer_variables, peak), found

        def member(state, source, metrics, key, rows, sample_weight, step, schedule_steps,
                   step_input):
            x, y, *weights = keras.tree.map_structure(lambda leaf: leaf[rows], source)
            if weights:  # the source's own, e.g. a masked LM's slot weights
                sample_weight = weights[0]
            if transform is not None:
                x, y, mask_weight = transform(
                    jax.random.fold_in(jax.random.wrap_key_data(key), step), x, y, step_input)
                sample_weight = sample_weight[:, None] * mask_weight
            return member_step(state, metrics, x, y, sample_weight, schedule_steps)

        def scanned(state, source, metrics, keys, rows, sample_weight, steps, end,
                    schedule_steps, step_inputs):
            def body(state, inputs):
                rows, sample_weight, step, step_input = inputs
                trained, found = jax.vmap(
                    member, in_axes=(0, None, None, 0, 0, 0, None, None, 0))(
                    state, source, metrics, keys, rows, sample_weight, step, schedule_steps,
                    step_input)
                # A step past `end` (a last dispatch's surplus) keeps the state it found.
                active = step < end
                return (jax.tree.map(lambda new, old: jnp.where(active, new, old), trained,
                                     state),
                        tuple(jnp.where(active, value, 0.0) for value in found))

            return jax.lax.scan(body, state, (rows, sample_weight, steps, step_inputs))

        return scanned

    def predict(self, x, batch_size=256):
        """Every member's outputs on `x` (a nest of arrays, first axis the examples), in
        inference mode: `(K, examples, ...)` (NumPy), or a nest of them for a task of
        several outputs (e.g. `TupeSpanQA`'s start and end logits). One compiled program
        a shape."""
        program, arguments, count = self._prediction(x, batch_size)

        def members_first(leaf):  # (batches, K, batch, ...) -> (K, examples, ...)
            leaf = _fetch(leaf).astype(np.float32)
            leaf = np.moveaxis(leaf, 1, 0)[:self.size]
            return leaf.reshape((self.size, -1) + leaf.shape[3:])[:, :count]

        return keras.tree.map_structure(members_first, program(*arguments))

    def compile_predict(self, x, batch_size=256):
        """Compiles the program `predict` runs on these arguments, without running it (as
        `compile_fit`). Returns seconds."""
        start = time.perf_counter()
        program, arguments, _ = self._prediction(x, batch_size)
        program.lower(*arguments).compile()
        return time.perf_counter() - start

    def _prediction(self, x, batch_size):
        count = len(keras.tree.flatten(x)[0])
        batches = -(-count // batch_size)
        rows = np.arange(batches * batch_size) % count
        x = _place(keras.tree.map_structure(
            lambda leaf: np.asarray(leaf)[rows].reshape(
                (batches, batch_size) + np.shape(leaf)[1:]), x), self._everywhere)
        # (The state as `fit` left it, its placement said again: one program for every grid
        # of these shapes, trained or not.)
        trainable, non_trainable = _place(self.state[:2], self._by_member)
        return self._program("predict", batches, None), (trainable, non_trainable, x), count

    def _scan_predict(self):
        model = self.model

        def member(trainable, non_trainable, x):
            outputs, _ = model.stateless_call(trainable, non_trainable, x, training=False)
            return outputs

        def scanned(trainable, non_trainable, x):
            def body(carry, batch):
                return carry, jax.vmap(member, in_axes=(0, 0, None))(
                    trainable, non_trainable, batch)

            return jax.lax.scan(body, None, x)[1]

        return scanned

    def member_model(self, index, optimizer=False):
        """The task model holding member `index`'s weights (the grid's one model: the next
        call gives it another member's); with `optimizer`, its optimizer (`model.optimizer`)
        holds the member's optimizer state too (step count, moments), as after the member's
        `fit`. Members across processes: every process calls it (the member is copied from
        the device that holds it to every process's)."""
        self._check_member(index)
        trainable, non_trainable, optimizer_variables, _ = self.state
        if self._member_copy is None:  # one program: a member's weights onto every device
            self._member_copy = jax.jit(lambda values, index: [value[index] for value in values],
                                        out_shardings=self._everywhere)
        pairs = [(self.model.trainable_variables, trainable),
                 (self.model.non_trainable_variables, non_trainable)]
        if optimizer:
            pairs.append((self.optimizer.variables, optimizer_variables))
        for variables, values in pairs:
            for variable, value in zip(variables, self._member_copy(values, np.int32(index))):
                variable.assign(_fetch(value))
        return self.model

    def load_member(self, index):
        """The inverse of `member_model(index, optimizer=True)`: member `index` takes the
        weights and optimizer state the grid's model (`member_model`'s) holds now, e.g. a
        run's backup restored into it. Before a `fit` goes on, every member is at one step:
        set `steps_done` to it."""
        self._check_member(index)
        trainable, non_trainable, optimizer_variables, peak = self.state
        values = [[v.value for v in variables] for variables in (
            self.model.trainable_variables, self.model.non_trainable_variables,
            self.optimizer.variables)]
        # The copies filling the last device are the first member's.
        slots = [index, *(range(self.size, self._slots) if index == 0 else ())]
        updated = [[stacked.at[np.asarray(slots)].set(jnp.asarray(value)[None])
                    for stacked, value in zip(group, new)]
                   for group, new in zip((trainable, non_trainable, optimizer_variables), values)]
        self.state = _place((*updated, peak), self._by_member)

    def _check_member(self, index):
        if not 0 <= index < self.size:
            raise IndexError(f"member {index} is not in this grid of {self.size} members.")


def given_masks(key, ids, labels, masks):
    """A `transform` for `GridTrainer.fit` that applies masks drawn by the data side
    (`keras_tupe.data.shards.MaskedLMShards`, the masks `fit` trains on) to each gathered
    batch of token ids `(B, L)` (full packed sequences, as shards hold them), on the device:
    `masks` is `(positions, replacements, labels, weights)`, each `(B, P)`, a step's
    `step_inputs` (`MaskedLMShards.masks`). A slot of weight 0 changes nothing."""
    positions, replacements, labels, weights = masks
    ids, rows = jnp.asarray(ids), jnp.arange(ids.shape[0])[:, None]
    token_ids = ids.at[rows, positions].set(
        jnp.where(weights > 0, replacements, ids[rows, positions]).astype(ids.dtype))
    x = {"token_ids": token_ids, "padding_mask": jnp.ones_like(ids),
         "segment_ids": jnp.zeros_like(ids), "mask_positions": positions.astype(jnp.int32)}
    return x, labels.astype(jnp.int32), weights.astype(jnp.float32)


def shard_source(directory):
    """Every sequence of a token-id shard folder (`keras-tupe-shard-corpus`), as the
    `source` of a masked-LM grid: `(ids (N, L) int32, zeros (N,))`, for `given_masks`."""
    sequences = ShardSequences(directory)
    ids = sequences.gather(np.arange(len(sequences)))
    return ids, np.zeros(len(ids), np.int32)


def member_parameters(config, task=None):
    """The parameters of `task(TupeBackbone(**config))` (default: the backbone alone),
    exactly, without building it: counted on three shallow twins (one or two layers, a
    vocabulary of two or three tokens, the other settings of `config`, constructor
    arguments or a `get_config()`): each layer adds the same count, and each token the
    same (its embedding row, a tied head's bias). About a second at `base`, where the
    member itself takes seconds and its memory. (Keras's `StatelessScope` builds no
    faster: the functional graph is traced either way.)"""
    def count(layers, vocabulary):
        twin = TupeBackbone.from_config({**config, "num_layers": layers,
                                         "vocabulary_size": vocabulary})
        return (task(twin) if task else twin).count_params()

    one = count(1, 2)
    return (one + (config["num_layers"] - 1) * (count(2, 2) - one)
            + (config["vocabulary_size"] - 2) * (count(1, 3) - one))


def check_grid_memory(config, members, batch_size, sequence_length, precision="float32",
                      parameters=None, task=None, limit_bytes=None, members_are=None,
                      devices=1):
    """Bytes a grid of `members` members needs, or ValueError where they would not fit.

    A member holds `STATE_BYTES_PER_PARAMETER` bytes a parameter (`parameters`, else
    `member_parameters(config, task)`) and the activations its backward pass keeps at
    `batch_size` x `sequence_length` tokens; `config` is the backbone's (constructor
    arguments or `get_config()`). Spread over `devices` devices, each holds K/D members
    and `limit_bytes` (default: the first device's own limit, or this machine's memory on
    a CPU), of which a grid may take 90%. The refusal
    says the estimate, the largest K that fits and what K is (`members_are`, e.g.
    "`learning_rates=` x `seeds=`"). Nothing is built but the twins of
    `member_parameters`: the check comes before the grid.
    """
    if parameters is None:
        parameters = member_parameters(config, task)
    width = 2 if precision == "mixed_bfloat16" else 4
    # Activations kept for the backward pass: ~34 values a token a layer a hidden unit
    # plus the attention maps (heads x length a token a layer; Korthikanti et al. 2022).
    activations = config["num_layers"] * batch_size * sequence_length * width * (
        34 * config["hidden_dim"] + 5 * config["num_heads"] * sequence_length)
    member = STATE_BYTES_PER_PARAMETER * parameters + activations
    need = -(-members // devices) * member  # a device's
    limit = limit_bytes or device_memory()
    if need > 0.9 * limit:
        fits = int(0.9 * limit // member) * devices
        spread = (f" a device ({-(-members // devices)} members on each of {devices})"
                  if devices > 1 else "")
        raise ValueError(
            f"A grid of K={members} members{f' ({members_are})' if members_are else ''} needs "
            f"about {need / 2**30:.1f} GiB{spread} (per member {STATE_BYTES_PER_PARAMETER} "
            f"bytes x {parameters:,} parameters and activations at batch {batch_size} x "
            f"{sequence_length} tokens); the device holds {limit / 2**30:.1f} GiB. "
            + (f"Use at most K={fits} members a grid." if fits else
               "Not one member fits: a smaller batch, length or encoder."))
    return need


def grid_processes():
    """This process's place among the processes a grid's devices span (`jax.devices()`'s):
    a `keras_tupe.processes.Processes`, whose `writer` (process 0) alone writes what the
    grid trained, and whose `agree` gathers every process's checks."""
    return Processes(jax.process_index(), jax.process_count())


def _place(tree, sharding):
    """`tree`'s arrays placed by `sharding`. Over the devices of several processes (which
    `jax.device_put` does not take from host values), each process puts its own devices'
    parts of the same value, which every process holds whole."""
    if sharding.is_fully_addressable:
        return jax.device_put(tree, sharding)

    def place(leaf):
        if isinstance(leaf, jax.Array) and not leaf.is_fully_addressable:
            return jax.device_put(leaf, sharding)  # already global: placed again
        value = np.asarray(leaf)
        return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])

    return jax.tree.map(place, tree)


def _fetch(array):
    """`array` as NumPy, whole, in every process (gathered where processes hold parts)."""
    if array.is_fully_addressable or array.is_fully_replicated:
        return np.asarray(array)
    return multihost_utils.process_allgather(array, tiled=True)


def device_memory():
    """Bytes a device of this process can hold: its own limit (an accelerator), else this
    machine's physical memory."""
    stats = jax.local_devices()[0].memory_stats() or {}
    if "bytes_limit" in stats:
        return stats["bytes_limit"]
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
