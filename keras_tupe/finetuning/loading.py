"""Loading and saving for fine-tuning: the pre-trained encoder, its vocabulary, the classifier.

`load_backbone` and `default_vocabulary` accept a keras-hub preset folder, a
pre-training run directory or a `.keras` file; `load_matching_tokenizer` refuses a
vocabulary of another size than the encoder's. `save_classifier` writes a fine-tuned
classifier with its vocabulary and settings, `load_classifier` reads it back.
"""

import json
import os

import keras


def load_backbone(init):
    """A `TupeBackbone` from a preset folder, a pre-training run or a `.keras` file.

    Accepts a keras-hub preset folder (`save_to_preset`; a run's `preset/`), a
    pre-training run directory (its `preset/`, else its `backbone.keras`), a
    backbone `.keras`, or a task `.keras` (masked LM, classifier: its `.backbone`).
    """
    import keras_tupe  # noqa: F401  (registers the classes for loading)
    from keras_tupe.models import TupeBackbone
    from keras_tupe.models.preset_folders import is_preset_folder

    run_preset = os.path.join(init, "preset")
    if is_preset_folder(init) or is_preset_folder(run_preset):
        return TupeBackbone.from_preset(init if is_preset_folder(init) else run_preset)
    path = os.path.join(init, "backbone.keras") if os.path.isdir(init) else init
    if not os.path.exists(path) and os.path.isdir(init):
        unfinished = unfinished_run(init)
        if unfinished:
            raise ValueError(unfinished)
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"No encoder at {init}: give a preset folder (with config.json), a pre-training "
            "run directory (with preset/ or backbone.keras) or a .keras file."
        )
    from keras_tupe.models.task import load_saved_model

    model = load_saved_model(path)
    backbone = model if isinstance(model, TupeBackbone) else getattr(model, "backbone", None)
    if not isinstance(backbone, TupeBackbone):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a keras_tupe encoder.")
    return backbone


def unfinished_run(run_dir):
    """What to do with a pre-training run directory that has no encoder yet, or None.

    A run saves its encoder (`preset/`, `backbone.keras`) only after its last step; until
    then it holds `run_config.json`, a backup to resume from and any `--save-steps`
    checkpoints, which fine-tuning can start from.
    """
    import glob

    config_path = os.path.join(run_dir, "run_config.json")
    if not os.path.isfile(config_path):
        return None
    try:
        with open(config_path) as f:
            config = json.load(f)["config"]
        steps, eval_every = int(config["steps"]), int(config["eval_every"])
    except (OSError, ValueError, KeyError, TypeError):
        steps = eval_every = None
    done = 0
    metadata = os.path.join(run_dir, "backup", "training_metadata.json")
    if os.path.isfile(metadata) and eval_every:
        try:
            with open(metadata) as f:
                done = int(json.load(f)["epoch"]) * eval_every
        except (OSError, ValueError, KeyError, TypeError):
            pass
    progress = f"step {done:,} of {steps:,} backed up" if steps else "not finished"
    checkpoints = sorted(path for path in glob.glob(os.path.join(run_dir, "checkpoints",
                                                                 "step_*.keras"))
                         if not path.endswith(".partial.keras"))
    use = (f"or pass one of its checkpoints as --init, e.g. {checkpoints[-1]}"
           if checkpoints else "or, to fine-tune before it ends, pre-train with --save-steps "
                               "to keep checkpoints (run_dir/checkpoints/step_N.keras)")
    return (f"{run_dir} is an unfinished pre-training run ({progress}): the encoder is saved "
            "only after the last step. Finish it by running the same `training.pretrain` "
            f"command again (it resumes; the command is in {config_path}), {use}.")


def default_vocabulary(init):
    """The vocabulary of a preset folder or run directory (or of a `.keras` file's directory)."""
    from keras_tupe.models.preset_folders import VOCABULARY_ASSET

    directory = init if os.path.isdir(init) else os.path.dirname(os.path.abspath(init))
    directories = [directory]
    if os.path.basename(directory) == "checkpoints":  # a run's step_N.keras: the run's
        directories.append(os.path.dirname(directory))
    for folder in directories:
        for candidate in (os.path.join(folder, VOCABULARY_ASSET),
                          os.path.join(folder, "vocab.txt")):
            if os.path.exists(candidate):
                return candidate
    raise FileNotFoundError(
        f"No vocabulary in {directory} (neither {VOCABULARY_ASSET} nor vocab.txt); pass the "
        "vocabulary the encoder was pre-trained with."
    )



CLASSIFIER_FILE = "classifier.keras"
CLASSIFIER_INFO = "finetune.json"


def save_classifier(model, save_dir, vocabulary_file, info):
    """Writes `save_dir/` with `classifier.keras`, its `vocab.txt` and `finetune.json`.

    Everything `keras_tupe.export.export_classifier` needs to serve raw strings
    (`python -m training.export classifier --init SAVE_DIR`). `vocabulary_file` is the
    vocabulary's path or the tokenizer itself (its `get_vocabulary()` is written). The
    classifier is saved without its preprocessor (`vocab.txt` and `finetune.json` say
    how it packs). An existing `save_dir` is refused: nothing a user has is replaced.
    """
    import shutil

    if os.path.exists(save_dir):
        raise FileExistsError(f"{save_dir} already exists; choose another directory for the "
                              "fine-tuned classifier or remove it.")
    staging = save_dir.rstrip("/") + ".partial"
    shutil.rmtree(staging, ignore_errors=True)  # a previous interrupted save
    os.makedirs(staging)
    from keras_tupe.models.task import without_training_state

    preprocessor = getattr(model, "preprocessor", None)
    model.preprocessor = None
    try:
        with without_training_state(model):  # architecture and weights, for serving
            model.save(os.path.join(staging, CLASSIFIER_FILE))
    finally:
        model.preprocessor = preprocessor
    if isinstance(vocabulary_file, (str, os.PathLike)):
        shutil.copyfile(vocabulary_file, os.path.join(staging, "vocab.txt"))
    else:
        with open(os.path.join(staging, "vocab.txt"), "w", encoding="utf-8") as f:
            f.write("".join(token + "\n" for token in vocabulary_file.get_vocabulary()))
    with open(os.path.join(staging, CLASSIFIER_INFO), "w") as f:
        json.dump(info, f, indent=2)
    os.replace(staging, save_dir)
    return save_dir


def load_classifier(save_dir):
    """`(classifier, vocabulary_file, info)` from a directory of `save_classifier`."""
    import keras_tupe  # noqa: F401  (registers the classes for loading)

    path = os.path.join(save_dir, CLASSIFIER_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"No {CLASSIFIER_FILE} in {save_dir}: give a directory written by "
                                "fine-tuning with --save-models (or save_classifier).")
    with open(os.path.join(save_dir, CLASSIFIER_INFO)) as f:
        info = json.load(f)
    from keras_tupe.models.task import load_saved_model

    model = load_saved_model(path)
    return model, os.path.join(save_dir, "vocab.txt"), info


def load_matching_tokenizer(backbone, vocab, lowercase=True):
    """The tokenizer of `vocab`, refused unless its size is the encoder's vocabulary size."""
    from keras_tupe import data

    tokenizer = data.load_tokenizer(vocab, lowercase=lowercase)
    if tokenizer.vocabulary_size() != backbone.vocabulary_size:
        raise ValueError(
            f"{vocab} has {tokenizer.vocabulary_size()} tokens but the encoder was built for "
            f"{backbone.vocabulary_size}: not the vocabulary it was pre-trained with."
        )
    return tokenizer

