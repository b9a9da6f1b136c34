"""SQuAD v1.1 fine-tuning: the library behind `training.finetune_squad`."""

import contextlib
import dataclasses
import json
import os
import time

from keras_tupe.data import squad
from keras_tupe.finetuning.batches import batches
from keras_tupe.finetuning.engines import FIT, Grid
from keras_tupe.finetuning.glue import check_protocol, grid_settings, task_tokenizer
from keras_tupe.finetuning.loading import FINETUNING_RECORD, load_backbone
from keras_tupe.finetuning.summary import append_result, read_results
from keras_tupe.data.order import members_rows
from keras_tupe.grid import check_backend, check_members, merged_members
from keras_tupe.metrics import squad_evaluate
from keras_tupe.models import TupeSpanQA, TupeSpanQAPreprocessor
from keras_tupe.models.preset_folders import refuse_existing_folder, write_preset_folder
from keras_tupe.models.span_windows import postprocess
from keras_tupe.models.tupe_span_qa_preprocessor import check_question_room
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.settings import SquadConfig
from keras_tupe_base.staging import write_json, write_text


@dataclasses.dataclass(frozen=True)
class SquadData:
    """A SQuAD run's windows: what every run of one config trains and is scored on, by
    either engine (`keras_tupe.finetuning.engines` says what an engine reads)."""

    preprocessor: TupeSpanQAPreprocessor
    train_features: object  # `SquadFeatures`
    eval_features: object
    eval_articles: list
    label: str  # where the questions came from, for the record
    epochs: int = 1
    task = "squad"

    @property
    def source(self):
        train = self.train_features
        return train.inputs, {"start_positions": train.start_positions,
                              "end_positions": train.end_positions}

    @property
    def evaluated(self):
        return {"eval": self.eval_features.inputs}

    @property
    def train_length(self):
        return self.preprocessor.sequence_length

    @staticmethod
    def head(backbone):
        """The span-QA model of `backbone` (for `check_grid_memory`'s count)."""
        return TupeSpanQA(backbone)

    def orders(self, seeds, batch_size):
        """Each seed's batch order, `(rows, weights)`, each `(steps, len(seeds), batch)`:
        the permutation of each epoch `fit_batches` takes on Grain, its smaller last batch
        filled with copies that weigh 0 (`epoch_rows`)."""
        return members_rows(len(self.train_features), batch_size, seeds, self.epochs)

    def fit_batches(self, seed, batch_size, loader, part=(0, 1)):
        """A run's batches for `fit`: `(dataset, steps_per_epoch)`, a new permutation an
        epoch, the last batch smaller; in one process only (`part` `(0, 1)`)."""
        if part[1] != 1:
            raise ValueError("A SQuAD run trains in one process; across processes, train its "
                             "runs as a grid (ProtocolConfig(grid=True)).")
        return batches(*self.source, batch_size, shuffle=True, seed=seed, epochs=self.epochs,
                       loader=loader)


def squad_data(config, tokenizer):
    """The train and evaluation windows of `config` (its files or its offline split, at
    its `split_seed`, else its `seed`), cut by `TupeSpanQAPreprocessor.featurize_articles`."""
    preprocessor = TupeSpanQAPreprocessor(tokenizer, sequence_length=config.seq_len,
                                          doc_stride=config.doc_stride,
                                          max_query_length=config.max_query_length)
    if config.offline_split:
        articles = squad.load_squad(config.offline_split)
        split_seed = config.seed if config.split_seed is None else config.split_seed
        train_articles, eval_articles = squad.split_articles(
            articles, eval_fraction=config.eval_fraction, seed=split_seed)
        label = (f"article-level split of {config.offline_split} "
                 f"({1 - config.eval_fraction:.0%}/{config.eval_fraction:.0%}, seed {split_seed}); "
                 "NOT the official SQuAD train/dev split")
        train_source = eval_source = config.offline_split
    else:
        train_articles, eval_articles = squad.load_squad(config.train), squad.load_squad(config.eval)
        label = f"train={config.train}, eval={config.eval}"
        train_source, eval_source = config.train, config.eval
    if config.verbose == 0:  # progress lines of our own instead of Keras's
        print(f"Windowing the questions into {config.seq_len}-token features ({label}) ...",
              flush=True)
    train_features = preprocessor.featurize_articles(train_articles, training=True)
    if config.max_train_examples:
        train_features = train_features.head(config.max_train_examples)
    if not len(train_features):
        raise ValueError(
            f"SQuAD {train_source}: no training question has its first answer's text in its "
            "context at the given answer_start (or nearby), so nothing is left to train on.")
    eval_features = preprocessor.featurize_articles(eval_articles, training=False)
    if not len(eval_features):
        raise ValueError(f"SQuAD {eval_source}: no question to evaluate on.")
    return SquadData(preprocessor, train_features, eval_features, eval_articles, label,
                     config.epochs)


