"""Loading and saving for fine-tuning: the pre-trained encoder, its vocabulary, the classifier.

Every artefact is a keras-hub preset folder. A pre-training run's layout is spelled here
once (`run_model`, `run_checkpoint`), each reading the `.keras` file older versions wrote
too. `resolve_init` says what an `--init` names, by one rule; `load_backbone` and
`default_vocabulary` follow it. `save_classifier` writes a fine-tuned classifier with its
preprocessor; `load_classifier` reads it back, and the folder an older version wrote.
"""

import json
import os

from keras_tupe.files import read_json

# A pre-training run's folder: its final model and its step checkpoints, preset folders.
RUN_PRESET = "preset"
RUN_CHECKPOINTS = "checkpoints"
# What older versions wrote, read as input only: a pre-training run's encoder and masked
# LM (written last: it marked the run finished), and a fine-tuned classifier's folder.
OLD_RUN_FILES = ("backbone.keras", "mlm.keras")
CLASSIFIER_FILE = "classifier.keras"
CLASSIFIER_INFO = "finetune.json"
# `metadata.json`'s key for how a fine-tuned preset was made (task, settings, scores).
FINETUNING_RECORD = "keras_tupe_finetuning"
INIT_ACCEPTS = ("a preset folder (with config.json, e.g. a run's preset/), a pre-training "
                "run folder (its preset/), or, from older versions, a run folder with "
                f"{' or '.join(OLD_RUN_FILES)} or a .keras file")


def checkpoint_name(step):
    """The name of a run's checkpoint after `step` optimizer steps: `step_0000200`."""
    return f"step_{int(step):07d}"


def run_model(run_dir):
    """Where the pre-training run `run_dir` keeps its final model: `RUN/preset/`, else the
    `mlm.keras` of an older version; the preset path when there is neither (unfinished)."""
    preset = os.path.join(os.fspath(run_dir), RUN_PRESET)
    old = os.path.join(os.fspath(run_dir), OLD_RUN_FILES[1])
    return old if not os.path.exists(preset) and os.path.isfile(old) else preset


def run_checkpoint(run_dir, step):
    """Where the run `run_dir` keeps its checkpoint after `step` steps, as `run_model`:
    `RUN/checkpoints/step_NNNNNNN/`, else the `.keras` file of an older version."""
    folder = os.path.join(os.fspath(run_dir), RUN_CHECKPOINTS, checkpoint_name(step))
    old = folder + ".keras"
    return old if not os.path.exists(folder) and os.path.isfile(old) else folder


def resolve_init(init):
    """`("preset", folder)` or `("keras", file)`: what `--init` names, or a clear error.

    Raises:
        ValueError: `init` is an unfinished pre-training run (what to do is said).
        FileNotFoundError: nothing `init` names is an encoder; the message lists what
            is accepted.
    """
    from keras_tupe.models.preset_folders import is_preset_folder

    init = os.fspath(init)
    for folder in (init, os.path.join(init, RUN_PRESET)):
        if is_preset_folder(folder):
            return "preset", folder
    if os.path.isfile(init) and init.endswith(".keras"):
        return "keras", init
    if os.path.isdir(init):
        for name in OLD_RUN_FILES:
            if os.path.isfile(os.path.join(init, name)):
                return "keras", os.path.join(init, name)
        unfinished = unfinished_run(init)
        if unfinished:
            raise ValueError(unfinished)
    what = ("does not exist" if not os.path.exists(init)
            else "is a folder without an encoder" if os.path.isdir(init)
            else "is not a .keras file")
    raise FileNotFoundError(f"No encoder at {init} ({what}): give {INIT_ACCEPTS}.")


def load_backbone(init):
    """A `TupeBackbone` from what `init` names (`resolve_init`).

    A task's preset or `.keras` file (masked LM, classifier) gives its backbone.
    """
    from keras_tupe.models import TupeBackbone  # registers every class for the loaders

    kind, path = resolve_init(init)
    if kind == "preset":
        return TupeBackbone.from_preset(path)
    from keras_tupe.models.saving import load_saved_model

    model = load_saved_model(path)
    backbone = model if isinstance(model, TupeBackbone) else getattr(model, "backbone", None)
    if not isinstance(backbone, TupeBackbone):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a keras_tupe encoder.")
    return backbone


def unfinished_run(run_dir):
    """What to do with a pre-training run directory that has no encoder yet, or None.

    A run saves its encoder (`preset/`) only after its last step; until
    then it holds `run_config.json`, a backup to resume from and any `--save-steps`
    checkpoints (`step_NNNNNNN/`, or `.keras` from older versions), which fine-tuning
    can start from. None for a finished run (`run_model` exists) or another folder.
    """
    import glob

    config_path = os.path.join(run_dir, "run_config.json")
    if not os.path.isfile(config_path) or os.path.exists(run_model(run_dir)):
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
    from keras_tupe.models.preset_folders import is_preset_folder

    checkpoints = sorted(
        (path for path in glob.glob(os.path.join(run_dir, RUN_CHECKPOINTS, "step_*"))
         if is_preset_folder(path)  # staging copies (`.partial`) are never complete
         or path.endswith(".keras") and not path.endswith(".partial.keras")),
        key=os.path.basename)
    use = (f"or pass one of its checkpoints as --init, e.g. {checkpoints[-1]}"
           if checkpoints else "or, to fine-tune before it ends, pre-train with --save-steps "
                               "to keep checkpoints (run_dir/checkpoints/step_N/)")
    return (f"{run_dir} is an unfinished pre-training run ({progress}): the encoder is saved "
            "only after the last step. Finish it by running the same `training.pretrain` "
            f"command again (it resumes; the command is in {config_path}), {use}.")


