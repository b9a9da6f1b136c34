"""GLUE fine-tuning with the papers' protocol: the library behind `training.finetune_glue`.

`finetune_glue` fine-tunes one encoder on one task at one learning rate and seed and
returns its dev metrics after the last epoch (no model selection on dev). `run_protocol`
runs the grid of TUPE / Huang et al. (rates {2,3,4,5}e-5 x 5 seeds, 10 epochs, 5 for
MNLI/QQP/QNLI, batch 32, 6% warm-up, linear decay), resumable from `results.jsonl`, and
writes the table of medians (`keras_tupe.finetuning.summary`).
"""

import dataclasses
import math
import os
import re
import time
import warnings
from contextlib import ExitStack
from typing import NamedTuple

import keras_hub
import numpy as np

from keras_tupe.data import glue
from keras_tupe.finetuning.batches import batches, packed, resolve_loader
from keras_tupe.finetuning.engines import (FIT, GRID_MEMBERS, Grid, build_preprocessor,
                                          check_global_batch)
from keras_tupe.finetuning.loading import (
    check_tokenizer_size,
    default_vocabulary,
    encoder_config,
    load_backbone,
    resolve_init,
    save_classifier,
)
from keras_tupe.finetuning.protocol import Protocol
from keras_tupe.finetuning.summary import append_result, read_results, write_tables
from keras_tupe.data.order import members_rows
from keras_tupe.grid import (GridTrainer, check_backend, check_grid_memory, check_members,
                             merged_members)
from keras_tupe.metrics import glue_metrics, glue_score
from keras_tupe.models import (
    TupeBackbone,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)
from keras_tupe.models.preset_folders import refuse_existing_folder
from keras_tupe.processes import current
from keras_tupe_base import files, settings
from keras_tupe_base.checks import merge_repeats
from keras_tupe_base.folders import made_folder
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.settings import LAYOUT_FIELDS, FinetuneConfig, ProtocolConfig

SHORT_TASKS = ("mnli", "qqp", "qnli")  # 5 epochs instead of 10


def paper_epochs(task):
    return 5 if task in SHORT_TASKS else 10


# `pad_each_batch` rounds each training batch's length up to a multiple of this: at most
# 8 lengths to compile at 128 (32 compiled fewer, but its longer steps cost more over
# the studies' 3 epochs: docs/results/finetune_speed.md).
BATCH_PAD_MULTIPLE = 16


def finetune_glue(config, splits=None):
    """Fine-tunes `config.init` on one GLUE task at `config.learning_rate` and `config.seed`
    with Keras's `fit`; returns its row: the dev metrics and timings (`train_glue` with the
    `Fit` engine and one member).

    The task's data path is keras-hub's: the task's `TupeTextClassifierPreprocessor`
    tokenizes and packs each split once (`glue_data`), and `fit` trains on those arrays on
    tf.data where TensorFlow imports and on Grain where it does not (`config.data_loader`).
    `splits` (`{split: GlueExamples}`, the task's train and evaluation splits) skips
    loading them.
    """
    return train_glue(config, [(config.seed, config.learning_rate)], FIT, splits)[0]


class GlueData(NamedTuple):
    """A GLUE task's inputs, prepared once for every run of it by either engine
    (`glue_data`; `keras_tupe.finetuning.engines` says what an engine reads): the
    `tokenizer`, the packed train inputs and labels (`source`), the packed inputs of each
    evaluation split (`evaluated`) and their `labels`, the packed `lengths` of each split,
    the `epochs`, and `trim`: each `fit` batch cut after its longest example, rounded up
    to a multiple of it (`pad_each_batch`), or None."""

    task: str
    tokenizer: object
    source: tuple
    evaluated: dict
    labels: dict
    lengths: dict
    epochs: int
    trim: int = None

    @property
    def train_length(self):
        return self.lengths["train"]

    def head(self, backbone):
        """The task's classifier of `backbone` (for `check_grid_memory`'s count)."""
        return _classifier_of(glue.get_task(self.task))(backbone)

    def orders(self, seeds, batch_size):
        """Each seed's batch order, `(rows, weights)`, each `(steps, len(seeds), batch)`:
        a new permutation an epoch, the last batch filled with weight 0 (`epoch_rows`:
        the order the Grain loader gives a run of that seed)."""
        return members_rows(len(self.source[1]), batch_size, seeds, self.epochs)

    def fit_batches(self, seed, batch_size, loader, part=(0, 1)):
        """A run's batches for `fit`: `(dataset, steps_per_epoch)`, the last batch filled
        to the batch size (its copies weigh 0); `part`, `(index, count)`: process `index`'s
        rows of each (`batches`)."""
        return batches(*self.source, batch_size, shuffle=True, seed=seed, fill_last_batch=True,
                       epochs=self.epochs, loader=loader, trim_to_multiple_of=self.trim,
                       part=part)

    def compiled(self):
        """The train lengths a `fit` run compiles its step for, at most."""
        return compiled_lengths(self.train_length, self.trim)