def encoder_and_windows(config):
    """`(backbone, data)`: `config.init`'s encoder (its length checked) and `config`'s
    windows (`squad_data`) on its tokenizer."""
    backbone = load_backbone(config.init)
    backbone.check_sequence_length(config.seq_len)
    return backbone, squad_data(config, task_tokenizer(config.init, backbone, config.vocab,
                                                       config.lowercase))


def finetune_squad(config, data=None):
    """Fine-tunes a span-QA head with Keras's `fit`; returns official EM/F1 on the
    evaluation questions (`train_squad` with the `FIT` engine and the one member
    `(config.seed, config.learning_rate)`).

    The task owns its data path: `TupeSpanQA` with a `TupeSpanQAPreprocessor` on the
    encoder's tokenizer, whose `featurize_articles` windows the raw questions and
    contexts (each token's characters from tensorflow-text, or in pure Python where it
    is absent: `keras_tupe.models.wordpiece_offsets`); `fit` and `predict` take the
    windows in batches on tf.data, or on Grain where TensorFlow is absent
    (`config.data_loader`). So it runs on a JAX machine without TensorFlow. `data`
    (`squad_data`'s for this config) skips windowing again. With `config.out`, the result
    and the predictions are written there.
    """
    [(result, predictions)] = _train_squad(config, [(config.seed, config.learning_rate)], FIT,
                                           data)
    if config.out:
        with output_lock(config.out, command="finetune_squad", flag="`out=`"):
            os.makedirs(config.out, exist_ok=True)
            write_json(os.path.join(config.out, "squad_results.json"),
                       {"config": dataclasses.asdict(config), "result": result})
            write_text(os.path.join(config.out, "squad_predictions.json"), json.dumps(predictions))
    return result


def train_squad(config, members, engine=FIT, data=None):
    """Fine-tunes `config.init` on SQuAD once for each member, a `(seed, learning_rate)`,
    with `engine`; returns a result a member (EM/F1 on the evaluation questions, with its
    `learning_rate` and `seed`).

    The one way to train SQuAD, as `train_glue` for GLUE: `engine` is `FIT` (Keras's `fit`,
    a member at a time, any backend) or a `Grid` (every member in one compiled program,
    JAX). Either trains each member from `config.init` (or its `Grid.inits` entry) on the
    same windows (`data`, `squad_data`'s, cut here unless given), in its seed's batch
    order, with its seed's initialization and dropout; a grid's smaller last batch is a
    full one whose copies weigh 0. A grid on an offline split needs `split_seed` (the
    windows are cut once for every member). `config.learning_rate` and `config.seed` are
    not used. With `config.save_dir` (`FIT`, one member), the model is kept there as a
    preset folder with its preprocessor.
    """
    return [result for result, _ in _train_squad(config, members, engine, data)]


