"""Masked-LM pre-training: the library behind `training.pretrain`.

`pretrain(config)` checks every setting before any training, trains or reuses the
WordPiece vocabulary, builds the model under the chosen strategy and precision, and
fits with checkpoints, TensorBoard, a CSV of losses by step and a progress line.
Input is text (`--corpus`, the tf.data pipeline of `keras_tupe.data`) or token-id
shards (`--shards`, `keras_tupe.data.shards`: NumPy only, for JAX without TensorFlow).
`pretrain(config, members=..., engine=...)` trains several runs, one by one with `fit`
(`FIT`) or at once in one compiled program (`Grid`, JAX, from shards): the same runs,
the same folders.

Resume: training runs in blocks ("epochs") of `eval_every` steps; after each,
`AtomicBackupAndRestore` commits weights, optimizer, dropout state and epoch as one
backup. The same command after a kill restores it and skips the batches already
consumed, so it ends with the weights of a run never killed. The run holds `--out`'s
lock throughout, writes every file staged, and on a write failure says which backup
was kept. A finished run leaves `preset/` (the one artefact), `checkpoints/step_N/`
for `--save-steps`, `vocab.txt`, `metrics.csv`, `run_config.json` and `tensorboard/`.
"""

import concurrent.futures
import contextlib
import dataclasses
import inspect
import json
import os
import shutil
import sys
import time
from typing import NamedTuple

import keras
import numpy as np

from keras_tupe import data
from keras_tupe.callbacks import (AtomicBackupAndRestore, StepCheckpoint, StepLogger,
                                  StepProgress, append_metrics, backup_metadata,
                                  remove_backups_but, restore_backup, start_metrics,
                                  write_backup, write_checkpoint)
from keras_tupe.data.shards import MaskedLMShards
from keras_tupe.grid import (GridTrainer, Schedule, check_backend, check_grid_memory,
                             given_masks, grid_processes, merged_members,
                             shard_source)
from keras_tupe.layers.utils import INITIALIZATION
from keras_tupe.models import (TupeBackbone, TupeMaskedLM, TupeMaskedLMPreprocessor,
                               TupeTokenizer)
from keras_tupe.models.preset_folders import (RUN_CHECKPOINTS, RUN_PRESET, check_weights_file,
                                              run_model, write_preset_folder)
from keras_tupe.optimization import LinearWarmupLinearDecay, create_optimizer
from keras_tupe.processes import ONE_PROCESS, writing_alone
from keras_tupe.processes import join as processes_join
from keras_tupe.provenance import versions
from keras_tupe_base import settings
from keras_tupe_base.files import file_sha256
from keras_tupe_base.folders import made_folder
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.presets import PRESETS, unknown_preset
from keras_tupe_base.progress import Heartbeat
from keras_tupe_base.settings import (GRID_PRECISIONS, LAYOUT_FIELDS, RESUME_FREE_FIELDS,
                                     STRATEGIES)
from keras_tupe_base.shard_folders import MANIFEST, VOCABULARY, ShardError, read_manifest
from keras_tupe_base.staging import WriteError, copy_file, space_error, staged, write_json

RUN_CONFIG = "run_config.json"
PRESET_DIR = RUN_PRESET  # the run's preset folder; models.preset_folders.RUN_PRESET names it


class PretrainError(ValueError):
    """A problem with the run's settings, found before any training starts."""


def _not_one_of(name, value, choices):
    """The problem with `--name value` outside `choices`, or None."""
    if value not in choices:
        return f"--{name.replace('_', '-')} must be one of {choices}. Received: {value!r}"


class NoStrategy:
    """One device, no distribution: the JAX backend's `--strategy default`."""

    num_replicas_in_sync = 1
    scope = contextlib.nullcontext
    processes = ONE_PROCESS


class KerasDataParallel(NoStrategy):
    """The JAX backend's `--strategy mirrored` and `multiworker`: `keras.distribution.
    DataParallel`, set globally, so `fit` shards every batch over the devices and all-reduces
    the gradient (clipping and weight decay act on it as under MirroredStrategy).

    `processes` (`keras_tupe.processes`): the devices of every process, each process
    feeding its rows of the global batch (Keras's `auto_shard_dataset` splits only tf.data)."""

    def __init__(self, processes=ONE_PROCESS):
        devices = keras.distribution.list_devices()  # every process's, once they joined
        self.distribution = keras.distribution.DataParallel(
            devices=devices, auto_shard_dataset=processes.count == 1)
        keras.distribution.set_distribution(self.distribution)
        self.num_replicas_in_sync = len(devices)
        self.processes = processes