def glue_data(config, splits=None):
    """The inputs every run of `config.task` takes (`GlueData`), for `config.init`'s
    tokenizer: each split packed once at its length (`seq_len`, or with `pad_to_longest`
    its longest example), `max_train_examples` of the train split. Checks first that the
    encoder takes `seq_len` and that the tokenizer tokenizes here."""
    spec = glue.get_task(config.task)
    _, tokenizer, splits, train_examples, epochs = _task_inputs(config, spec, splits)
    check_tokenizes(TupeTextClassifierPreprocessor(tokenizer, sequence_length=config.seq_len),
                    _segments(train_examples), config.init)
    lengths = _split_lengths(config, tokenizer, spec, splits, train_examples)

    def pack(split, examples):
        return packed(TupeTextClassifierPreprocessor(tokenizer, sequence_length=lengths[split]),
                      _segments(examples))

    return GlueData(config.task, tokenizer,
                    (pack("train", train_examples), _labels(spec, train_examples)),
                    {split: pack(split, splits[split]) for split in spec.eval_splits},
                    {split: splits[split].labels for split in spec.eval_splits}, lengths, epochs,
                    BATCH_PAD_MULTIPLE if config.pad_each_batch else None)


def _check_one_length(config):
    """A grid trains one length: refuses `pad_each_batch`."""
    if config.pad_each_batch:
        raise ValueError("pad_each_batch cuts each batch to its own length, a compile per "
                         "length; a grid trains one length. Valid: pad_each_batch=False "
                         "(pad_to_longest still pads a split to its longest example).")


def member_builder(config, data):
    """`build(seed, init=config.init)`: a member's classifier (`task_classifier`, from
    `init`), trained and evaluated on `data`'s packed inputs (no preprocessor)."""

    def build(seed, init=config.init):
        model = task_classifier(config, load_backbone(init), data.tokenizer, data.train_length)
        model.preprocessor = None
        return model

    return build


def train_glue(config, members, engine=FIT, splits=None, data=None):
    """Fine-tunes `config.init` on `config.task` once for each member, a `(seed,
    learning_rate)`, with `engine`; returns a row a member (`result_row`).

    The one way to train a GLUE task: `engine` is `FIT` (Keras's `fit`, a member at a time;
    any backend) or a `Grid` (every member in one compiled program, JAX;
    `keras_tupe.finetuning.engines`). Either trains each member from `config.init` (or
    its `Grid.inits` entry) on the same packed inputs (`data`, a `GlueData`, prepared here
    unless given: a protocol prepares it once a task) in its seed's batch order, with its
    seed's initialization and dropout, and evaluates it on the task's evaluation splits
    (`dev_results`). `config.learning_rate` and `config.seed` are not used. With
    `config.save_dir` (`FIT`, one member), the classifier is kept there as a preset
    folder with its preprocessor.
    """
    engine.check(config, members)
    if engine.name == "grid":
        _check_one_length(config)
    if config.save_dir:  # refused before anything is read, by save_classifier's own rule
        refuse_existing_folder(config.save_dir)
    data = data or glue_data(config, splits)
    compiled = data.compiled() if engine.name == "fit" else [data.train_length]
    if config.progress and engine.name == "fit":
        print(f"{config.task}: the training step compiles for at most {len(compiled)} "
              f"length(s) ({', '.join(map(str, compiled))}) at batch {config.batch_size}, "
              f"prediction for one length a split; data on "
              f"{resolve_loader(config.data_loader)}.", flush=True)
    trained = engine.train(config, member_builder(config, data), data, members,
                           talk=config.progress)
    results = dev_results(config.task, data.labels,
                          lambda split: [member.outputs[split] for member in trained])
    if config.save_dir and current().writer:  # across processes, process 0 writes
        [member], [result] = trained, results
        spec = glue.get_task(config.task)
        _use_preprocessor(member.model, TupeTextClassifierPreprocessor(
            data.tokenizer, sequence_length=config.seq_len))
        save_classifier(member.model, config.save_dir, data.tokenizer, {
            "task": config.task, "seq_len": config.seq_len, "lowercase": config.lowercase,
            "num_segments": 2 if spec.is_pair else 1, "label_names": list(spec.label_names),
            "init": config.init, "learning_rate": members[0][1], "seed": members[0][0],
            "epochs": data.epochs, "dev": result})
    return [result_row(config.task, rate, seed, data.epochs, len(data.source[1]), data.lengths,
                       compiled, member.seconds, member.loader, result, **member.engine)
            for (seed, rate), member, result in zip(members, trained, results, strict=True)]


