"""Checks on preset folders before keras-hub reads them, so bad input fails clearly.

A preset folder is keras-hub's unit of exchange: `config.json` (the backbone),
`model.weights.h5`, `metadata.json`, and from a task or a pre-training run also
`tokenizer.json` with `assets/tokenizer/vocabulary.txt`, `preprocessor.json`
and `task.json`. keras-hub's own loader fails on a missing file or a foreign
model with a traceback from deep inside; these checks name the folder, the
problem and what to pass instead.
"""

import importlib.util
import os
import shutil

import h5py
import keras

from keras_tupe.models.saving import arrays_bytes
from keras_tupe_base.files import read_json
from keras_tupe_base.presets import unknown_preset
from keras_tupe_base.staging import staged, write_json

REGISTERED_BACKBONE = "keras_tupe>TupeBackbone"
VOCABULARY_ASSET = os.path.join("assets", "tokenizer", "vocabulary.txt")
# A pre-training run's folder: its final model and its step checkpoints, preset folders.
RUN_PRESET = "preset"
RUN_CHECKPOINTS = "checkpoints"


class classproperty(property):
    """A read-only property of the class (keras-hub's `presets` is one; its helper is private)."""

    def __get__(self, _, owner):
        return self.fget(owner)


def is_preset_folder(path):
    """True when `path` is a directory holding a keras-hub `config.json`."""
    return isinstance(path, (str, os.PathLike)) and os.path.isfile(
        os.path.join(path, "config.json")
    )


def checkpoint_name(step):
    """The name of a run's checkpoint after `step` optimizer steps: `step_0000200`."""
    return f"step_{int(step):07d}"


def run_model(run_dir):
    """Where the pre-training run `run_dir` keeps its final model: `RUN/preset/`."""
    return os.path.join(os.fspath(run_dir), RUN_PRESET)


def run_checkpoint(run_dir, step):
    """Where the run `run_dir` keeps its checkpoint after `step` steps:
    `RUN/checkpoints/step_NNNNNNN/`."""
    return os.path.join(os.fspath(run_dir), RUN_CHECKPOINTS, checkpoint_name(step))


def _known_package(registered_name):
    """Whether `registered_name` (`package>Class`) names an installed package."""
    package, separator, _ = str(registered_name).partition(">")
    try:
        return bool(separator) and importlib.util.find_spec(package) is not None
    except (ImportError, ValueError):  # `a.b` with no `a`, an empty or odd name
        return False


def check_preset_folder(preset, cls=None, load_weights=True):
    """Raises a clear error unless `preset` is a keras_tupe preset folder.

    Handles (`kaggle://`, `hf://`, ...) are left to keras-hub. A string that is
    neither a built-in name nor a folder is refused with the valid choices.

    Args:
        preset: the `from_preset` argument.
        cls: the calling class, for the message.
        load_weights: bool. Whether the weights file must be there.
    """
    name = getattr(cls, "__name__", "TupeBackbone")
    if isinstance(preset, str) and "://" in preset:
        return
    if not isinstance(preset, (str, os.PathLike)) or not os.path.isdir(preset):
        raise ValueError(
            f"{unknown_preset(preset)} Or a folder written by {name}.save_to_preset or by "
            "keras-tupe-pretrain (RUN/preset).")
    config_path = os.path.join(preset, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"Preset folder {preset} has no config.json; it is not a keras-hub preset "
            "(write one with `save_to_preset`)."
        )
    config = read_json(config_path)
    registered = config.get("registered_name")
    if registered != REGISTERED_BACKBONE and not _known_package(registered):
        raise ValueError(
            f"Preset folder {preset} is damaged: the registered_name of its config.json, "
            f"{registered}, is no class of a known package (a keras_tupe preset has "
            f"{REGISTERED_BACKBONE}). Restore the folder from its source, or write it again "
            "with save_to_preset.")
    if registered != REGISTERED_BACKBONE:
        raise ValueError(
            f"Preset folder {preset} holds a {registered!r} model, not a keras_tupe "
            f"{REGISTERED_BACKBONE!r}. Load it with keras_hub.models.Backbone.from_preset "
            "or that family's own class."
        )
    weights = [f for f in ("model.weights.h5", "model.weights.json")
               if os.path.isfile(os.path.join(preset, f))]
    if load_weights and not weights:
        raise FileNotFoundError(
            f"Preset folder {preset} has no model.weights.h5: the weights are missing. "
            "Copy the whole folder, or pass load_weights=False for a fresh model."
        )
    if load_weights and "model.weights.h5" in weights:
        check_weights_file(os.path.join(preset, "model.weights.h5"))
    check_vocabulary_size(preset, config["config"]["vocabulary_size"])