def make_strategy(config):
    """The distribution for `config.strategy`: tf.distribute on TensorFlow,
    keras.distribution on JAX (`multiworker`: the processes of `config`'s layout joined
    first, `keras_tupe.processes.join`)."""
    name = config.strategy
    if problem := _not_one_of("strategy", name, STRATEGIES):
        raise PretrainError(problem)
    if keras.backend.backend() == "jax":
        if name == "multiworker":
            if not config.shards:
                raise PretrainError(
                    "--strategy multiworker under JAX reads token-id shards (--shards), each "
                    "process its rows of every batch; make them with keras-tupe-shard-corpus.")
            return KerasDataParallel(processes_join(config))
        return KerasDataParallel() if name == "mirrored" else NoStrategy()
    layout = [f"--{field.replace('_', '-')}" for field in LAYOUT_FIELDS
              if getattr(config, field) is not None]
    if layout:
        raise PretrainError(
            f"{' '.join(layout)} set JAX's process layout; under TensorFlow, --strategy "
            "multiworker reads the cluster from TF_CONFIG. Leave them out, or run with "
            "KERAS_BACKEND=jax.")
    import tensorflow as tf

    if name == "mirrored":
        # All GPUs; without any, all logical CPU devices (one on a plain host,
        # several where tf.config made them, as the tests do).
        devices = tf.config.list_logical_devices("GPU") or tf.config.list_logical_devices("CPU")
        return tf.distribute.MirroredStrategy([device.name for device in devices])
    if name == "multiworker":
        if "TF_CONFIG" not in os.environ:
            raise PretrainError(
                "--strategy multiworker reads the cluster from the TF_CONFIG environment "
                "variable, which is not set. Example: TF_CONFIG='{\"cluster\": {\"worker\": "
                "[\"host1:port\", \"host2:port\"]}, \"task\": {\"type\": \"worker\", \"index\": 0}}'"
            )
        return tf.distribute.MultiWorkerMirroredStrategy()
    return tf.distribute.get_strategy()


def validate(config, num_replicas):
    """Every check that can fail, before any file is written or step taken.

    All the conflicts are reported at once, one a line of the `PretrainError`.
    """
    if config.preset not in PRESETS:  # first and alone: every other check reads the preset
        raise PretrainError(unknown_preset(config.preset))
    # The backbone's own arguments but those the run sets (vocabulary_size, dropout).
    fields = sorted(name for name, parameter in
                    inspect.signature(TupeBackbone.__init__).parameters.items()
                    if parameter.kind is parameter.POSITIONAL_OR_KEYWORD
                    and name not in ("self", "vocabulary_size", "dropout", "dtype"))
    unknown = sorted(set(config.backbone_overrides or {}) - set(fields))
    if unknown:
        raise PretrainError(f"backbone_overrides {unknown} are not TupeBackbone arguments a run "
                            f"may set (it sets vocabulary_size and dropout). Valid: {fields}")
    try:
        settings.check(config)  # each value, and the conflicts between them
        problems = []
    except ValueError as error:
        problems = str(error).splitlines()
    if config.batch_size >= 1 and config.batch_size % num_replicas:
        problems.append(
            f"--batch-size {config.batch_size} (the global batch) must be a positive multiple "
            f"of the number of replicas ({num_replicas}) so every replica gets the same share."
        )
    if problems:
        raise PretrainError("\n".join(problems))


def prepare_run_dir(config):
    """Creates, resumes or refuses `config.out`. Returns `"new"` or `"resume"`.

    Nothing a user already has is overwritten without `--overwrite`.
    """
    out = config.out
    if not os.path.exists(out) or not os.listdir(out):
        return "new"
    if config.overwrite:
        shutil.rmtree(out)
        return "new"
    config_path = os.path.join(out, RUN_CONFIG)
    if not os.path.exists(config_path):
        raise PretrainError(
            f"--out {out} exists and is not a keras_tupe run directory; refusing to write "
            "into it. Choose another --out, or pass --overwrite to delete it first."
        )
    if os.path.exists(run_model(out)):
        raise PretrainError(
            f"--out {out} holds a finished run. Choose another --out, or pass --overwrite "
            "to replace it."
        )
    with open(config_path) as f:
        saved = json.load(f)["config"]
    current = json.loads(json.dumps(config.resume_key()))
    saved = {k: v for k, v in saved.items() if k not in RESUME_FREE_FIELDS}
    differences = {k: (saved.get(k), current.get(k)) for k in current if saved.get(k) != current.get(k)}
    if differences:
        described = ", ".join(f"{k}: run has {a!r}, now {b!r}" for k, (a, b) in differences.items())
        raise PretrainError(
            f"--out {out} holds an unfinished run with other settings ({described}). Resume it "
            "with the same settings, choose another --out, or pass --overwrite."
        )
    return "resume"


def _vocabulary(config, mode):
    """The run's vocabulary file: given, reused from the run, or trained."""
    run_vocab = os.path.join(config.out, "vocab.txt")
    if config.shards:
        return _shard_vocabulary(config, mode, run_vocab)
    if mode == "resume" and os.path.exists(run_vocab):
        if config.vocab and data.vocabulary_fingerprint(config.vocab) != data.vocabulary_fingerprint(run_vocab):
            raise PretrainError(
                f"--vocab {config.vocab} does not match the vocabulary of the checkpoint in "
                f"{config.out} ({run_vocab}): the token ids would mean other words."
            )
        return run_vocab
    if config.vocab:
        if not os.path.exists(config.vocab):
            raise PretrainError(f"--vocab {config.vocab} does not exist.")
        return copy_file(config.vocab, run_vocab)
    if config.verbose:
        print(f"Training a {config.vocabulary_size}-token WordPiece vocabulary on "
              f"{config.vocab_lines} lines of {config.corpus} ...", flush=True)
    with staged(run_vocab) as partial:
        data.train_vocabulary(config.corpus, config.vocabulary_size, partial,
                              lowercase=config.lowercase, max_lines=config.vocab_lines)
    return run_vocab