def _task_inputs(config, spec, splits):
    """A run's encoder (its length checked), tokenizer, splits (loaded unless given),
    train examples (`max_train_examples` of them) and epochs."""
    backbone = load_backbone(config.init)
    backbone.check_sequence_length(config.seq_len)
    tokenizer = task_tokenizer(config.init, backbone, config.vocab, config.lowercase)
    splits = splits or {split: glue.load_glue(config.task, split, config.data_dir)
                        for split in ("train", *spec.eval_splits)}
    train_examples = splits["train"]
    if config.max_train_examples:
        train_examples = _head(train_examples, config.max_train_examples)
    if not len(train_examples):
        raise ValueError(f"GLUE {config.task} train has no examples: nothing to fine-tune on.")
    return backbone, tokenizer, splits, train_examples, config.epochs or paper_epochs(config.task)


def _split_lengths(config, tokenizer, spec, splits, train_examples):
    """`{split: packed length}` of the train and evaluation splits (`_padded_length`)."""
    return {split: _padded_length(config, tokenizer, examples)
            for split, examples in (("train", train_examples),
                                    *((split, splits[split]) for split in spec.eval_splits))}


def packed_lengths(config, splits=None):
    """`{split: packed length}`: the lengths a run of `config` packs its task's train and
    evaluation splits at (`seq_len`, or with `pad_to_longest` each split's longest example,
    `max_train_examples` of the train split), the shapes its programs are compiled for."""
    spec = glue.get_task(config.task)
    _, tokenizer, splits, train_examples, _ = _task_inputs(config, spec, splits)
    return _split_lengths(config, tokenizer, spec, splits, train_examples)


def task_classifier(config, backbone, tokenizer, train_length):
    """The classifier a run of `config.task` trains: `backbone` at the fine-tuning dropout,
    a head of the task's size, and the task's preprocessor at `train_length`."""
    backbone = _with_dropout(backbone, config.dropout)
    return TupeTextClassifier(backbone, num_classes=glue.get_task(config.task).num_classes,
                              dropout=config.dropout, preprocessor=TupeTextClassifierPreprocessor(
                                  tokenizer, sequence_length=train_length))


def finetune_glue_grid(config, learning_rates, seeds, splits=None, precision="float32",
                       steps_per_dispatch=100, inits=None):
    """Fine-tunes `config.init` on `config.task` at every `(learning_rates[i], seeds[i])`
    at once, in one compiled program; returns a row a member, as `finetune_glue` returns
    for one run (`train_glue` with the `Grid` engine). `inits` (one encoder a member, of
    one architecture and `config`'s vocabulary) fine-tunes several encoders in the
    program: member `i` starts from `inits[i]`. Each member is the run `finetune_glue`
    makes at its rate and seed on the Grain loader (the same initialization, dropout seeds
    and batch order); `config.learning_rate` and `config.seed` are not used.
    """
    check_backend()
    seeds, learning_rates, inits = merged_members(seeds, learning_rates, inits)
    return train_glue(config, check_members(seeds, learning_rates),
                      Grid(precision, steps_per_dispatch, inits), splits)


