"""The fine-tuning protocol as one object (`Protocol`), shared by the CLI, `run_protocol`
and the studies: the grid of learning rates and seeds, how a task's rate is chosen, the
plan, the choice and the table, all read from the rows of finished runs
(`results.jsonl`; the table's medians and files are `keras_tupe.finetuning.summary`'s).
"""

import dataclasses
import warnings

from keras_tupe.finetuning.summary import main_score, summarize
from keras_tupe_base.checks import merge_repeats
from keras_tupe_base.settings import PAPER_LEARNING_RATES, PAPER_SEEDS, check_selection


@dataclasses.dataclass(frozen=True)
class Protocol:
    """Learning rates x seeds, and how each task's rate is chosen.

    Args:
        learning_rates: the grid's rates. Defaults to the papers' 2e-5 ... 5e-5.
        seeds: the fine-tuning seeds. Defaults to the papers' 0-4.
        selection_seed: one of `seeds`, or None. With it, each task's rate is chosen
            with that seed alone and only the chosen rate runs every seed: `r + s - 1`
            runs a task instead of `r x s`. Defaults to None (the full grid).
        edge_learning_rates: rates tried with the selection seed, nearest first, while
            the best rate is the lowest (highest) tried. Defaults to none.

    A repeated rate or seed is one point of the grid (a warning names it). Raises ValueError for a
    selection seed not among the seeds, or edge rates without one, not positive or
    already in the grid.

    Example:
    >>> protocol = Protocol((1e-4, 3e-4, 1e-3), (0, 1, 2), selection_seed=0)
    >>> protocol.runs_to_do([], "rte")
    [(0.0001, 0), (0.0003, 0), (0.001, 0)]
    """

    learning_rates: tuple = PAPER_LEARNING_RATES
    seeds: tuple = PAPER_SEEDS
    selection_seed: int = None
    edge_learning_rates: tuple = ()

    def __post_init__(self):
        for name in ("learning_rates", "seeds", "edge_learning_rates"):
            unique, note = merge_repeats(f"{name}=", getattr(self, name))
            if note:  # the commands' rule (`--seeds 3 3`): one point, with a note
                warnings.warn(note, stacklevel=3)
            object.__setattr__(self, name, tuple(unique))
        if not self.learning_rates or not self.seeds:
            raise ValueError("A protocol needs at least one learning rate and one seed. "
                             f"Received: learning_rates={list(self.learning_rates)}, "
                             f"seeds={list(self.seeds)}")
        check_selection(self.seeds, self.selection_seed, self.edge_learning_rates,
                        self.learning_rates)

    @classmethod
    def from_config(cls, config):
        """The protocol of a study config (`learning_rates`, `seeds`, optional
        `selection_seed`, `edge_learning_rates`)."""
        return cls(config["learning_rates"], config["seeds"], config.get("selection_seed"),
                   config.get("edge_learning_rates") or ())

    @property
    def rates(self):
        """Every rate the protocol may run: the grid and its edges (selection seed only)."""
        return set(self.learning_rates) | set(self.edge_learning_rates)

    def runs_to_do(self, rows, task):
        """The `(learning rate, seed)` runs of `task` the protocol still needs after `rows`,
        in order; `[]` when its table is final.

        Without a selection seed: every rate x every seed not in `rows`. With one: first
        every rate of the grid with that seed; then, while the rate it scores best at is
        the lowest (highest) one run and `edge_learning_rates` has a lower (higher) one,
        the nearest such rate with that seed, one at a time; then the other seeds at the
        chosen rate (`chosen_rate`).
        """
        done = {(row["learning_rate"], row.get("seed")) for row in rows if row["task"] == task}
        if self.selection_seed is None:
            return [(rate, seed) for rate in self.learning_rates for seed in self.seeds
                    if (rate, seed) not in done]
        first = [(rate, self.selection_seed) for rate in self.learning_rates
                 if (rate, self.selection_seed) not in done]
        if first:
            return first
        best, tried = self._selection(rows, task)
        ladder = sorted(self.rates)
        lower = [rate for rate in ladder if rate < best and rate not in tried]
        higher = [rate for rate in ladder if rate > best and rate not in tried]
        if best == min(tried) and lower:
            return [(lower[-1], self.selection_seed)]
        if best == max(tried) and higher:
            return [(higher[0], self.selection_seed)]
        return [(best, seed) for seed in self.seeds if (best, seed) not in done]

    def runs(self, rows, tasks):
        """Yields `(task, rate, seed)` until every task is done; `rows` grows as the
        caller appends each finished run."""
        for task in tasks:
            while todo := self.runs_to_do(rows, task):
                count = len(rows)
                yield (task, *todo[0])
                if len(rows) == count:
                    raise RuntimeError(f"{task}: the run {todo[0]} left no result")

    def grid_rounds(self, rows_by_encoder, task):
        """Yields the rounds of a grid fine-tuning of `task` (each round one program):
        `[(encoder index, rate, seed)]`, first every rate x every seed that an encoder's
        rows lack, then the runs `runs_to_do` still asks for (an edge rate, the chosen
        rate's other seeds), until none. `rows_by_encoder` (one list of rows an encoder)
        grows as the caller appends each round's rows."""
        todo = [[(rate, seed) for rate in self.learning_rates for seed in self.seeds
                 if (rate, seed) not in {(row["learning_rate"], row.get("seed"))
                                         for row in rows if row["task"] == task}]
                for rows in rows_by_encoder]
        while members := [(index, rate, seed) for index, (runs, rows) in enumerate(
                zip(todo, rows_by_encoder)) for rate, seed in runs or self.runs_to_do(rows, task)]:
            count = sum(map(len, rows_by_encoder))
            yield members
            if sum(map(len, rows_by_encoder)) == count:
                raise RuntimeError(f"{task}: the grid's round {members} left no result")
            todo = [[] for _ in rows_by_encoder]

    def size(self, rows, tasks):
        """The runs of the protocol when complete, as far as `rows` tell: rates x seeds a
        task, or with a selection seed every rate run with it (the grid and the edges it
        widened to so far) plus the other seeds."""
        if self.selection_seed is None:
            return len(tasks) * len(self.learning_rates) * len(self.seeds)
        return sum(len(set(self.learning_rates) | {
            r["learning_rate"] for r in rows if r["task"] == task
            and r.get("seed") == self.selection_seed
            and r["learning_rate"] in self.edge_learning_rates}) + len(self.seeds) - 1
            for task in tasks)

    def run_number(self, rows, tasks):
        """`"run N of M"` for the next run after `rows` ("of at least M" with a selection
        seed, whose grid may still widen at an edge)."""
        done = {(r["task"], r["learning_rate"], r.get("seed")) for r in rows
                if r["task"] in tasks and r["learning_rate"] in self.rates
                and r.get("seed") in self.seeds}
        more = "at least " if self.selection_seed is not None else ""
        return f"run {len(done) + 1} of {more}{self.size(rows, tasks)}"

    def chosen_rate(self, rows, task):
        """The rate with the best score of the selection seed among the protocol's rates
        run with it (the lowest of equal ones); None before any has run, or without one."""
        if self.selection_seed is None:
            return None
        best, _ = self._selection(rows, task)
        return best

    def _selection(self, rows, task):
        """`(best rate, rates tried)` of the selection seed on `task`."""
        scores = {row["learning_rate"]: main_score(row) for row in rows
                  if row["task"] == task and row.get("seed") == self.selection_seed
                  and row["learning_rate"] in self.rates}
        if not scores:
            return None, set()
        return max(sorted(scores), key=scores.get), set(scores)

    def rows(self, rows, tasks):
        """The rows of runs the protocol asks for: of `tasks`, its rates and seeds, and
        with a selection seed, of that seed or at the rate it chose."""
        rows = [r for r in rows if r["task"] in tasks and r["learning_rate"] in self.rates
                and r.get("seed") in self.seeds]
        if self.selection_seed is None:
            return rows
        chosen = {task: self.chosen_rate(rows, task) for task in tasks}
        return [r for r in rows
                if r.get("seed") == self.selection_seed or r["learning_rate"] == chosen[r["task"]]]

    def summarize(self, rows, tasks):
        """Per task the median over seeds at the chosen rate (`summary.summarize`); without
        a selection seed at the rate of the best median."""
        rows = self.rows(rows, tasks)
        # One score a (task, rate, seed), the last (a results.jsonl written twice for a run).
        runs = list({(r["task"], r["learning_rate"], r.get("seed")): r for r in rows}.values())
        return summarize(rows, tasks, {task: self.chosen_rate(runs, task) for task in tasks})