def check_backbone_vocabulary_size(preset):
    """`check_vocabulary_size` against the backbone's `config.json` in `preset`, if any.

    Tokenizers call it from `load_preset_assets`, which every keras-hub `from_preset`
    route runs (`keras_hub.models.TextClassifier`, `MaskedLM`, ...).
    """
    config = read_json(os.path.join(str(preset), "config.json"))
    size = config.get("config", {}).get("vocabulary_size")
    if size is not None:
        check_vocabulary_size(str(preset), size)


def check_vocabulary_size(preset, vocabulary_size):
    """The preset's tokenizer vocabulary (if any) has `vocabulary_size` tokens."""
    tokenizer_config = os.path.join(preset, "tokenizer.json")
    if not os.path.isfile(tokenizer_config):
        return
    path = os.path.join(preset, VOCABULARY_ASSET)
    if not os.path.isfile(path):
        raise FileNotFoundError(
            f"Preset folder {preset} has tokenizer.json but no {VOCABULARY_ASSET}: the "
            "tokenizer's vocabulary is missing. Copy the whole folder."
        )
    with open(path, encoding="utf-8") as f:
        size = sum(1 for _ in f)
    if size != vocabulary_size:
        raise ValueError(
            f"Preset folder {preset}: the vocabulary has {size} tokens but the backbone's "
            f"config.json says vocabulary_size={vocabulary_size}. The two must come from the "
            "same run; re-save the preset from the model and tokenizer that belong together."
        )


# Folders `write_preset_folder` is writing now: a `save_to_preset` into one of them (the
# model's own, then keras-hub's nested backbone / preprocessor / tokenizer saves) writes
# straight through keras-hub's saver.
_WRITING = set()


class StagedPresetSaving:
    """Mixed in before a keras-hub class: `save_to_preset` goes through `write_preset_folder`.

    The one overwrite policy for every preset keras_tupe writes (a backbone, a task, a
    preprocessor, a tokenizer); see `write_preset_folder`.
    """

    def save_to_preset(self, preset_dir, *args, overwrite=False, **kwargs):
        """Writes this object into `preset_dir` (`write_preset_folder`; `*args, **kwargs`
        are keras-hub's, `max_shard_size`): files already there are kept, one this save
        would write is refused unless `overwrite`, which replaces the whole folder."""
        if os.path.abspath(preset_dir) in _WRITING:
            return super().save_to_preset(preset_dir, *args, **kwargs)
        return write_preset_folder(self, preset_dir, overwrite=overwrite,
                                   save_args=(args, kwargs))


def refuse_existing_folder(preset_dir, error=FileExistsError):
    """Raises `error` when `preset_dir` exists and is not an empty folder.

    What a writer that makes whole folders only (a converter, before it reads a
    checkpoint) checks first; `write_preset_folder` itself also adds files beside
    others, refusing only the files it would replace.
    """
    preset_dir = os.fspath(preset_dir).rstrip(os.sep)
    if os.path.exists(preset_dir) and (not os.path.isdir(preset_dir)
                                       or os.listdir(preset_dir)):
        raise error(
            f"{preset_dir} already exists and is not an empty folder; refusing to replace "
            "a preset or any other file. Choose another folder, or remove it."
        )