def default_vocabulary(init):
    """The vocabulary of what `init` names (`resolve_init`): a preset's asset, else the
    `vocab.txt` beside a `.keras` file (or of its run, for a step checkpoint)."""
    from keras_tupe.models.preset_folders import VOCABULARY_ASSET

    kind, path = resolve_init(init)
    if kind == "preset":
        candidates = [os.path.join(path, VOCABULARY_ASSET)]
    else:
        directory = os.path.dirname(os.path.abspath(path))
        candidates = [os.path.join(directory, "vocab.txt")]
        if os.path.basename(directory) == RUN_CHECKPOINTS:  # an old run's step_N.keras
            candidates.append(os.path.join(os.path.dirname(directory), "vocab.txt"))
    for candidate in candidates:
        if os.path.exists(candidate):
            return candidate
    conversion = (read_json(os.path.join(path, "metadata.json")).get("keras_tupe_conversion", {})
                  if kind == "preset" else {})
    if conversion.get("kind") == "fairseq":  # keras_tupe.convert.convert_fairseq's record
        raise ValueError(
            f"{init} is a fairseq checkpoint converted without BPE codes: the preset has no "
            "tokenizer, so it cannot read text, and no `vocab=` can stand in (its token ids "
            "are the fairseq dictionary's BPE pieces). Convert "
            f"{conversion.get('source', 'the checkpoint')} again, giving the converter the BPE "
            "codes it was pre-trained with (`bpe_codes=`), and pass that preset.")
    raise FileNotFoundError(
        f"No vocabulary for {init} (looked for {', '.join(candidates)}); pass the "
        "vocabulary the encoder was pre-trained with as `vocab=`."
    )


def save_classifier(model, save_dir, vocabulary_file=None, info=None):
    """Writes the fine-tuned `model` with its preprocessor as the preset folder `save_dir`.

    `keras_hub.models.TextClassifier.from_preset(save_dir)` reloads it. `info` (task,
    settings, dev scores) goes to `metadata.json` under `keras_tupe_finetuning`. A model
    without a preprocessor gets a `TupeTextClassifierPreprocessor` of `vocabulary_file`
    (a path or a tokenizer) at `info["seq_len"]`. Staged, renamed once whole; a
    `save_dir` that is not empty is refused.
    """
    from keras_tupe.models.preset_folders import refuse_existing_folder, write_preset_folder

    info = dict(info or {})
    refuse_existing_folder(save_dir)
    preprocessor = model.preprocessor
    if preprocessor is None:
        from keras_tupe.models import TupeTextClassifierPreprocessor, TupeTokenizer

        tokenizer = (TupeTokenizer(vocabulary=os.fspath(vocabulary_file),
                                   lowercase=info.get("lowercase", True))
                     if isinstance(vocabulary_file, (str, os.PathLike)) else vocabulary_file)
        if tokenizer is None:
            raise ValueError("save_classifier: the model has no preprocessor; pass its "
                             "vocabulary_file.")
        model.preprocessor = TupeTextClassifierPreprocessor(
            tokenizer, sequence_length=info.get("seq_len", 128))
    try:
        return write_preset_folder(model, save_dir, FINETUNING_RECORD, info)
    finally:
        model.preprocessor = preprocessor


def load_classifier(save_dir):
    """`(classifier, vocabulary_file, info)` from a folder of `save_classifier`.

    A preset folder (the classifier with its preprocessor; `info` from its
    `metadata.json`), or the folder of an older version (`CLASSIFIER_FILE`, `vocab.txt`,
    `finetune.json`).
    """
    import keras_hub

    import keras_tupe.models  # noqa: F401  (registers the classes, in a command's process too)
    from keras_tupe.models.preset_folders import VOCABULARY_ASSET

    if os.path.isfile(os.path.join(save_dir, "task.json")):
        model = keras_hub.models.TextClassifier.from_preset(save_dir)
        with open(os.path.join(save_dir, "metadata.json"), encoding="utf-8") as f:
            info = json.load(f).get(FINETUNING_RECORD, {})
        return model, os.path.join(save_dir, VOCABULARY_ASSET), info
    path = os.path.join(save_dir, CLASSIFIER_FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{save_dir} holds no fine-tuned classifier (no task.json, nor "
                                f"an older {CLASSIFIER_FILE}): give a folder written by "
                                "fine-tuning with --save-models (or save_classifier).")
    with open(os.path.join(save_dir, CLASSIFIER_INFO)) as f:
        info = json.load(f)
    from keras_tupe.models.saving import load_saved_model

    return load_saved_model(path), os.path.join(save_dir, "vocab.txt"), info


def load_matching_tokenizer(backbone, vocab, lowercase=True):
    """The tokenizer of `vocab`, refused unless its size is the encoder's vocabulary size."""
    from keras_tupe import data

    return check_tokenizer_size(data.load_tokenizer(vocab, lowercase=lowercase), backbone, vocab)


def check_tokenizer_size(tokenizer, backbone, source):
    """`tokenizer`, refused unless its size is the encoder's vocabulary size."""
    if tokenizer.vocabulary_size() != backbone.vocabulary_size:
        raise ValueError(
            f"{source} has {tokenizer.vocabulary_size()} tokens but the encoder was built for "
            f"{backbone.vocabulary_size}: not the vocabulary it was pre-trained with.")
    return tokenizer

