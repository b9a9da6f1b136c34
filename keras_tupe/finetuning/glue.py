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
from contextlib import ExitStack, nullcontext
from typing import NamedTuple

import keras
import keras_hub
import numpy as np

from keras_tupe.callbacks import StepProgress
from keras_tupe.data import glue
from keras_tupe.finetuning.batches import batches, packed, resolve_loader
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
from keras_tupe.data.order import epoch_rows
from keras_tupe.grid import (GridTrainer, Schedule, check_backend, check_grid_memory,
                             check_members, merged_members)
from keras_tupe.metrics import glue_metrics, glue_score
from keras_tupe.models import (
    TupeBackbone,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)
from keras_tupe.models.preset_folders import refuse_existing_folder
from keras_tupe.optimization import create_optimizer
from keras_tupe_base import files, settings
from keras_tupe_base.checks import merge_repeats
from keras_tupe_base.folders import made_folder
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.progress import Heartbeat
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig

SHORT_TASKS = ("mnli", "qqp", "qnli")  # 5 epochs instead of 10


def paper_epochs(task):
    return 5 if task in SHORT_TASKS else 10


# `pad_each_batch` rounds each training batch's length up to a multiple of this: at most
# 8 lengths to compile at 128 (32 compiled fewer, but its longer steps cost more over
# the studies' 3 epochs: docs/results/finetune_speed.md).
BATCH_PAD_MULTIPLE = 16


