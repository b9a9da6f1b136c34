"""Checks on preset folders before keras-hub reads them, so bad input fails clearly.

A preset folder is keras-hub's unit of exchange: `config.json` (the backbone),
`model.weights.h5`, `metadata.json`, and from a task or a pre-training run also
`tokenizer.json` with `assets/tokenizer/vocabulary.txt`, `preprocessor.json`
and `task.json`. keras-hub's own loader fails on a missing file or a foreign
model with a traceback from deep inside; these checks name the folder, the
problem and what to pass instead.
"""

import difflib
import json
import os
import shutil

from keras_tupe.staging import arrays_bytes, staged, write_json

REGISTERED_BACKBONE = "keras_tupe>TupeBackbone"
# Everything keras-hub writes into a preset folder.
PRESET_FILES = ("config.json", "model.weights.h5", "model.weights.json", "metadata.json",
                "task.json", "task.weights.h5", "preprocessor.json", "tokenizer.json", "assets")
VOCABULARY_ASSET = os.path.join("assets", "tokenizer", "vocabulary.txt")


class classproperty(property):
    """A read-only property of the class (keras-hub's `presets` is one).

    keras-hub's own helper lives in `keras_hub.src.utils` (private), so it is
    re-stated here.
    """

    def __get__(self, _, owner):
        return self.fget(owner)


def is_preset_folder(path):
    """True when `path` is a directory holding a keras-hub `config.json`."""
    return isinstance(path, (str, os.PathLike)) and os.path.isfile(
        os.path.join(path, "config.json")
    )


def check_preset_folder(preset, cls=None, load_weights=True):
    """Raises a clear error unless `preset` is a keras_tupe preset folder.

    Handles (`kaggle://`, `hf://`, ...) are left to keras-hub. A string that is
    neither a built-in name nor a folder is refused with the valid choices.

    Args:
        preset: the `from_preset` argument.
        cls: the calling class, for the message.
        load_weights: bool. Whether the weights file must be there.
    """
    from keras_tupe.models.presets import PRESETS

    name = getattr(cls, "__name__", "TupeBackbone")
    if isinstance(preset, str) and "://" in preset:
        return
    if not isinstance(preset, (str, os.PathLike)) or not os.path.isdir(preset):
        close = difflib.get_close_matches(str(preset), PRESETS, n=3)
        hint = f" Did you mean {close}?" if close else ""
        raise ValueError(
            f"Unknown preset {preset!r}: neither a preset folder nor a built-in name.{hint} "
            f"{name}.from_preset takes a folder written by `save_to_preset` (or by "
            f"training.pretrain, RUN/preset) or one of {sorted(PRESETS)}."
        )
    config_path = os.path.join(preset, "config.json")
    if not os.path.isfile(config_path):
        raise FileNotFoundError(
            f"Preset folder {preset} has no config.json; it is not a keras-hub preset "
            "(write one with `save_to_preset`)."
        )
    with open(config_path, encoding="utf-8") as f:
        config = json.load(f)
    registered = config.get("registered_name")
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
    route runs, so a vocabulary that disagrees with the embedding table is refused on
    every route.
    """
    config = os.path.join(str(preset), "config.json")
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            size = json.load(f).get("config", {}).get("vocabulary_size")
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


def write_preset_folder(model, preset_dir, record_key=None, record=None, overwrite=False):
    """The one writer of preset folders: stage, refuse or overwrite, record, rename.

    `model.save_to_preset` writes into `<preset_dir>.partial` (its free space checked
    against the weights' size first), `record` is added to its `metadata.json` under
    `record_key` (how the preset was made: a run's command and settings, a conversion's
    sources), and the folder is renamed to `preset_dir` once whole. An existing
    non-empty `preset_dir` is refused unless `overwrite`, and then replaced only after
    the new folder is complete.

    Args:
        model: a keras_tupe backbone or task (anything with `save_to_preset`).
        preset_dir: str. The folder to write.
        record_key: str or None. The `metadata.json` key of `record`.
        record: dict or None.
        overwrite: bool. Replace an existing preset folder.

    Raises:
        FileExistsError: `preset_dir` holds files and `overwrite` is false.
        keras_tupe.staging.WriteError: no room, a file-size limit, a read-only folder.
    """
    preset_dir = os.fspath(preset_dir).rstrip(os.sep)
    if os.path.isdir(preset_dir) and not os.listdir(preset_dir):
        os.rmdir(preset_dir)  # an empty folder holds nothing to protect
    if os.path.exists(preset_dir) and not overwrite:
        raise FileExistsError(
            f"{preset_dir} already exists and is not an empty folder; refusing to replace "
            "a preset or any other file. Choose another folder, or pass overwrite=True."
        )
    with staged(preset_dir, folder=True, needed=arrays_bytes(model.weights)) as staging:
        model.save_to_preset(staging)
        if record_key:
            metadata_path = os.path.join(staging, "metadata.json")
            metadata = {}
            if os.path.isfile(metadata_path):
                with open(metadata_path, encoding="utf-8") as f:
                    metadata = json.load(f)
            metadata[record_key] = record
            write_json(metadata_path, metadata, sync=False)
    return preset_dir


def check_weights_file(path, read_data=False):
    """Raises a `ValueError` naming `path` unless it is a whole, readable HDF5 weights file.

    A truncated or corrupt file makes h5py raise a bare `OSError` ("truncated file:
    eof = ...") that names neither the file nor what to do. Opening the file and
    walking its groups finds a truncated one (HDF5 checks the file's end against its
    superblock) in milliseconds; `read_data=True` also reads every array back (a
    writer checking what it has just written).
    """
    import h5py

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


def refuse_overwrite(preset_dir, files, overwrite):
    """Refuses to write `files` into `preset_dir` where one exists, unless `overwrite`.

    keras-hub's saver replaces files silently; a preset folder holds a user's
    weights. With `overwrite=True` the named files are removed first, so a new
    save never mixes with an old one.
    """
    present = [f for f in files if os.path.exists(os.path.join(preset_dir, f))]
    if present and not overwrite:
        raise FileExistsError(
            f"Preset folder {preset_dir} already holds {present}; refusing to overwrite a "
            "saved model. Choose another folder, or pass overwrite=True."
        )
    if present:
        # Overwriting replaces the saved model as a whole: no task, head, preprocessor
        # or tokenizer of the old one may stay beside the new files.
        for f in PRESET_FILES:
            path = os.path.join(preset_dir, f)
            if os.path.isdir(path):
                shutil.rmtree(path)
            elif os.path.exists(path):
                os.remove(path)


def preset_sequence_length(loader):
    """The `sequence_length` a preprocessor built from a preset folder gets by default.

    The folder's `preprocessor.json` (the pre-training length), else 512 capped at
    an absolute encoder's table (keras-hub's default is 512 for every preset).
    """
    path = os.path.join(str(loader.preset), "preprocessor.json")
    if os.path.isfile(path):
        with open(path, encoding="utf-8") as f:
            length = json.load(f).get("config", {}).get("sequence_length")
        if length:
            return int(length)
    return min(512, int(loader.config["config"].get("max_sequence_length", 512)))