def dev_results(task, labels, predict):
    """Each member's dev metrics and score, a dict a member: `predict(split)` gives every
    member's outputs on `split` (the task's evaluation splits, whose `labels` are given).
    Both engines evaluate through it: `fit`'s run is a grid of one member."""
    spec, results = glue.get_task(task), None
    for split in spec.eval_splits:
        outputs = predict(split)
        results = results or [{} for _ in outputs]
        for result, output in zip(results, outputs, strict=True):
            predictions = output if spec.num_classes == 1 else np.argmax(output, axis=-1)
            metrics = glue_metrics(task, predictions, labels[split])
            result[split] = {**metrics, "score": glue_score(task, metrics)}
    return results


def result_row(task, learning_rate, seed, epochs, train_examples, lengths, compiled, seconds,
               loader, dev, **engine):
    """A run's row (`results.jsonl`), from either engine; `engine`: what only it records
    (`fit`'s `epoch_seconds`; a grid's members, compiles and precision)."""
    return {"task": task, "learning_rate": learning_rate, "seed": seed, "epochs": epochs,
            "train_examples": train_examples, "sequence_lengths": lengths,
            "train_lengths_compiled_at_most": compiled, "train_seconds": seconds, **engine,
            "data_loader": loader, "dev": dev}


class GlueGrid(NamedTuple):
    """A GLUE task's grid, built and not trained (`glue_grid`): the `trainer`, its
    `source` (packed train inputs, labels), `rows` and `weights` (each member's batches),
    the packed inputs of each evaluation split (`evaluated`) and their `labels`, the
    `epochs` and the packed `lengths` of each split."""

    trainer: GridTrainer
    source: tuple
    rows: np.ndarray
    weights: np.ndarray
    evaluated: dict
    labels: dict
    epochs: int
    lengths: dict


def glue_grid(config, learning_rates, seeds, splits=None, precision="float32",
              steps_per_dispatch=100, inits=None):
    """The grid `finetune_glue_grid` trains, built (its members as given, `(seeds[i],
    learning_rates[i])`), a `GlueGrid`. Public so that a grid can be built and compiled
    ahead of its run: `grid.trainer.compile_fit(grid.source, grid.rows, grid.weights)` and
    `compile_predict` on each of `grid.evaluated`; with JAX's persistent compilation cache
    set, a run of the same shapes later (other encoders of this architecture, other
    rates and seeds, another process) loads the programs instead of compiling them."""
    engine = Grid(precision, steps_per_dispatch, inits)
    members = check_members(seeds, learning_rates)
    engine.check(config, members)
    _check_one_length(config)
    data = glue_data(config, splits)
    rows, weights = data.orders([seed for seed, _ in members], config.batch_size)
    trainer = engine.trainer(config, member_builder(config, data), data, members, len(rows))
    return GlueGrid(trainer, data.source, rows, weights, data.evaluated, data.labels,
                    data.epochs, data.lengths)


def _classifier_of(spec):
    """The classifier of `spec`'s task on a backbone (for `check_grid_memory`'s count)."""
    return lambda backbone: TupeTextClassifier(backbone, num_classes=spec.num_classes,
                                               preprocessor=None)


def _use_preprocessor(model, preprocessor):
    """`model` takes `preprocessor` (saved with it), fitted to its backbone
    (`fit_preprocessor`) and built (`build_preprocessor`)."""
    model.preprocessor = preprocessor
    model.fit_preprocessor()
    build_preprocessor(model)


def compiled_lengths(split_length, pad_multiple):
    """The sequence lengths a training split's batches can have: its length, or with
    `pad_multiple` every multiple of it below, and the length itself."""
    if pad_multiple is None:
        return [split_length]
    return list(range(pad_multiple, split_length, pad_multiple)) + [split_length]


def _segments(examples):
    """The raw text a classifier takes: the sentences, or a tuple of the two lists."""
    if examples.sentence2 is None:
        return examples.sentence1
    return examples.sentence1, examples.sentence2


def _labels(spec, examples):
    return np.asarray(examples.labels, np.float32 if spec.is_regression else np.int32)