def finetune_glue(config, splits=None):
    """Fine-tunes `config.init` on one GLUE task; returns the dev metrics and timings.

    The task owns its data path: raw sentences (pairs: a tuple of two lists) go to a
    `TupeTextClassifier` whose `TupeTextClassifierPreprocessor` tokenizes and packs the
    train split once before `fit` and each batch inside `predict`, on tf.data where
    TensorFlow imports and on Grain where it does not (`config.data_loader`). `splits`
    (`{split: GlueExamples}`, the task's train and evaluation splits) skips loading them:
    `run_protocol` loads each split once for all its runs.
    """
    spec = glue.get_task(config.task)
    loader = resolve_loader(config.data_loader)
    if config.save_dir:  # refused before anything is read, by save_classifier's own rule
        refuse_existing_folder(config.save_dir)
    keras.utils.set_random_seed(config.seed)
    backbone, tokenizer, splits, train_examples, epochs = _task_inputs(config, spec, splits)
    # One preprocessor a sequence length: the saved one at `seq_len`, the training one at
    # the train split's, one for each evaluation split.
    preprocessor = TupeTextClassifierPreprocessor(tokenizer, sequence_length=config.seq_len)
    check_tokenizes(preprocessor, _segments(train_examples), config.init)
    lengths = _split_lengths(config, tokenizer, spec, splits, train_examples)
    pad_multiple = BATCH_PAD_MULTIPLE if config.pad_each_batch else None
    model = task_classifier(config, backbone, tokenizer, lengths["train"])
    # The train split is packed once by the task's own preprocessor, and `fit` trains on
    # those arrays without it; each batch is cut after its longest example with
    # `pad_each_batch`. The last batch is filled to the batch size (its copies weigh 0).
    train, steps_per_epoch = batches(
        packed(model.preprocessor, _segments(train_examples)), _labels(spec, train_examples),
        config.batch_size, shuffle=True, seed=config.seed, fill_last_batch=True, epochs=epochs,
        loader=loader, trim_to_multiple_of=pad_multiple)
    model.preprocessor = None
    train_lengths = compiled_lengths(lengths["train"], pad_multiple)
    if config.progress:
        print(f"{config.task}: the training step compiles for at most {len(train_lengths)} "
              f"length(s) ({', '.join(map(str, train_lengths))}) at batch {config.batch_size}, "
              f"prediction for one length a split; data on {loader}.", flush=True)
    seconds, epoch_seconds = fit_task(model, train, config, epochs, steps_per_epoch,
                                      config.progress)

    def predict(split):  # the one member's outputs
        examples = splits[split]
        _use_preprocessor(model, TupeTextClassifierPreprocessor(  # one length a split
            tokenizer, sequence_length=lengths[split]))
        dataset, _ = batches(_segments(examples), _labels(spec, examples), config.batch_size,
                             fill_last_batch=True, loader=loader)
        if config.progress:
            print(f"Evaluating {config.task} on {split} ({len(examples.labels):,} examples) ...",
                  flush=True)
        with Heartbeat(f"  evaluating on {split}") if config.progress else nullcontext():
            return [model.predict(dataset, verbose=0)[:len(examples.labels)]]

    [results] = dev_results(config.task, {split: splits[split].labels
                                          for split in spec.eval_splits}, predict)
    _use_preprocessor(model, preprocessor)
    if config.save_dir:
        save_classifier(model, config.save_dir, tokenizer, {
            "task": config.task, "seq_len": config.seq_len, "lowercase": config.lowercase,
            "num_segments": 2 if spec.is_pair else 1, "label_names": list(spec.label_names),
            "init": config.init, "learning_rate": config.learning_rate, "seed": config.seed,
            "epochs": epochs, "dev": results})
    return result_row(config.task, config.learning_rate, config.seed, epochs,
                      len(train_examples.labels), lengths, train_lengths, seconds, loader,
                      results, epoch_seconds=epoch_seconds)


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
    at once, in one compiled program (`keras_tupe.grid.GridTrainer`, JAX); returns a row
    a member, as `finetune_glue` returns for one run. `inits` (one encoder a member, of
    one architecture and `config`'s vocabulary) fine-tunes several encoders in the program:
    member `i` starts from `inits[i]`.

    Each member is the run `finetune_glue` makes at its rate and seed on the Grain loader
    (the same initialization, dropout seeds and batch order), but the task is tokenized
    and packed once for every member, at one length (`seq_len`, or the split's longest
    with `pad_to_longest`; no `pad_each_batch`: one shape, one compile), and the schedule
    is stepped on the device. `config.learning_rate` and `config.seed` are not used.
    """
    check_backend()
    seeds, learning_rates, inits = merged_members(seeds, learning_rates, inits)
    grid = glue_grid(config, learning_rates, seeds, splits, precision, steps_per_dispatch,
                     inits)
    trainer, members = grid.trainer, grid.trainer.members
    start = time.perf_counter()
    trainer.fit(grid.source, grid.rows, grid.weights)
    seconds = time.perf_counter() - start
    results = dev_results(config.task, grid.labels, lambda split: trainer.predict(
        grid.evaluated[split], config.batch_size))
    return [result_row(config.task, rate, seed, grid.epochs, len(grid.source[1]), grid.lengths,
                       [grid.lengths["train"]], seconds, "grid", result,
                       grid_members=len(members), grid_compiles=trainer.compiles,
                       precision=precision)
            for (seed, rate), result in zip(members, results)]


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
    check_backend()
    members = check_members(seeds, learning_rates)
    if config.pad_each_batch:
        raise ValueError("pad_each_batch cuts each batch to its own length, a compile per "
                         "length; a grid trains one length. Valid: pad_each_batch=False "
                         "(pad_to_longest still pads a split to its longest example).")
    spec = glue.get_task(config.task)
    _, tokenizer, splits, train_examples, epochs = _task_inputs(config, spec, splits)
    lengths = _split_lengths(config, tokenizer, spec, splits, train_examples)
    train_x = packed(TupeTextClassifierPreprocessor(tokenizer, sequence_length=lengths["train"]),
                     _segments(train_examples))
    count = len(train_examples.labels)
    orders = [epoch_rows(count, config.batch_size, seed, epochs) for seed, _ in members]
    rows, weights = (np.stack(parts, axis=1) for parts in zip(*orders))
    steps = len(rows)

    def build(seed, init=config.init):
        model = task_classifier(config, load_backbone(init), tokenizer, lengths["train"])
        model.preprocessor = None
        return model

    check_grid_memory(encoder_config(config.init), len(members), config.batch_size,
                      lengths["train"], precision, task=_classifier_of(spec),
                      members_are=GRID_MEMBERS + (" x encoders" if inits else ""))
    trainer = GridTrainer(build, [seed for seed, _ in members], [rate for _, rate in members],
                          Schedule(steps, int(config.warmup_ratio * steps), config.weight_decay),
                          precision=precision, steps_per_dispatch=steps_per_dispatch,
                          inits=inits)
    evaluated = {split: packed(TupeTextClassifierPreprocessor(
        tokenizer, sequence_length=lengths[split]), _segments(splits[split]))
        for split in spec.eval_splits}
    return GlueGrid(trainer, (train_x, _labels(spec, train_examples)), rows, weights, evaluated,
                    {split: splits[split].labels for split in spec.eval_splits}, epochs, lengths)


# What a grid's K is the product of (`--learning-rates` x `--seeds` in a command's words).
GRID_MEMBERS = "a learning rate and a seed each: `learning_rates=` x `seeds=`"


def _classifier_of(spec):
    """The classifier of `spec`'s task on a backbone (for `check_grid_memory`'s count)."""
    return lambda backbone: TupeTextClassifier(backbone, num_classes=spec.num_classes,
                                               preprocessor=None)


def _use_preprocessor(model, preprocessor):
    """`model` takes `preprocessor` from now on, fitted to its backbone (`fit_preprocessor`)
    and built (`_build_preprocessor`): `predict` on Grain calls it from several threads."""
    model.preprocessor = preprocessor
    model.fit_preprocessor()
    _build_preprocessor(model)


def _build_preprocessor(model):
    """Builds `model`'s preprocessor here, once, if it is not: keras-hub builds it at its
    first call, which Grain's threads can make at once (one then finds the other's
    half-built packer: `'NoneType' object is not callable`)."""
    if model.preprocessor is not None and not model.preprocessor.built:
        model.preprocessor.build(None)


def fit_task(model, train, config, epochs, steps_per_epoch, progress):
    """Compiles `model` with `create_optimizer` (warm-up over `config.warmup_ratio` of the
    steps, then linear decay) and fits it on `train`, with `StepProgress` lines when
    `progress`, else Keras's at `config.verbose`. Returns the seconds `fit` took and the
    seconds of each epoch (the first holds the compilations; the last shows the pace)."""
    steps = epochs * steps_per_epoch
    _build_preprocessor(model)
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


def _run_grids(config, protocol, run, encoders, splits, task_settings):
    """`run_protocol`'s rounds of grids: each task's runs to do of every encoder
    (`(init, results_path, rows)`), in one program a round."""
    for task in config.tasks:
        for members in protocol.grid_rounds([rows for _, _, rows in encoders], task):
            if run.progress:
                print(f"{task}: {len(members)} runs in one grid ...", flush=True)
            start = time.perf_counter()
            found = finetune_glue_grid(
                task_run(run, task, task_settings, init=encoders[0][0]),
                [rate for _, rate, _ in members], [seed for _, _, seed in members],
                splits[task], **grid_settings(config),
                inits=[encoders[index][0] for index, _, _ in members] if len(
                    encoders) > 1 else None)
            for (index, _, _), row in zip(members, found):
                init, results_path, rows = encoders[index]
                row["wall_seconds"] = time.perf_counter() - start  # the whole grid's
                rows.append(row)
                append_result(results_path, row)
                scores = {split: round(100 * m["score"], 2) for split, m in row["dev"].items()}
                print(f"{task} lr={row['learning_rate']:g} seed={row['seed']}"
                      f"{f' {init}' if len(encoders) > 1 else ''}: {scores}", flush=True)


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
    then that rate's other seeds.

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
    # An interruption before the first finished run leaves no folder it made; after it,
    # results.jsonl stays, to resume from.
    with ExitStack() as folders:
        for _, folder in encoders:
            folders.enter_context(output_lock(folder, command="finetune_glue",
                                              flag="`out=`"))
            folders.enter_context(made_folder(folder, keep=lambda folder=folder: bool(
                read_results(folder)[1])))
        found = [read_results(folder) for _, folder in encoders]
        results_path, rows = found[0]
        if config.grid:
            _run_grids(config, protocol, run, [(start, path, done) for (start, _), (
                path, done) in zip(encoders, found)], splits, task_settings)
        for task, rate, seed in ([] if config.grid else protocol.runs(rows, tasks)):
            save_dir = (os.path.join(config.out, "models", f"{task}_lr{rate:g}_seed{seed}")
                        if config.save_models else None)
            if run.progress:
                print(f"{task} lr={rate:g} seed={seed}: loading and fine-tuning "
                      f"({protocol.run_number(rows, tasks)}) ...", flush=True)
            start = time.perf_counter()
            row = finetune_glue(task_run(run, task, task_settings, learning_rate=rate,
                                         seed=seed, save_dir=save_dir), splits[task])
            row["wall_seconds"] = time.perf_counter() - start  # data, training, evaluation
            rows.append(row)
            append_result(results_path, row)
            scores = {split: round(100 * m["score"], 2) for split, m in row["dev"].items()}
            print(f"{task} lr={rate:g} seed={seed}: {scores}", flush=True)
    tables = [protocol.summarize(done, tasks) for _, done in found]
    for (start, folder), table in zip(encoders, tables):
        write_tables(table, folder, f"GLUE dev, {os.path.basename(os.path.normpath(start))}")
    return tables[0]