def _shard_manifest(config):
    """Checks `--corpus` / `--shards` and the shard folders; the manifest of `--shards` or None."""
    if bool(config.corpus) == bool(config.shards):
        raise PretrainError(
            "Give exactly one of --corpus (text, read with TensorFlow) and --shards (a folder "
            "of `keras-tupe-shard-corpus`, read with NumPy only). Received: "
            + ("both." if config.corpus else "neither."))
    if config.shards and config.valid_corpus or config.corpus and config.valid_shards:
        raise PretrainError(
            "--valid-corpus goes with --corpus, --valid-shards with --shards (shard the "
            "validation text with the same --vocab and --seq-len).")
    if not config.shards:
        return None
    manifests = []
    for flag, folder in (("--shards", config.shards), ("--valid-shards", config.valid_shards)):
        if not folder:
            continue
        try:
            manifest = read_manifest(folder, flag)
        except ShardError as error:
            raise PretrainError(str(error)) from error
        length = manifest["sequence_length"]
        if length != config.seq_len:
            raise PretrainError(
                f"--seq-len {config.seq_len} does not match {flag} {folder}: its {MANIFEST} has "
                f"sequence_length={length}. Pass --seq-len {length}, or shard the corpus again "
                f"with --seq-len {config.seq_len}.")
        if manifest["lowercase"] != config.lowercase:
            raise PretrainError(
                f"{flag} {folder} was tokenized with lowercase={manifest['lowercase']} "
                f"({MANIFEST}); pass --cased exactly when the shards were made with it.")
        manifests.append(manifest)
    if len({m["vocabulary_sha256"] for m in manifests}) > 1:
        raise PretrainError(
            f"--valid-shards {config.valid_shards} and --shards {config.shards} were made with "
            "different vocabularies; shard both with the same --vocab.")
    return manifests[0]


def _shard_vocabulary(config, mode, run_vocab):
    """The run's vocabulary for `--shards`: the one the shards were made with."""
    shard_vocab = os.path.join(config.shards, VOCABULARY)
    if config.vocab and file_sha256(config.vocab) != file_sha256(shard_vocab):
        raise PretrainError(
            f"--vocab {config.vocab} is not the vocabulary of --shards {config.shards} "
            f"({shard_vocab}): the shards' ids would mean other words. Leave --vocab out "
            "(the shards bring theirs).")
    if mode == "resume" and os.path.exists(run_vocab):
        if file_sha256(run_vocab) != file_sha256(shard_vocab):
            raise PretrainError(
                f"--shards {config.shards} holds another vocabulary ({shard_vocab}) than the "
                f"unfinished run in --out {config.out} ({run_vocab}): the shards were made "
                "again. Resume with the shards the run started with, or choose another --out.")
        return run_vocab
    return copy_file(shard_vocab, run_vocab)


def _shard_inputs(config, consumed, part=(0, 1), threads=None):
    """Training and validation batches from shard folders (NumPy, no TensorFlow).

    The training stream starts at batch `consumed` directly: a resumed run seeks,
    it does not replay. Shuffling permutes all sequences each pass
    (`--shuffle-buffer 0`: corpus order). `part`: this process's rows of each batch.
    `threads`: `MaskedLMShards`'s.
    """
    return (_train_shards(config, consumed, part, threads),
            _valid_shards(config, part, threads))


def _train_shards(config, consumed, part=(0, 1), threads=None):
    return MaskedLMShards(config.shards, config.batch_size, seed=config.seed,
                          shuffle=bool(config.shuffle_buffer), start_batch=consumed, part=part,
                          threads=threads, **_mask_rates(config))


def _valid_shards(config, part=(0, 1), threads=None):
    """The validation batches of `config.valid_shards` (its own seed), or None."""
    if not config.valid_shards:
        return None
    return MaskedLMShards(config.valid_shards, config.batch_size, seed=config.seed + 1,
                          shuffle=False, repeat=False, max_batches=config.valid_batches,
                          flag="--valid-shards", part=part, threads=threads,
                          **_mask_rates(config))


def _mask_rates(config):
    return dict(mask_rate=config.mask_rate, mask_token_rate=config.mask_token_rate,
                random_token_rate=config.random_token_rate)


def _backed_up_epoch(backup_dir):
    """The epoch `BackupAndRestore` will restore (its own metadata file), or 0."""
    return int(backup_metadata(backup_dir).get("epoch", 0))


def _what_was_kept(config, backup_dir):
    """The end of a write failure's line: the backup kept, and that the same command goes on."""
    metadata = backup_metadata(backup_dir)
    if not metadata:
        return ("Nothing was kept (no backup yet: the run made no complete block of "
                "--eval-every steps); free some space and run the same command again.")
    step = metadata.get("step", int(metadata["epoch"]) * config.eval_every)
    where = "the final preset" if step >= config.steps else "the run"
    return (f"Kept: the backup of step {step} in {backup_dir}, and {config.out}'s other "
            f"files; free some space and run the same command again: it resumes from "
            f"step {step} and finishes {where}.")


class Fit:
    """Keras's `model.fit`, a run at a time (`pretrain`'s default engine): any backend, text
    or shards, `config.strategy`'s devices and processes, resumable, with a validation
    loss."""

    name = "fit"


FIT = Fit()


@dataclasses.dataclass(frozen=True)
class Grid:
    """Every run at once, in one compiled program (`keras_tupe.grid.GridTrainer`, JAX),
    from token-id shards held in device memory; each run's batches and masks are the ones
    `fit` trains it on (`MaskedLMShards`), so a member is the `fit` run of its seed and rate.
    `steps_per_dispatch`: `GridTrainer`'s. `pretrainer`: None (built by `pretrain`), or
    `grid_pretrainer(config, members)`'s grid, built (and compiled) ahead, not yet trained.
    `backups`: True, each block ends with every member's backup (weights and optimizer
    state, 3x its weights); False: none, for short runs where a killed grid starts again
    (no `until_step` then)."""

    steps_per_dispatch: int = 100
    pretrainer: object = None
    backups: bool = True
    name = "grid"


