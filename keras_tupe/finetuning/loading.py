"""Loading and saving for fine-tuning: the pre-trained encoder, its vocabulary, the classifier.

Every artefact is a keras-hub preset folder; a pre-training run's layout is spelled next
to the preset writer (`keras_tupe.models.preset_folders.run_model`, `run_checkpoint`).
`resolve_init` says what an `--init` names, by one rule; `load_backbone` and
`default_vocabulary` follow it. `save_classifier` writes a fine-tuned classifier with its
preprocessor; `load_classifier` reads it back.
"""

import glob
import json
import os

import keras_hub

from keras_tupe import data
from keras_tupe.models import TupeBackbone, TupeTextClassifierPreprocessor, TupeTokenizer
from keras_tupe.models.preset_folders import (
    RUN_CHECKPOINTS,
    RUN_PRESET,
    VOCABULARY_ASSET,
    is_preset_folder,
    refuse_existing_folder,
    run_model,
    write_preset_folder,
)
from keras_tupe_base.files import read_json

# `metadata.json`'s key for how a fine-tuned preset was made (task, settings, scores).
FINETUNING_RECORD = "keras_tupe_finetuning"
INIT_ACCEPTS = ("a preset folder (with config.json, e.g. a run's preset/ or one of its "
                "checkpoints/step_N/) or a pre-training run folder (its preset/)")


def resolve_init(init):
    """The preset folder `--init` names (`init` itself, or a run folder's `preset/`), or
    a clear error.

    Raises:
        ValueError: `init` is an unfinished pre-training run (what to do is said).
        FileNotFoundError: `init` names no preset folder; the message lists what is
            accepted.
    """
    init = os.fspath(init)
    for folder in (init, os.path.join(init, RUN_PRESET)):
        if is_preset_folder(folder):
            return folder
    if os.path.isdir(init):
        unfinished = unfinished_run(init)
        if unfinished:
            raise ValueError(unfinished)
    what = ("does not exist" if not os.path.exists(init)
            else "is a folder without config.json" if os.path.isdir(init)
            else "is a file, not a preset folder")
    raise FileNotFoundError(f"No encoder at {init} ({what}): give {INIT_ACCEPTS}.")


def load_backbone(init):
    """A `TupeBackbone` from the preset folder `init` names (`resolve_init`); a task's
    preset (masked LM, classifier) gives its backbone."""
    return TupeBackbone.from_preset(resolve_init(init))


def encoder_config(init):
    """The backbone settings (`get_config()`) of the encoder `init` names (`resolve_init`),
    read from its `config.json` without loading it."""
    return read_json(os.path.join(resolve_init(init), "config.json"))["config"]


def unfinished_run(run_dir):
    """What to do with a pre-training run directory that has no encoder yet, or None.

    A run saves its encoder (`preset/`) only after its last step; until
    then it holds `run_config.json`, a backup to resume from and any `--save-steps`
    checkpoints (`step_NNNNNNN/`), which fine-tuning can start from. None for a finished
    run (`run_model` exists) or another folder.
    """
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
    checkpoints = sorted(  # staging copies (`.partial`) are never complete preset folders
        (path for path in glob.glob(os.path.join(run_dir, RUN_CHECKPOINTS, "step_*"))
         if is_preset_folder(path)), key=os.path.basename)
    use = (f"or pass one of its checkpoints as --init, e.g. {checkpoints[-1]}"
           if checkpoints else "or, to fine-tune before it ends, pre-train with --save-steps "
                               "to keep checkpoints (run_dir/checkpoints/step_N/)")
    return (f"{run_dir} is an unfinished pre-training run ({progress}): the encoder is saved "
            "only after the last step. Finish it by running the same `training.pretrain` "
            f"command again (it resumes; the command is in {config_path}), {use}.")


def default_vocabulary(init):
    """The vocabulary asset of the preset folder `init` names (`resolve_init`)."""
    path = resolve_init(init)
    candidate = os.path.join(path, VOCABULARY_ASSET)
    if os.path.exists(candidate):
        return candidate
    conversion = read_json(os.path.join(path, "metadata.json")).get("keras_tupe_conversion", {})
    if conversion.get("kind") == "fairseq":  # keras_tupe.convert.convert_fairseq's record
        raise ValueError(
            f"{init} is a fairseq checkpoint converted without BPE codes: the preset has no "
            "tokenizer, so it cannot read text, and no `vocab=` can stand in (its token ids "
            "are the fairseq dictionary's BPE pieces). Convert "
            f"{conversion.get('source', 'the checkpoint')} again, giving the converter the BPE "
            "codes it was pre-trained with (`bpe_codes=`), and pass that preset.")
    raise FileNotFoundError(
        f"No vocabulary for {init} (looked for {candidate}); pass the "
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
    info = dict(info or {})
    refuse_existing_folder(save_dir)
    preprocessor = model.preprocessor
    if preprocessor is None:
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
    """`(classifier, vocabulary_file, info)` from a preset folder of `save_classifier`: the
    classifier with its preprocessor, its vocabulary asset, `info` from `metadata.json`."""
    if not os.path.isfile(os.path.join(save_dir, "task.json")):
        raise FileNotFoundError(f"{save_dir} holds no fine-tuned classifier (no task.json): give "
                                "a preset folder written by fine-tuning with --save-models "
                                "(or save_classifier).")
    model = keras_hub.models.TextClassifier.from_preset(save_dir)
    with open(os.path.join(save_dir, "metadata.json"), encoding="utf-8") as f:
        info = json.load(f).get(FINETUNING_RECORD, {})
    return model, os.path.join(save_dir, VOCABULARY_ASSET), info


def load_matching_tokenizer(backbone, vocab, lowercase=True):
    """The tokenizer of `vocab`, refused unless its size is the encoder's vocabulary size."""
    return check_tokenizer_size(data.load_tokenizer(vocab, lowercase=lowercase), backbone, vocab)


def check_tokenizer_size(tokenizer, backbone, source):
    """`tokenizer`, refused unless its size is the encoder's vocabulary size."""
    if tokenizer.vocabulary_size() != backbone.vocabulary_size:
        raise ValueError(
            f"{source} has {tokenizer.vocabulary_size()} tokens but the encoder was built for "
            f"{backbone.vocabulary_size}: not the vocabulary it was pre-trained with.")
    return tokenizer