def _padded_length(config, tokenizer, examples):
    """The packed length of a split: `seq_len`, or with `pad_to_longest` its longest
    example rounded up to a multiple of 8, at most `seq_len`."""
    if not config.pad_to_longest:
        return config.seq_len
    longest = longest_packed_length(tokenizer, _segments(examples))
    return min(config.seq_len, 8 * math.ceil(longest / 8))


def longest_packed_length(tokenizer, segments, chunk=1024):
    """The packed length of the longest example: its tokens plus the special tokens.

    `segments`: a list of sentences, or a tuple of two lists (pairs). The specials are
    [CLS] and one [SEP] a segment, and for pairs the tokenizer's extra separators
    (`pair_separators`, 2 for `TupeBpeTokenizer`). Tokenized eagerly (keras-hub's
    Python path): no TensorFlow needed.
    """
    segments = segments if isinstance(segments, tuple) else (segments,)
    specials = len(segments) + 1 + (getattr(tokenizer, "pair_separators", 1) - 1
                                    if len(segments) == 2 else 0)
    longest = 0
    for start in range(0, len(segments[0]), chunk):
        lengths = sum(np.array([len(ids) for ids in _rows(tokenizer(list(column[start:start + chunk])))])
                      for column in segments)
        longest = max(longest, int(np.max(lengths)))
    return longest + specials


def _rows(token_ids):
    """A tokenizer's eager output as rows of ids (lists, a ragged or a dense batch)."""
    if hasattr(token_ids, "to_list"):
        return token_ids.to_list()
    return list(token_ids)


def task_tokenizer(init, backbone, vocab=None, lowercase=True):
    """The tokenizer fine-tuning gives the task's preprocessor.

    `vocab` (a WordPiece vocabulary file) when given; else the tokenizer of `init`'s
    preset folder (a run's `preset/`), WordPiece or the TUPE authors' BPE; else a
    `TupeTokenizer` of the vocabulary beside `init` (`default_vocabulary`). Refused
    unless its size is the encoder's vocabulary size.
    """
    preset = resolve_init(init) if vocab is None else None
    if preset is not None and os.path.isfile(os.path.join(preset, "tokenizer.json")):
        tokenizer, source = keras_hub.tokenizers.Tokenizer.from_preset(preset), preset
    else:
        source = str(vocab or default_vocabulary(init))
        if not os.path.isfile(source):
            raise FileNotFoundError(f"Vocabulary file {source} does not exist.")
        # Pure Python: refused before training, naming the line (keras-hub names neither).
        files.check_unique_tokens(source, files.vocabulary_tokens(source))
        tokenizer = TupeTokenizer(vocabulary=source, lowercase=lowercase)
    return check_tokenizer_size(tokenizer, backbone, source)


def check_tokenizes(preprocessor, segments, init):
    """Packs the first example as training will, or raises one line saying why it cannot.

    Runs before any training, on the path the data loader takes (keras-hub's Python
    path for Grain), so a tokenizer that needs TensorFlow where there is none fails
    here, naming the encoder and the reason.
    """
    first = (tuple(column[:1] for column in segments) if isinstance(segments, tuple)
             else segments[:1])
    try:
        preprocessor(first, None)  # `(x, None)`: a pair alone would read as `(x, y)`
    except Exception as error:  # noqa: BLE001 - any failure: one line, before training
        # Keras wraps a layer's error: "Exception encountered when calling ...", then the
        # original message (in bold); keep that one.
        lines = [re.sub(r"\x1b\[[0-9;]*m", "", line).strip()
                 for line in str(error).splitlines()]
        reason = next((line for line in lines
                       if line and not line.startswith("Exception encountered")), "")
        raise ValueError(
            f"{init}: its tokenizer ({type(preprocessor.tokenizer).__name__}) cannot tokenize "
            f"here: {type(error).__name__}: {reason}"
        ) from error


def _head(examples, n):
    return dataclasses.replace(
        examples,
        sentence1=examples.sentence1[:n],
        sentence2=None if examples.sentence2 is None else examples.sentence2[:n],
        labels=examples.labels[:n],
    )