def pretrain(config, until_step=None, members=None, engine=FIT):
    """Runs (or resumes) pre-training: one run, or several (`members`), by either engine.

    Each run trains in blocks of `eval_every` steps; after each it logs `metrics.csv` (the
    block's loss, the validation loss on `valid_shards`/`valid_corpus`, the learning rate)
    and commits a backup of its weights, optimizer and dropout state, from which the same
    call resumes after a kill. A finished run leaves `preset/`, its checkpoints at
    `save_steps`, `vocab.txt`, `metrics.csv` and `run_config.json`.

    `until_step` (a multiple of `eval_every`) stops the runs after that step, with
    their backups, checkpoints and metrics written but no final model: the learning
    rate schedule is still the one of `config.steps`, and the same call without
    `until_step` resumes them to the end, with the weights of runs never stopped.

    Args:
        config: a `PretrainConfig`.
        until_step: int or None (the whole run).
        members: None, the one run of `config` (its `seed` and `learning_rate`) in
            `config.out`; or `(seed, learning_rate)` pairs, a run each in
            `config.out/seed_<seed>` (`..._lr<rate>` when the rates differ): the run
            `config` with that out, seed and rate makes.
        engine: `FIT` (Keras's `fit`, a run at a time) or `Grid(...)` (every run at once,
            in one program, JAX, from shards: the same runs). A grid's row in
            `metrics.csv` gives `tokens_per_second` of all its members.

    Returns: the one run's Keras `History` (`FIT`, no `members`), else the run folders.

    Under JAX with `strategy="multiworker"`, every process of the layout calls it with the
    same config but the layout (`keras_tupe.processes`): each checks, then feeds its rows of
    each batch; process 0 alone writes `config.out` (on a file system every process reads:
    each restores a resumed run's backup from it). A grid's members across processes: every
    process calls it alike after `jax.distributed.initialize`; process 0 writes.
    """
    configs = [config] if members is None else member_configs(config, members)
    if isinstance(engine, Grid):
        return _pretrain_grid(config, configs, until_step, engine)
    if not isinstance(engine, Fit):
        raise TypeError(f"engine must be keras_tupe.pretraining.FIT or a Grid; received "
                        f"{engine!r}.")
    histories = [_pretrain_fit(run, until_step) for run in configs]
    return histories[0] if members is None else [run.out for run in configs]


def member_configs(config, members):
    """The run `config` makes of each `(seed, learning_rate)` of `members`: its seed and
    rate, its `out` `config.out/seed_<seed>` (`..._lr<rate>` when the rates differ)."""
    seeds, rates, _ = merged_members([seed for seed, _ in members],
                                     [rate for _, rate in members])  # checked, each once
    members = list(zip(seeds, rates))
    one_rate = len(set(rates)) == 1
    return [dataclasses.replace(
        config, seed=seed, learning_rate=rate,
        out=os.path.join(config.out, f"seed_{seed}" + ("" if one_rate else f"_lr{rate:g}")))
        for seed, rate in members]


def _pretrain_fit(config, until_step):
    """The `FIT` engine's run of `config` in `config.out`; its `History`."""
    strategy = make_strategy(config)  # joins the processes, before any file or lock
    # tf.distribute's workers each write their own `out`: one process each, here.
    processes = getattr(strategy, "processes", ONE_PROCESS)
    # One writer per run folder, from the first check to the last file.
    with output_lock(config.out, flag="`out=`") if processes.writer else contextlib.nullcontext():
        return _pretrain(config, until_step, strategy, processes)


def _pretrain(config, until_step, strategy, processes):
    problem = manifest = None
    try:
        manifest = _check(config, until_step, strategy)
    except PretrainError as error:
        problem = error
    # Every process's checks: all train, or all stop (none waits for another forever).
    processes.agree(problem, settings=config.resume_key(), num_processes=config.num_processes)
    mode = None
    if processes.writer:
        try:
            mode = prepare_run_dir(config)
        except PretrainError as error:
            problem = error
    processes.agree(problem)
    # Nothing half-made: the folders this call creates go again if it fails before a
    # backup to resume from (the vocabulary failed, ^C while compiling).
    backup_dir = os.path.join(config.out, "backup")
    keep = lambda: _backed_up_epoch(backup_dir) > 0  # noqa: E731
    with made_folder(config.out, keep=keep) if processes.writer else contextlib.nullcontext():
        with _kept_on_a_full_disk(config, backup_dir):
            return _train(config, mode, strategy, manifest, until_step, backup_dir, processes)


@contextlib.contextmanager
def _kept_on_a_full_disk(config, backup_dir):
    """A full disk meanwhile raises a `WriteError` naming the file, with what was kept."""
    try:
        yield
    except (OSError, RuntimeError) as error:
        found = space_error(error)
        if not found:
            raise
        if not isinstance(error, WriteError):
            error = WriteError(getattr(error, "filename", None) or config.out, found[1],
                               found[0])
        raise error.with_note(_what_was_kept(config, backup_dir)) from None