def _train_squad(config, members, engine, data):
    """`train_squad`'s results, each with its predictions `{question id: answer}`."""
    engine.check(config, members)
    if engine.name == "grid":
        check_one_split(config.offline_split, config.split_seed)
    # Before the encoder, the data and the windowing: a mistake in the settings alone.
    check_question_room(config.seq_len, config.max_query_length, ("seq_len", "max_query_length"))
    if config.save_dir:  # refused before any training
        refuse_existing_folder(config.save_dir)
    if data is None:
        _, data = encoder_and_windows(config)

    def build(seed, init=config.init):  # trained and evaluated on the windows
        return TupeSpanQA(load_backbone(init))

    trained = engine.train(config, build, data, members, talk=config.verbose == 0)
    found = []
    for (seed, rate), member in zip(members, trained, strict=True):
        outputs = member.outputs["eval"]
        predictions = postprocess(data.eval_features, outputs["start_positions"],
                                  outputs["end_positions"], data.eval_articles)
        result = {"learning_rate": rate, "seed": seed, "data": data.label,
                  **squad_evaluate(data.eval_articles, predictions),
                  "train_features": int(len(data.train_features.token_ids)),
                  "train_seconds": member.seconds, **member.engine,
                  "eval_questions": len(predictions), "data_loader": member.loader}
        found.append((result, predictions))
    if config.save_dir:
        [member], [(result, _)] = trained, found
        member.model.preprocessor = data.preprocessor  # saved with it, for raw questions
        write_preset_folder(member.model, config.save_dir, FINETUNING_RECORD,
                            {"task": "squad", "config": dataclasses.asdict(config),
                             "result": result})
    return found


def check_one_split(offline_split, split_seed):
    """Raises ValueError for a grid on an offline split without `split_seed`: run by run
    each seed cuts its own split; a grid cuts one for every member."""
    if offline_split and split_seed is None:
        raise ValueError(f"A grid cuts one split of {offline_split} for all its members; "
                         "without split_seed each run's split follows its seed. Set "
                         "split_seed (valid: an int >= 0).")


def finetune_squad_grid(config, learning_rates, seeds, precision="float32",
                        steps_per_dispatch=100, inits=None, data=None):
    """Fine-tunes `config.init` on SQuAD at every `(learning_rates[i], seeds[i])` at once,
    in one compiled program; returns a result a member, as `finetune_squad` returns for
    one run, with its `learning_rate` and `seed` (`train_squad` with the `Grid` engine).
    `inits` (one encoder a member, of one architecture and `config`'s vocabulary) trains
    several encoders in the program, as `finetune_glue_grid`. Each member is the run
    `finetune_squad` makes at its rate and seed on the Grain loader. `data`
    (`squad_data`'s) skips windowing again.
    """
    check_backend()
    seeds, learning_rates, inits = merged_members(seeds, learning_rates, inits)
    return train_squad(config, check_members(seeds, learning_rates),
                       Grid(precision, steps_per_dispatch, inits), data)