def _with_dropout(backbone, dropout):
    if backbone.dropout == dropout:
        return backbone
    config = {**backbone.get_config(), "dropout": dropout}
    rebuilt = TupeBackbone.from_config(config)
    rebuilt.set_weights(backbone.get_weights())
    return rebuilt


def _preflight(tasks, init, run, task_settings):
    """Loads the encoder, tokenizer and every split once, and packs each task's first
    example as training will: errors before any training. Returns the splits,
    `{task: {split: GlueExamples}}`, which every run of the task takes."""
    resolve_loader(run.data_loader)
    backbone = load_backbone(init)
    for task in tasks:
        backbone.check_sequence_length(task_run(run, task, task_settings).seq_len)
    tokenizer = task_tokenizer(init, backbone, run.vocab, run.lowercase)
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=16)
    splits = {}
    for task in tasks:
        for split in ("train",) + tuple(glue.GLUE_TASKS[task].eval_splits):
            examples = glue.load_glue(task, split, run.data_dir)
            if not len(examples):
                raise ValueError(f"GLUE {task} {split} has no examples: nothing to "
                                 f"{'fine-tune on' if split == 'train' else 'evaluate'}.")
            if split == "train":
                check_tokenizes(preprocessor, _segments(examples), init)
            splits.setdefault(task, {})[split] = examples
    return splits


def task_run(run, task, task_settings=None, **each):
    """`run`'s settings for `task`: its `task_settings` entry (`TASK_SETTINGS`) and `each`
    run's own (`learning_rate`, `seed`, `init`, `save_dir`) over them."""
    return dataclasses.replace(run, task=task, **(task_settings or {}).get(task, {}), **each)


def grid_settings(config):
    """A protocol's `finetune_glue_grid` / `finetune_squad_grid` settings: its
    `precision` and `steps_per_dispatch`, those given."""
    return {name: getattr(config, name) for name in ("precision", "steps_per_dispatch")
            if getattr(config, name) is not None}


def _check_grids_fit(config, protocol, run, encoders, task_settings):
    """Refuses, before the data or any encoder is loaded, a protocol whose first grid (every
    rate x every seed of every encoder; with a selection seed, every rate of it) would
    not fit the device at `seq_len` (`check_grid_memory`). With `pad_to_longest` the
    length is known once a task is packed: `finetune_glue_grid` checks it then."""
    members = len(protocol.learning_rates) * encoders * (
        1 if protocol.selection_seed is not None else len(protocol.seeds))
    backbone = encoder_config(run.init)
    for task in config.tasks:
        each = task_run(run, task, task_settings)
        if not each.pad_to_longest:
            check_grid_memory(backbone, members, each.batch_size, each.seq_len,
                              config.precision or "float32",
                              task=_classifier_of(glue.get_task(task)),
                              members_are=GRID_MEMBERS + (" x encoders" if encoders > 1 else ""))


def _run_grids(config, protocol, run, encoders, prepared, task_settings, writer=True):
    """`run_protocol`'s rounds of grids: each task's runs to do of every encoder
    (`(init, results_path, rows)`), in one program a round, on the task's inputs
    (`prepared(task, config)`); their rows written and printed where `writer`."""
    for task in config.tasks:
        for members in protocol.grid_rounds([rows for _, _, rows in encoders], task):
            if run.progress:
                print(f"{task}: {len(members)} runs in one grid ...", flush=True)
            start = time.perf_counter()
            each = task_run(run, task, task_settings, init=encoders[0][0])
            engine = Grid(**grid_settings(config), inits=[
                encoders[index][0] for index, _, _ in members] if len(encoders) > 1 else None)
            found = train_glue(each, [(seed, rate) for _, rate, seed in members], engine,
                               data=prepared(task, each))
            for (index, _, _), row in zip(members, found):
                init, results_path, rows = encoders[index]
                row["wall_seconds"] = time.perf_counter() - start  # the whole grid's
                rows.append(row)
                if not writer:
                    continue
                append_result(results_path, row)
                scores = {split: round(100 * m["score"], 2) for split, m in row["dev"].items()}
                print(f"{task} lr={row['learning_rate']:g} seed={row['seed']}"
                      f"{f' {init}' if len(encoders) > 1 else ''}: {scores}", flush=True)