def _check(config, until_step, strategy):
    """The checks of the settings and inputs, before anything is written: the shards'
    manifest (or None)."""
    validate(config, strategy.num_replicas_in_sync)
    if until_step is not None and not (
            0 < until_step <= config.steps and until_step % config.eval_every == 0):
        raise PretrainError(
            f"until_step must be a positive multiple of eval_every ({config.eval_every}) "
            f"and at most steps ({config.steps}). Received: {until_step}")
    manifest = _shard_manifest(config)
    # Read the corpora now: a missing or empty corpus fails before anything is written.
    for flag, corpus in (("--corpus", config.corpus), ("--valid-corpus", config.valid_corpus)):
        if corpus:
            try:
                data.line_dataset(corpus, max_lines=config.max_lines)
            except (FileNotFoundError, ValueError) as error:
                raise PretrainError(f"{flag}: {error}") from error
    if config.vocab and not config.shards:  # named as the user gave it, not the run's copy
        try:
            data.check_vocabulary(config.vocab)
        except (FileNotFoundError, ValueError) as error:
            raise PretrainError(f"--vocab: {error}") from error
    return manifest


def _set_up(config, mode, strategy, processes):
    """The writer's vocabulary and `run_config.json`; its path. Every process waits for it."""
    vocab_path, problem = os.path.join(config.out, "vocab.txt"), None
    if processes.writer:
        try:
            vocab_path = _vocabulary(config, mode)
            if mode == "new":
                write_json(os.path.join(config.out, RUN_CONFIG), {
                    "config": config.resume_key(),
                    "vocabulary_sha256": file_sha256(vocab_path),
                    "command": " ".join(sys.argv),
                    "versions": versions(),
                    "replicas": strategy.num_replicas_in_sync,
                    "processes": processes.count,
                    "initialization": INITIALIZATION,
                })
        except (PretrainError, OSError) as error:
            problem = error
    processes.agree(problem)
    return vocab_path


def _train(config, mode, strategy, manifest, until_step, backup_dir, processes):
    """`pretrain` once `config.out` exists: vocabulary, inputs, model, `fit`, saving."""
    vocab_path = _set_up(config, mode, strategy, processes)
    keras.utils.set_random_seed(config.seed)
    keras.config.set_dtype_policy(config.precision)
    consumed = _backed_up_epoch(backup_dir) * config.eval_every
    verbose = config.verbose if processes.writer else 0
    if processes.count > 1 and config.verbose:
        print(f"Process {processes.index} of {processes.count}, "
              f"{strategy.num_replicas_in_sync} devices in all: "
              + ("writes the run." if processes.writer else f"process 0 writes {config.out}."),
              flush=True)
    if consumed and verbose:
        print(f"Resuming {config.out} after step {consumed}.", flush=True)
    # Tracing the input pipeline and building the model: silent for tens of seconds.
    building = Heartbeat("  building the input pipeline and the model", every=5.0)
    with building if verbose else contextlib.nullcontext():
        if manifest:
            train, valid = _shard_inputs(config, consumed, processes.part)
            vocabulary_size = manifest["vocabulary_size"]
        else:
            train, valid, vocabulary_size = _text_inputs(config, vocab_path, consumed)
        model = _compiled_model(config, strategy, vocabulary_size)

    if processes.writer:
        callbacks = _callbacks(config, vocab_path, backup_dir)
    else:  # restores a resumed run's backup as process 0 does; writes nothing
        callbacks = [AtomicBackupAndRestore(backup_dir, delete_checkpoint=False, writes=False)]
    # keras-hub's `PipelineModel.fit` converts any input but a tf.data or grain dataset
    # to one of those (it has no case for a `keras.utils.PyDataset`); pre-training feeds
    # finished batches (no preprocessor), so shards go to Keras's own `fit`.
    fit = keras.Model.fit if manifest else type(model).fit
    try:
        history = fit(
            model, train, validation_data=valid, steps_per_epoch=config.eval_every,
            epochs=(until_step or config.steps) // config.eval_every,
            validation_steps=config.valid_batches if valid is not None else None,
            callbacks=callbacks, verbose=0, shuffle=False,  # the dataset shuffles
        )
    finally:
        for callback in callbacks:
            if isinstance(callback, StepProgress):
                callback.close()  # its heartbeat thread, when fit raised
    if until_step not in (None, config.steps) or not processes.writer:
        return history  # stopped early, resumable; or not the writer
    with writing_alone():
        _save_final(model, vocab_path, config, backup_dir)
    if verbose:
        print(f"Saved the pre-trained model to {run_model(config.out)} (a keras-hub preset "
              "folder: backbone, masked LM, tokenizer), with vocab.txt and metrics.csv beside "
              "it. (Masked-LM accuracy is that of the 15% masked tokens: a few % after a few "
              "hundred steps, about 60-70% for a fully trained BERT-base.)\nNext: fine-tune "
              "it, e.g. "
              f"{console_command('keras-tupe-finetune-glue')} --init {config.out} --tasks sst2 "
              "--data-dir DATA --out runs/glue --save-models", flush=True)
    return history


def _text_inputs(config, vocab_path, consumed):
    """Training and validation batches of text (tf.data), and the vocabulary's size.

    The training stream skips the `consumed` batches of the run it resumes.
    """
    tokenizer = data.load_tokenizer(vocab_path, lowercase=config.lowercase)
    common = dict(tokenizer=tokenizer, sequence_length=config.seq_len,
                  batch_size=config.batch_size, max_lines=config.max_lines,
                  **_mask_rates(config))
    train = data.mlm_dataset(config.corpus, seed=config.seed, repeat=True,
                             shuffle_buffer=config.shuffle_buffer, **common)
    valid = None
    if config.valid_corpus:
        valid = data.mlm_dataset(config.valid_corpus, seed=config.seed + 1, repeat=False,
                                 shuffle_buffer=0, **common)
        valid = valid.take(config.valid_batches).cache()
    return train.skip(consumed), valid, tokenizer.vocabulary_size()


