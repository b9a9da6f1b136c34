"""The fine-tuning protocol as one object (`Protocol`), shared by the CLI, `run_protocol`
and the studies: the grid of learning rates and seeds, how a task's rate is chosen, the
plan, the choice and the table, all read from the rows of finished runs
(`results.jsonl`, `keras_tupe.finetuning.summary`).
"""

import dataclasses

from keras_tupe.finetuning import summary

PAPER_LEARNING_RATES = (2e-5, 3e-5, 4e-5, 5e-5)
PAPER_SEEDS = (0, 1, 2, 3, 4)


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

    A repeated rate or seed is one point of the grid. Raises ValueError for a
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
            object.__setattr__(self, name, tuple(dict.fromkeys(getattr(self, name))))
        if not self.learning_rates or not self.seeds:
            raise ValueError("A protocol needs at least one learning rate and one seed. "
                             f"Received: learning_rates={list(self.learning_rates)}, "
                             f"seeds={list(self.seeds)}")
        summary.check_selection(self.seeds, self.selection_seed, self.edge_learning_rates,
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

    def _choice(self):
        return {"selection_seed": self.selection_seed,
                "edge_learning_rates": self.edge_learning_rates}

    def runs_to_do(self, rows, task):
        """The `(rate, seed)` runs of `task` still needed after `rows`, in order."""
        return summary.runs_to_do(rows, task, self.learning_rates, self.seeds, **self._choice())

    def runs(self, rows, tasks):
        """Yields `(task, rate, seed)` until every task is done; `rows` grows as the
        caller appends each finished run."""
        for task in tasks:
            while todo := self.runs_to_do(rows, task):
                count = len(rows)
                yield (task, *todo[0])
                if len(rows) == count:
                    raise RuntimeError(f"{task}: the run {todo[0]} left no result")

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
        """The selection seed's best rate (None before it ran, or without one)."""
        if self.selection_seed is None:
            return None
        return summary.chosen_learning_rate(rows, task, self.learning_rates,
                                            self.selection_seed, self.edge_learning_rates)

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
        """Per task the median over seeds at the chosen rate (`summary.summarize`)."""
        return summary.summarize(self.rows(rows, tasks), tasks, **self._choice())