def _prepared(splits):
    """`prepared(task, config)`: the task's `GlueData` (`glue_data`), made at its first run
    and kept for the next ones, one task at a time (a task's packed inputs are large)."""
    kept = {}

    def prepared(task, config):
        if task not in kept:
            kept.clear()
            kept[task] = glue_data(config, splits[task])
        return kept[task]

    return prepared


TASK_SETTINGS = ("epochs", "batch_size", "seq_len", "max_train_examples", "warmup_ratio",
                 "weight_decay", "dropout")


def check_task_settings(tasks, task_settings):
    """Raises ValueError for a task not in `tasks` or a setting not in `TASK_SETTINGS`."""
    problems = [f"{task!r} is not one of the tasks {list(tasks)}"
                for task in task_settings if task not in tasks]
    problems += [f"{task}: {key!r} cannot change by task (valid: {list(TASK_SETTINGS)})"
                 for task, settings in task_settings.items() for key in settings
                 if key not in TASK_SETTINGS]
    if problems:
        raise ValueError("task_settings: " + "; ".join(problems))


def check_protocol(config, run, run_class, together=()):
    """`config` (a `ProtocolConfig`) and `run` (a `run_class`) checked as the commands check
    them (`keras_tupe_base.settings.check`: every problem at once, a ValueError), and
    `config`'s `Protocol`. `together` needs `grid` (which needs JAX: the caller's check)."""
    if not isinstance(config, ProtocolConfig) or not isinstance(run, run_class):
        raise TypeError(f"A protocol takes a ProtocolConfig and a {run_class.__name__}; "
                        f"received {type(config).__name__} and {type(run).__name__}.")
    settings.check(config)
    settings.check(run)
    if together and not config.grid:
        raise ValueError("together trains more encoders in a grid's programs: set grid=True "
                         "in the ProtocolConfig.")
    return Protocol(config.learning_rates, config.seeds, config.selection_seed,
                    config.edge_learning_rates)


def _protocol_settings(config, run, task_settings, together):
    """What every process of a grid across processes must be given alike: the protocol's
    settings but the process layout, the runs', each task's and the other encoders."""
    layout = (*LAYOUT_FIELDS, "coordinator_timeout")
    return {"protocol": {k: v for k, v in dataclasses.asdict(config).items() if k not in layout},
            "run": dataclasses.asdict(run), "tasks": task_settings, "together": together}