def _compiled_model(config, strategy, vocabulary_size):
    """The masked LM of `config.preset`, compiled with the run's optimizer, in `strategy`."""
    with strategy.scope():
        backbone = TupeBackbone.from_preset(
            config.preset, vocabulary_size=vocabulary_size, dropout=config.dropout,
            **(config.backbone_overrides or {}),
        )
        model = TupeMaskedLM(backbone)
        optimizer = create_optimizer(
            model, config.learning_rate, total_steps=config.steps,
            warmup_steps=int(config.warmup_ratio * config.steps),
            weight_decay=config.weight_decay, beta_1=config.adam_beta1,
            beta_2=config.adam_beta2, epsilon=config.adam_epsilon, clip_norm=config.clip_norm,
        )
        if config.precision == "mixed_float16":
            optimizer = keras.optimizers.LossScaleOptimizer(optimizer)
        model.compile(optimizer=optimizer, jit_compile=config.xla,
                      steps_per_execution=config.steps_per_execution)
    return model


def _callbacks(config, vocab_path, backup_dir):
    """Progress (with `verbose`), checkpoints, the CSV, TensorBoard, then the backup."""
    callbacks = []
    if config.verbose:  # steps, not fit's "Epoch 1/3" (an epoch is a block of eval_every)
        callbacks.append(StepProgress(config.steps, config.eval_every))
    callbacks += [
        StepCheckpoint(os.path.join(config.out, RUN_CHECKPOINTS), config.save_steps,
                       _preprocessor(vocab_path, config)),
        StepLogger(os.path.join(config.out, "metrics.csv"),
                   config.batch_size * config.seq_len, config.eval_every),
    ]
    try:
        import tensorflow  # noqa: F401  (TensorBoard writes through tf.summary)
    except ImportError:  # a JAX machine training from shards: metrics.csv is the log
        pass
    else:
        # update_freq="epoch": a summary writer held open during training made
        # the dropout masks depend on the log path (seen with XLA on TF 2.21).
        callbacks.append(keras.callbacks.TensorBoard(os.path.join(config.out, "tensorboard"),
                                                     update_freq="epoch"))
    # Last: an epoch is committed only after the other callbacks have written it.
    # Kept at the end of `fit`: removed only once the final preset is whole and read
    # back (`_save_final`); a run stopped at `until_step` resumes from it.
    return callbacks + [AtomicBackupAndRestore(backup_dir, delete_checkpoint=False)]


def _save_final(model, vocab_path, config, backup_dir):
    """The run's preset folder (staged); then, once its weights read back whole, no backup."""
    preset_dir = write_preset(model, vocab_path, config, run_model(config.out))
    for root, _, names in os.walk(preset_dir):
        for name in names:
            if name.endswith(".h5"):
                check_weights_file(os.path.join(root, name), read_data=True)
    shutil.rmtree(backup_dir, ignore_errors=True)


class GridPretrainer(NamedTuple):
    """A grid built to pre-train (`grid_pretrainer`): the `GridTrainer`, its `source` (the
    shards' token ids, held on the device) and each member's `MaskedLMShards` (`streams`),
    which draws the member's batches and masks as `fit` does."""

    trainer: GridTrainer
    source: tuple
    streams: list

    def inputs(self, start, end):
        """Steps `start` to `end` of every member: `(rows, masks)`, the sequences `(S, K,
        B)` and the masks `(S, K, B, P)` each (`MaskedLMShards.masks`)."""
        found = [[stream.masks(step) for stream in self.streams] for step in range(start, end)]
        rows = np.asarray([[member[0] for member in step] for step in found], np.int32)
        masks = tuple(np.asarray([[member[1][part] for member in step] for step in found])
                      for part in range(4))
        return rows, masks

    def fit(self, inputs):
        """Trains every member on `inputs` (`self.inputs(...)`'s, the steps that follow);
        returns the losses `(S, K)`."""
        rows, masks = inputs
        return self.trainer.fit(self.source, rows, transform=given_masks, step_inputs=masks)

    def compile(self, steps):
        """Compiles the program a `fit` of `steps` steps runs (`GridTrainer.compile_fit`),
        without training. Returns seconds."""
        rows, masks = self.inputs(0, steps)
        return self.trainer.compile_fit(self.source, rows, transform=given_masks,
                                        step_inputs=masks)


def grid_pretrainer(config, members, steps_per_dispatch=100):
    """The `GridPretrainer` the `Grid` engine trains `members` (`(seed, rate)`s) with,
    checked first. Public so that a grid can be built, timed or compiled ahead
    (`GridPretrainer.compile`) before it trains: `Grid(pretrainer=...)` then trains it
    (its config may differ in `steps` and `save_steps`)."""
    manifest = _check_grid(config, _shard_manifest(config))
    vocabulary_size = manifest["vocabulary_size"]

    def build(seed):
        backbone = TupeBackbone.from_preset(config.preset, vocabulary_size=vocabulary_size,
                                            dropout=config.dropout,
                                            **(config.backbone_overrides or {}))
        return TupeMaskedLM(backbone)

    backbone = {**PRESETS[config.preset], "vocabulary_size": vocabulary_size,
                **(config.backbone_overrides or {})}
    check_grid_memory(backbone, len(members), config.batch_size, config.seq_len,
                      config.precision, task=TupeMaskedLM,
                      members_are="a seed (and learning rate) each: `seeds=`")
    trainer = GridTrainer(
        build, [seed for seed, _ in members], [rate for _, rate in members],
        _grid_schedule(config), precision=config.precision,
        steps_per_dispatch=steps_per_dispatch, accuracy=True)
    streams = [_train_shards(dataclasses.replace(config, seed=seed), 0, threads=0)
               for seed, _ in members]
    return GridPretrainer(trainer, shard_source(config.shards), streams)