def run_squad_protocol(config, run, together=()):
    """`finetune_squad` over learning rates x seeds, resumable, as `run_protocol` for GLUE.

    Args:
        config: a `ProtocolConfig` of `tasks=["squad"]`: its `out` folder, the grid
            (`learning_rates`, `seeds`, `selection_seed`, `edge_learning_rates`), `grid`
            and the grid's `precision` and `steps_per_dispatch` (no `save_models`).
        run: a `SquadConfig`, the settings of every run (`init` the encoder); each run sets
            its own `learning_rate` and `seed`.
        together: with `grid`, more encoders `(init, out)` of `run.init`'s architecture and
            vocabulary, trained in the same programs, each with its own folder, lock and
            `results.jsonl`.

    Each finished run is appended to `out/results.jsonl` as a row of the GLUE protocol's
    form (`task` "squad", `learning_rate`, `seed`, `dev`: `{"eval": {"exact_match", "f1",
    "score"}}`, score = F1 / 100), so the GLUE summaries and study reports read it; a run
    already there is skipped. Returns every row (of `out`). With `grid` (JAX), the runs
    train together in one program a round (`finetune_squad_grid`), in `run_protocol`'s
    rounds: every rate x every seed, then any edge rate the choice asks for, then that
    rate's other seeds.
    """
    protocol = check_protocol(config, run, SquadConfig, together)
    if list(config.tasks) != ["squad"]:
        raise ValueError(f"run_squad_protocol runs tasks=['squad']; received {config.tasks} "
                         "(GLUE tasks: run_protocol).")
    if config.save_models:
        raise ValueError("run_squad_protocol keeps no model (save_models=False): "
                         "finetune_squad(save_dir=...) keeps one run's.")
    if config.grid:
        check_one_split(run.offline_split, run.split_seed)
        check_backend()
    encoders = [(run.init, config.out), *together]
    with contextlib.ExitStack() as locks:
        found = []
        for _, folder in encoders:
            locks.enter_context(output_lock(folder, command="finetune_squad",
                                            flag="`out=`"))
            os.makedirs(folder, exist_ok=True)
            found.append(read_results(folder))
        if config.grid:
            _run_squad_grids(config, protocol, run, [(start, *paths) for (start, _), paths in zip(
                encoders, found)])
            return found[0][1]
        results_path, rows = found[0]
        windows = _windows(run)
        for _, rate, seed in protocol.runs(rows, ["squad"]):
            number = protocol.run_number(rows, ["squad"])
            print(f"squad lr={rate:g} seed={seed}: fine-tuning ({number}) ...", flush=True)
            start = time.perf_counter()
            each = dataclasses.replace(run, learning_rate=rate, seed=seed)
            result = finetune_squad(each, windows(each))
            row = _squad_row(rate, seed, each.epochs, result)
            row["wall_seconds"] = time.perf_counter() - start
            rows.append(row)
            append_result(results_path, row)
            print(f"squad lr={rate:g} seed={seed}: EM {result['exact_match']:.2f}, "
                  f"F1 {result['f1']:.2f}", flush=True)
        return rows


def _windows(run):
    """`windows(config)`: the windows of `run`'s runs, cut at the first and kept for the
    next ones; None (each run cuts its own) where they follow a run's seed (an offline
    split without `split_seed`)."""
    kept = []

    def windows(config):
        if run.offline_split and run.split_seed is None:
            return None
        if not kept:
            kept.append(encoder_and_windows(config)[1])
        return kept[0]

    return windows


def _squad_row(rate, seed, epochs, result):
    """A run's row of `results.jsonl` (the GLUE protocol's form)."""
    kept = ("data", "train_features", "eval_questions", "train_seconds", "grid_members",
            "grid_compiles", "precision")
    return {"task": "squad", "learning_rate": rate, "seed": seed, "epochs": epochs,
            **{key: result[key] for key in kept if key in result},
            "dev": {"eval": {"exact_match": result["exact_match"], "f1": result["f1"],
                             "score": result["f1"] / 100}}}


def _run_squad_grids(config, protocol, run, encoders):
    """`run_squad_protocol`'s rounds of grids over `encoders` (`(init, results_path,
    rows)`), the windows cut once, for the first round."""
    base, data = dataclasses.replace(run, init=encoders[0][0]), None
    for members in protocol.grid_rounds([rows for _, _, rows in encoders], "squad"):
        if data is None:  # cut once, and only when a round is left to run
            _, data = encoder_and_windows(base)
        print(f"squad: {len(members)} runs in one grid ...", flush=True)
        start = time.perf_counter()
        found = finetune_squad_grid(
            base, [rate for _, rate, _ in members], [seed for _, _, seed in members],
            **grid_settings(config), data=data,
            inits=[encoders[index][0] for index, _, _ in members] if len(encoders) > 1 else None)
        for (index, _, _), result in zip(members, found):
            start_from, results_path, rows = encoders[index]
            row = _squad_row(result["learning_rate"], result["seed"], base.epochs, result)
            row["wall_seconds"] = time.perf_counter() - start  # the whole grid's
            rows.append(row)
            append_result(results_path, row)
            print(f"squad lr={row['learning_rate']:g} seed={row['seed']}"
                  f"{f' {start_from}' if len(encoders) > 1 else ''}: EM "
                  f"{result['exact_match']:.2f}, F1 {result['f1']:.2f}", flush=True)