def run_protocol(config, run, task_settings=None, together=()):
    """The papers' grid over tasks x learning rates x seeds, resumable; returns the table.

    Args:
        config: a `ProtocolConfig` (`keras_tupe_base.settings`), as `keras-tupe-finetune-glue`
            takes it: the GLUE `tasks`, the `out` folder, the grid (`learning_rates`,
            `seeds`) and how each task's rate is chosen (`selection_seed`,
            `edge_learning_rates`), `save_models`, `grid` and the grid's `precision` and
            `steps_per_dispatch`.
        run: a `FinetuneConfig`, the settings of every run (`init` the encoder); each run
            sets its own `task`, `learning_rate`, `seed` and `save_dir`.
        task_settings: `{task: {setting: value}}`, the names of `TASK_SETTINGS`: settings
            of one task, e.g. `{"sst2": {"max_train_examples": 20000}}`.
        together: with `grid`, more encoders `(init, out)` of `run.init`'s architecture and
            vocabulary, fine-tuned in the same programs (each task's runs of every encoder
            as one grid), each with its own folder, lock, `results.jsonl` and tables.

    With `save_models`, each run's classifier is kept as the preset folder
    `out/models/<task>_lr<rate>_seed<seed>/`. Holds `out`'s lock meanwhile: one writer per
    folder. With `grid` (JAX), a task's runs train together in one program a round
    (`finetune_glue_grid`): first every rate x every seed (with a selection seed the choice
    then reads from its rows, the other seeds' rows at the chosen rate counted, the rest
    kept in `results.jsonl` but outside the table), then any edge rate the choice asks for,
    then that rate's other seeds. Across processes (JAX, after
    `jax.distributed.initialize`, or `keras_tupe.processes.join(config)` of the config's
    `coordinator`, `num_processes` and `process_id`), every process calls it alike: each run
    trains data-parallel over every process's devices (`FIT`: the global batch `batch_size`,
    which their devices must divide), or with `grid` each grid's members are spread over
    them (`GridTrainer`); every process's checks and settings are gathered first (all go
    on or all stop), and process 0 alone writes `out`, which the others read (a shared file
    system).

    Example:
    >>> run_protocol(ProtocolConfig(tasks=["rte", "mrpc"], out="glue", seeds=[0, 1]),
    ...              FinetuneConfig(task="rte", init="runs/tupe_a"))  # doctest: +SKIP
    """
    protocol = check_protocol(config, run, FinetuneConfig, together)
    # A repeated task is one point of the grid (run and counted once), with a note.
    tasks, note = merge_repeats("tasks=", config.tasks)
    if note:
        warnings.warn(note, stacklevel=2)
    unknown = [t for t in tasks if t not in glue.GLUE_TASKS]
    if unknown:
        raise ValueError(f"Unknown GLUE task(s) {unknown}. Valid tasks: {sorted(glue.GLUE_TASKS)}")
    config, task_settings = dataclasses.replace(config, tasks=tasks), task_settings or {}
    check_task_settings(tasks, task_settings)
    encoders = [(run.init, config.out), *together]
    if config.grid:
        check_backend()
        _check_grids_fit(config, protocol, run, len(encoders), task_settings)
    # every input checked before anything is written
    splits = [_preflight(tasks, start, run, task_settings) for start, _ in encoders][0]
    # Across processes (each run data-parallel, or a grid's members spread): process 0 alone
    # writes, and talks.
    processes = current()
    for task in tasks if not config.grid else ():  # before anything is written
        check_global_batch(task_run(run, task, task_settings).batch_size)
    # An interruption before the first finished run leaves no folder it made; after it,
    # results.jsonl stays, to resume from.
    with ExitStack() as folders:
        problem = None
        try:
            for _, folder in encoders if processes.writer else ():
                folders.enter_context(output_lock(folder, command="finetune_glue",
                                                  flag="`out=`"))
                folders.enter_context(made_folder(folder, keep=lambda folder=folder: bool(
                    read_results(folder)[1])))
        except OSError as error:  # the lock held, a folder not made
            problem = error
        # Every process's, gathered: all go on or all stop (also on settings that differ).
        processes.agree(problem, settings=_protocol_settings(config, run, task_settings,
                                                             together),
                        num_processes=config.num_processes)
        if not processes.writer:  # its settings gathered as given; then silent
            run = dataclasses.replace(run, progress=False, verbose=0)
        found = [read_results(folder) for _, folder in encoders]
        results_path, rows = found[0]
        prepared = _prepared(splits)
        if config.grid:
            _run_grids(config, protocol, run, [(start, path, done) for (start, _), (
                path, done) in zip(encoders, found)], prepared, task_settings,
                       processes.writer)
        for task, rate, seed in ([] if config.grid else protocol.runs(rows, tasks)):
            save_dir = (os.path.join(config.out, "models", f"{task}_lr{rate:g}_seed{seed}")
                        if config.save_models else None)
            if run.progress:
                print(f"{task} lr={rate:g} seed={seed}: loading and fine-tuning "
                      f"({protocol.run_number(rows, tasks)}) ...", flush=True)
            start = time.perf_counter()
            each = task_run(run, task, task_settings, learning_rate=rate, seed=seed,
                            save_dir=save_dir)
            [row] = train_glue(each, [(seed, rate)], FIT, data=prepared(task, each))
            # Training, evaluation and, for a task's first run, its data.
            row["wall_seconds"] = time.perf_counter() - start
            rows.append(row)
            if not processes.writer:
                continue
            append_result(results_path, row)
            scores = {split: round(100 * m["score"], 2) for split, m in row["dev"].items()}
            print(f"{task} lr={rate:g} seed={seed}: {scores}", flush=True)
    tables = [protocol.summarize(done, tasks) for _, done in found]
    for (start, folder), table in zip(encoders, tables) if processes.writer else ():
        write_tables(table, folder, f"GLUE dev, {os.path.basename(os.path.normpath(start))}")
    return tables[0]