def _check_grid(config, manifest):
    """The grid engine's own checks of `config` and its shards' `manifest` (None: no
    shards); the manifest."""
    check_backend()
    if config.precision not in GRID_PRECISIONS:
        raise PretrainError(f"A grid pre-trains in {' or '.join(GRID_PRECISIONS)}; received "
                            f"precision={config.precision!r}.")
    if config.strategy != "default":
        raise PretrainError(f"A grid spreads its members over every device itself; received "
                            f"strategy={config.strategy!r}. Valid: 'default'.")
    if manifest is None:
        raise PretrainError("A grid pre-trains from token-id shards: pass shards (a folder of "
                            "keras-tupe-shard-corpus), not corpus.")
    bad = [step for step in config.save_steps if not 0 <= step < config.steps]
    if config.steps % config.eval_every or bad:
        raise PretrainError(f"eval_every ({config.eval_every}) must divide steps "
                            f"({config.steps}) and each save step lie inside the run; received "
                            f"save_steps {config.save_steps}.")
    return manifest


def _grid_schedule(config):
    return Schedule(config.steps, int(config.warmup_ratio * config.steps), config.weight_decay,
                    config.clip_norm, config.adam_beta1, config.adam_beta2, config.adam_epsilon)


def pretrain_grid(config, seeds, learning_rates=None, steps_per_dispatch=100, pretrainer=None,
                  until_step=None, backups=True):
    """`pretrain(config, until_step, members, Grid(steps_per_dispatch, pretrainer, backups))`
    of `seeds` (at `learning_rates`, one a seed; default `config.learning_rate` for all):
    the seeds' runs at once, in one program (JAX). Returns their folders."""
    rates = learning_rates or [config.learning_rate] * len(seeds)
    return pretrain(config, until_step, list(zip(seeds, rates)),
                    Grid(steps_per_dispatch, pretrainer, backups))


def _pretrain_grid(config, configs, until_step, engine):
    """The `Grid` engine's runs of `configs` (`member_configs`'s): checked, their folders
    locked and made or resumed, trained; the folders."""
    check_backend()  # before JAX is asked for the processes
    processes = grid_processes()
    problem = None
    try:
        _check_grid(config, _check(config, until_step, NoStrategy()))
    except (PretrainError, ValueError) as error:
        problem = error
    if until_step is not None and not engine.backups and problem is None:
        problem = PretrainError("until_step stops a grid to resume it later, from its backups: "
                                "leave until_step out, or keep Grid's backups.")
    processes.agree(problem, settings=config.resume_key())
    with contextlib.ExitStack() as made:
        modes, problem = [None] * len(configs), None
        if processes.writer:  # one writer of every run folder, from the first check on
            try:
                for run in configs:
                    made.enter_context(output_lock(run.out, flag="`out`"))
                modes = [prepare_run_dir(run) for run in configs]
            except (PretrainError, OSError) as error:
                problem = error
        processes.agree(problem)
        backups = [os.path.join(run.out, "backup") for run in configs]
        if processes.writer:  # a folder made here goes again if it fails before a backup
            for run, backup in zip(configs, backups):
                made.enter_context(made_folder(
                    run.out, keep=lambda backup=backup: _backed_up_epoch(backup) > 0))
        vocabularies = [_set_up(run, mode, NoStrategy(), processes)
                        for run, mode in zip(configs, modes)]
        # (The first member's backup named: every member resumes from the same step.)
        with _kept_on_a_full_disk(configs[0], backups[0]):
            _train_grid(config, configs, until_step, engine, backups, vocabularies, processes)
    return [run.out for run in configs]


def _train_grid(config, configs, until_step, engine, backups, vocabularies, processes):
    """The grid's blocks from the runs' common backup on; then, at the end, the presets."""
    members = [(run.seed, run.learning_rate) for run in configs]
    pretrainer = engine.pretrainer or grid_pretrainer(config, members, engine.steps_per_dispatch)
    trainer = pretrainer.trainer
    if trainer.members != members or trainer.steps_done:
        raise PretrainError(f"pretrainer must be a grid of the members {members} that has not "
                            f"trained; received one of {trainer.members} that trained "
                            f"{trainer.steps_done} steps.")
    trainer.schedule = _grid_schedule(config)  # the built one's, or another length's
    done = _restore_grid(trainer, backups)
    last, every, writer = until_step or config.steps, config.eval_every, processes.writer
    valid = [_valid_shards(run, threads=0) for run in configs]
    metrics = [os.path.join(run.out, "metrics.csv") for run in configs]
    if writer:
        for path in metrics:
            start_metrics(path, done)
    if done == 0 and 0 in config.save_steps:  # the initialization, before any step
        _grid_checkpoints(trainer, configs, vocabularies, 0, writer)
    ends = sorted({*range(done + every, last + 1, every),
                   *(step for step in config.save_steps if done < step < last)})
    if config.verbose and writer and done:
        print(f"Resuming the grid's {len(configs)} runs after step {done}.", flush=True)
    started = block_started = time.perf_counter()
    losses = []
    # The next steps' masks are drawn on the host while the device trains these.
    with concurrent.futures.ThreadPoolExecutor(1) as ahead:
        pending = ahead.submit(pretrainer.inputs, done, ends[0]) if ends else None
        for index, end in enumerate(ends):
            inputs = pending.result()
            if index + 1 < len(ends):
                pending = ahead.submit(pretrainer.inputs, end, ends[index + 1])
            losses.append(np.concatenate([pretrainer.fit(inputs)[..., None],
                                          trainer.accuracy_sums], axis=-1))
            if end in config.save_steps:
                _grid_checkpoints(trainer, configs, vocabularies, end, writer)
            if end % every:
                continue
            seconds, block = time.perf_counter() - block_started, np.concatenate(losses)
            pace = {"tokens_per_second": len(configs) * every * config.batch_size
                    * config.seq_len / seconds, "elapsed_seconds": time.perf_counter() - started}
            _grid_block_end(trainer, configs, valid, metrics, backups if engine.backups else [],
                            end, pace, block, writer)
            if config.verbose and writer:
                print(f"step {end}/{config.steps}: loss "
                      + " ".join(f"{loss:.4g}" for loss in block[..., 0].mean(axis=0))
                      + f" (seeds {[seed for seed, _ in members]}, "
                      f"{every / seconds:.2f} steps/s)", flush=True)
            block_started, losses = time.perf_counter(), []
    if until_step not in (None, config.steps):
        return  # stopped early, resumable
    for index, (run, vocabulary, backup) in enumerate(zip(configs, vocabularies, backups)):
        model = trainer.member_model(index)  # every process: a collective
        if writer:
            with writing_alone():
                _save_final(model, vocabulary, run, backup)