def write_preset_folder(model, preset_dir, record_key=None, record=None, overwrite=False,
                        preprocessor=None, save_args=((), {})):
    """The one writer of preset folders: stage, refuse or overwrite, record, rename.

    `model.save_to_preset` writes into `<preset_dir>.partial` (its free space checked
    against the weights' size first), `record` is added to its `metadata.json` under
    `record_key` (how the preset was made: a run's command and settings, a conversion's
    sources, a fine-tuning's settings and scores), and the folder is renamed to
    `preset_dir` once whole. Into an existing folder the new files are added beside the
    others (keras-hub's idiom: a tokenizer saved beside its backbone), unless one of
    them is already there: then nothing is written (`FileExistsError`) unless
    `overwrite`, which replaces the whole folder once the new one is complete.

    Args:
        model: anything with `save_to_preset` (a backbone, task, preprocessor, tokenizer).
        preset_dir, record_key, record, overwrite: as above.
        preprocessor: a preprocessor saved beside `model` (a backbone), or None: a
            backbone-and-preprocessor preset without `task.json`.
        save_args: `(args, kwargs)` for `model.save_to_preset` (`max_shard_size`).

    Raises:
        FileExistsError: a file this save writes is in `preset_dir` and `overwrite` is
            false.
        keras_tupe_base.staging.WriteError: no room, a file-size limit, a read-only folder.
    """
    preset_dir = os.fspath(preset_dir).rstrip(os.sep)
    if os.path.isdir(preset_dir) and not os.listdir(preset_dir):
        os.rmdir(preset_dir)  # an empty folder holds nothing to protect
    adding = os.path.exists(preset_dir) and not overwrite
    if adding and not os.path.isdir(preset_dir):
        raise FileExistsError(f"{preset_dir} is a file, not a preset folder; refusing to "
                              "replace it. Choose another folder.")
    weights = getattr(model, "weights", None) or []
    # Adding: staged under another name, then moved in file by file once none clashes.
    target = preset_dir + ".adding" if adding else preset_dir
    args, kwargs = save_args
    with staged(target, folder=True, needed=arrays_bytes(weights)) as staging:
        key = os.path.abspath(staging)
        _WRITING.add(key)
        try:
            model.save_to_preset(staging, *args, **kwargs)
            if preprocessor is not None:
                preprocessor.save_to_preset(staging)
        finally:
            _WRITING.discard(key)
        _store_variable_dtype(staging)
        if record_key:
            metadata_path = os.path.join(staging, "metadata.json")
            write_json(metadata_path, {**read_json(metadata_path), record_key: record},
                       sync=False)
        if adding:
            _add_files(staging, preset_dir)
    if adding:
        shutil.rmtree(target, ignore_errors=True)
    return preset_dir


def _store_variable_dtype(preset_dir):
    """Records a mixed-precision backbone's dtype as its variables' (`float32`).

    keras-hub's loader (0.2x, `_resolve_dtype`) raises "Invalid dtype: mixed_bfloat16"
    on a preset saved under a mixed policy, so a model trained in mixed precision
    could not be loaded back; for a float dtype it uses the loading process's policy
    anyway, so the name stored only has to be a float. The weights are stored in the
    variables' dtype; how the model was trained stays in the run's record.
    """
    path = os.path.join(preset_dir, "config.json")
    config = read_json(path)
    policy = config.get("config", {}).get("dtype")
    name = policy.get("config", {}).get("name", "") if isinstance(policy, dict) else ""
    if name.startswith("mixed_"):
        policy["config"]["name"] = keras.DTypePolicy(name).variable_dtype
        write_json(path, config, sync=False)


def _add_files(staging, preset_dir):
    """Moves every file of `staging` into `preset_dir`, or none when one is there already."""
    files = [os.path.relpath(os.path.join(root, name), staging)
             for root, _, names in os.walk(staging) for name in names]
    present = sorted(f for f in files if os.path.lexists(os.path.join(preset_dir, f)))
    if present:
        raise FileExistsError(
            f"Preset folder {preset_dir} already holds {present}; refusing to overwrite a "
            "saved model. Choose another folder, or pass overwrite=True."
        )
    for name in files:
        os.makedirs(os.path.dirname(os.path.join(preset_dir, name)), exist_ok=True)
        os.replace(os.path.join(staging, name), os.path.join(preset_dir, name))


def check_weights_file(path, read_data=False):
    """Raises a `ValueError` naming `path` unless it is a whole, readable HDF5 weights file.

    A truncated or corrupt file makes h5py raise a bare `OSError` ("truncated file:
    eof = ...") that names neither the file nor what to do. Opening the file and
    walking its groups finds a truncated one (HDF5 checks the file's end against its
    superblock) in milliseconds; `read_data=True` also reads every array back (a
    writer checking what it has just written).
    """
    def read(name, item):
        if read_data and isinstance(item, h5py.Dataset):
            item[()]

    try:
        with h5py.File(path, "r") as f:
            f.visititems(read)
    except (OSError, RuntimeError, KeyError) as error:
        reason = " ".join(str(error).split()) or type(error).__name__
        raise ValueError(
            f"{path} is truncated or corrupt and cannot be read ({reason}). Copy it again "
            "from where it came from, or write it again (a pre-training run's backup/ "
            "resumes it)."
        ) from None


def preset_sequence_length(loader):
    """The `sequence_length` a preprocessor built from a preset folder gets by default.

    The folder's `preprocessor.json` (the pre-training length), else 512 capped at
    an absolute encoder's table (keras-hub's default is 512 for every preset).
    """
    preprocessor = read_json(os.path.join(str(loader.preset), "preprocessor.json"))
    length = preprocessor.get("config", {}).get("sequence_length")
    if length:
        return int(length)
    return min(512, int(loader.config["config"].get("max_sequence_length", 512)))
