"""Training across processes under JAX: the process layout of pre-training's `--strategy
multiworker` and of GLUE fine-tuning (`keras-tupe-finetune-glue`: each run data-parallel
over every process's devices, or with `--grid` each grid's members spread over them).

JAX's multi-controller runtime: every process runs the same program on its own devices and
the processes' devices form one mesh, over which `keras.distribution.DataParallel` shards
each global batch. The layout comes from `--coordinator`, `--num-processes` and
`--process-id`, or, left out, from JAX's cluster detection (SLURM, Open MPI, Cloud TPU).

    processes = join(config)        # before any JAX computation
    processes.agree(problem)        # every process's checks, gathered: all go on or all stop
    processes.writer                # process 0 alone writes the run folder
    processes.part                  # (index, count): the rows of each global batch it feeds

The data: process `i` of `n` feeds rows `i*B/n .. (i+1)*B/n` of every global batch of `B`
(`keras_tupe.data.shards.MaskedLMShards(part=...)`), so the global batches, and the run,
are those of one process on one device, whatever the layout.
"""

import contextlib
import dataclasses
import hashlib
import json
import os
import sys
import threading

import keras
import numpy as np

from keras_tupe_base.settings import LAYOUT_FIELDS


class LayoutError(ValueError):
    """The process layout is wrong, or a process stopped before training: one line."""


@dataclasses.dataclass(frozen=True)
class Processes:
    """This process's place in the layout: `index` of `count`."""

    index: int = 0
    count: int = 1

    @property
    def writer(self):
        """Whether this process writes the run folder (process 0: one writer)."""
        return self.index == 0

    @property
    def part(self):
        """`(index, count)`: which rows of each global batch this process feeds."""
        return self.index, self.count

    def agree(self, problem, settings=None, num_processes=None):
        """Gathers every process's verdict (a collective: every process calls it at the
        same point); raises `LayoutError` on every process when any has a problem.

        Args:
            problem: an exception or None, this process's own problem (what its checks
                raised): raised again here, after the gathering.
            settings: a JSON-able dict that must be the same in every process (the run's
                settings but the layout), or None.
            num_processes: int or None, the process count this process was told.
        """
        if self.count == 1:
            if problem is not None:
                raise problem
            return
        from jax.experimental import multihost_utils

        digest = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).digest()
        mine = np.array([problem is None, num_processes or 0,
                         int.from_bytes(digest[:3], "little")], np.int32)
        every = multihost_utils.process_allgather(mine)  # (count, 3), the same in each
        if problem is not None:
            raise problem
        told = every[self.index, 1]
        if told and told != self.count:
            raise LayoutError(
                f"--num-processes {told} does not match the coordinator's: {self.count} "
                "processes joined it. Give every process the same --num-processes.")
        if (every[:, 2] != every[0, 2]).any():
            differ = [int(i) for i in np.nonzero(every[:, 2] != every[0, 2])[0]]
            raise LayoutError(
                f"the settings of process(es) {' '.join(map(str, differ))} differ from process "
                "0's: start every process with the same command but --process-id.")
        stopped = [int(i) for i in np.nonzero(every[:, 0] == 0)[0]]
        bad_counts = [int(i) for i in np.nonzero((every[:, 1] != 0)
                                                 & (every[:, 1] != self.count))[0]]
        if stopped or bad_counts:
            raise LayoutError(
                f"process {(stopped or bad_counts)[0]} stopped before training (its own "
                "error line says why); nothing was trained or written.")


ONE_PROCESS = Processes()


def current():
    """This process's place among the processes JAX joined (`join`, or
    `jax.distributed.initialize`): `ONE_PROCESS` when none were, or on another backend."""
    if keras.backend.backend() != "jax":
        return ONE_PROCESS
    import jax

    return Processes(jax.process_index(), jax.process_count())


def join(config):
    """Joins the processes of `config`'s layout (`jax.distributed.initialize`) and returns
    this process's `Processes`. Call it before any JAX computation.

    Waits `config.coordinator_timeout` seconds for every process; past it, prints one line
    and ends the process with status 2, before JAX's own abort (a fatal error and a C++
    stack trace, which no Python code can catch).
    """
    import jax

    if jax.distributed.is_initialized():  # a second run in this process: the same layout
        return Processes(jax.process_index(), jax.process_count())
    timeout = config.coordinator_timeout
    layout = {name: getattr(config, name) for name in LAYOUT_FIELDS}
    joined = threading.Event()
    threading.Thread(target=_give_up, args=(joined, timeout, layout), daemon=True).start()
    try:
        # `jax.distributed.initialize`, not `keras.distribution.initialize` (which calls it):
        # Keras's takes no timeout. Its other step, one random seed for every process, is
        # the run's `--seed` here, set in each process alike.
        jax.distributed.initialize(
            coordinator_address=config.coordinator, num_processes=config.num_processes,
            process_id=config.process_id, initialization_timeout=timeout + 60)
    except ValueError as error:  # no layout given and no cluster found
        raise LayoutError(
            f"training across processes under JAX needs the process layout: --coordinator "
            "HOST:PORT, --num-processes N and --process-id I on every process, or a cluster "
            f"that JAX detects (SLURM, Open MPI, Cloud TPU). JAX: {error}") from None
    finally:
        joined.set()
    return Processes(jax.process_index(), jax.process_count())


def _give_up(joined, timeout, layout):
    """After `timeout` seconds without a layout, one line and status 2 (see `join`)."""
    if joined.wait(timeout):
        return
    where = (f"--coordinator {layout['coordinator']}" if layout["coordinator"]
             else "the coordinator JAX detected")
    print(f"error: the processes did not all join {where} within --coordinator-timeout "
          f"{timeout} s (this process: --process-id {layout['process_id']} of "
          f"--num-processes {layout['num_processes']}). Start process 0 (it serves the "
          "coordination) and every other process with the same --coordinator and "
          "--num-processes; nothing was trained or written.", file=sys.stderr, flush=True)
    os._exit(2)  # JAX's initialize cannot be interrupted; it would abort the process later


@contextlib.contextmanager
def writing_alone():
    """What one process does alone while a distribution spans several: the writer's saves.

    Keras's saving builds throwaway variables (an optimizer, for the list of attributes it
    skips), and under a distribution a new variable is placed with a check that every
    process passes the same value: a collective that the other processes never join. So
    the distribution is lifted meanwhile (the values saved are the replicated ones, which
    every process holds whole). Under one process, nothing changes.
    """
    distribution = keras.distribution.distribution()
    if distribution is None or keras.backend.backend() != "jax":
        yield
        return
    import jax

    if jax.process_count() == 1:
        yield
        return
    keras.distribution.set_distribution(None)
    try:
        yield
    finally:
        keras.distribution.set_distribution(distribution)