def _restore_grid(trainer, backups):
    """Every member restored from its run's backup of the latest step all of them hold
    (a kill while they were written leaves some a block ahead, the older one kept); 0
    where one has none. Returns that step."""
    done = min(backup_metadata(backup).get("step", 0) for backup in backups)
    if done:
        for index, backup in enumerate(backups):
            restore_backup(trainer.model, backup, f"step_{done:09d}")
            trainer.load_member(index)
        trainer.steps_done = done
    return done


def _grid_checkpoints(trainer, configs, vocabularies, step, writer):
    for index, (run, vocabulary) in enumerate(zip(configs, vocabularies)):
        model = trainer.member_model(index)  # every process: a collective
        if writer:
            write_checkpoint(model, os.path.join(run.out, RUN_CHECKPOINTS), step,
                             _preprocessor(vocabulary, run))


def _grid_block_end(trainer, configs, valid, metrics, backups, step, pace, losses, writer):
    """What `fit`'s callbacks do at a block's end, for each member: its validation loss,
    its row of `metrics.csv`, its backup (none where `backups` is empty); the older
    backups go once every member's is committed."""
    warmup = int(configs[0].warmup_ratio * configs[0].steps)
    names = []
    for index, run in enumerate(configs):
        loss, correct, weights = losses[:, index].T  # a step's loss, hits and weights
        logs = {"loss": float(loss.mean()), "accuracy": float(correct.sum() / weights.sum())}
        if valid[index] is not None or backups:  # the member's weights, copied off the grid
            model = trainer.member_model(index, optimizer=bool(backups))  # every process
        if valid[index] is not None:
            # Keras's own, as `fit`'s validation (keras-hub's converts a `PyDataset`).
            found = keras.Model.evaluate(model, valid[index], verbose=0, return_dict=True)
            logs.update({f"val_{name}": float(value) for name, value in found.items()})
        if writer:
            rate = LinearWarmupLinearDecay(run.learning_rate, warmup, run.steps)(step)
            append_metrics(metrics[index], {**logs, **pace, "step": step,
                                            "learning_rate": float(rate)})
            if backups:
                names.append(write_backup(model, backups[index], step // run.eval_every,
                                          run.eval_every - 1, keep_older=True))
    for backup, name in zip(backups, names):
        remove_backups_but(backup, name)


def console_command(name):
    """This environment's console script `name`, as a command to type from here."""
    path = os.path.join(os.path.dirname(sys.executable), name)
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


def write_preset(model, vocabulary_file, config, preset_dir):
    """The run as a keras-hub preset folder: the masked LM, its tokenizer and preprocessor
    (packing to the run's `seq_len`), for `Backbone`, `TextClassifier` and `MaskedLM`'s
    `from_preset`; `metadata.json` records the run under `keras_tupe_training`. Staged
    and renamed, so a folder that exists is complete."""
    model.preprocessor = _preprocessor(vocabulary_file, config)
    record = {
        "command": " ".join(sys.argv),
        "corpus": config.corpus,
        "valid_corpus": config.valid_corpus,
        "steps": config.steps,
        "tokens": config.steps * config.batch_size * config.seq_len,
        "preset": config.preset,
        "config": config.resume_key(),
        "versions": versions(),
    }
    try:
        # A finished run is only re-made with --overwrite, which emptied the folder.
        return write_preset_folder(model, preset_dir, "keras_tupe_training", record,
                                   overwrite=True)
    finally:
        model.preprocessor = None  # training feeds packed batches


def _preprocessor(vocabulary_file, config):
    """The run's masked-LM preprocessor (tokenizer, packing, masking), saved with its presets."""
    tokenizer = TupeTokenizer(vocabulary=vocabulary_file, lowercase=config.lowercase)
    return TupeMaskedLMPreprocessor(
        tokenizer, sequence_length=config.seq_len, mask_selection_rate=config.mask_rate,
        mask_token_rate=config.mask_token_rate, random_token_rate=config.random_token_rate)
