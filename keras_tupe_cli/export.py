"""Export keras_tupe models as SavedModels: for TensorFlow Serving and TF-Hub-style reuse.

    # The encoder (TF-Hub BERT encoder API; --with-mlm adds the .mlm sub-object):
    keras-tupe-export encoder --init runs/tupe_r_mini_enwiki \\
        --out saved_models/tupe_r_mini_encoder --with-mlm
    # Its preprocessor (strings -> encoder inputs; the vocabulary as an asset):
    keras-tupe-export preprocessor --init runs/tupe_r_mini_enwiki \\
        --out saved_models/tupe_r_mini_preprocessor --seq-len 128
    # A fine-tuned classifier that answers raw strings (fine-tuned with --save-models):
    keras-tupe-export classifier --init runs/glue_tupe_r_mini/models/sst2_lr5e-05_seed0 \\
        --out saved_models/sst2

Each command writes OUT/<version>/ (TensorFlow Serving's layout): the next free version
unless --version is given; an existing version is never replaced without --overwrite.
Load them with keras_tupe.hub.load_encoder (Keras 3), tensorflow_hub.KerasLayer (tf-keras)
or tf.saved_model.load (after `import tensorflow_text` for the preprocessor and classifier).
"""

import argparse
import os
import sys

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_base.command_line import add_common_flags, one_line_errors
from keras_tupe_base.output_lock import output_lock
from keras_tupe_cli.common import INIT_FLAGS, at_least, entry_point

PROG = "keras-tupe-export"


def parse_args(argv=None):
    p = one_line_errors(argparse.ArgumentParser(
        prog=PROG, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter))
    commands = p.add_subparsers(dest="command", required=True)

    def command(name, help, init_help):
        sub = commands.add_parser(name, help=help)
        sub.add_argument("--init", required=name != "preprocessor", help=init_help)
        sub.add_argument("--out", required=True, help="model directory; the export goes in "
                                                      "OUT/<version>/")
        sub.add_argument("--version", type=at_least(1), help="version number (default: the next free)")
        sub.add_argument("--overwrite", action="store_true",
                         help="replace --version if it exists")
        add_common_flags(sub)
        return sub

    encoder = command("encoder", "the encoder (TF-Hub BERT encoder API)",
                      "keras-hub preset folder or pre-training run directory")
    encoder.add_argument("--with-mlm", action="store_true",
                         help="add the masked-LM head as .mlm (a pre-training run, or a preset "
                              "folder saved from a masked LM)")
    pre = command("preprocessor", "strings -> encoder inputs",
                  "preset folder or pre-training run directory (for its vocabulary)")
    pre.add_argument("--vocab", help="vocabulary file (default: the preset's or the run's)")
    pre.add_argument("--seq-len", type=at_least(1), default=128, help="packed length of the default call")
    pre.add_argument("--cased", dest="lowercase", action="store_false",
                     help="the vocabulary is cased (default: lowercased)")
    command("classifier", "a fine-tuned classifier answering raw strings",
            "a fine-tuned classifier directory (finetune_glue --save-models)")
    return p.parse_args(argv)


def _encoder_model(init, with_mlm):
    import keras_hub

    from keras_tupe.finetuning import load_backbone
    from keras_tupe.models import TupeMaskedLM
    from keras_tupe.models.preset_folders import is_preset_folder, run_model

    if not with_mlm:
        return load_backbone(init)
    # A run's masked LM is its preset/ (`run_model`); a preset folder written from a masked
    # LM holds its head (task.json).
    path = run_model(init) if os.path.isdir(init) and not is_preset_folder(init) else init
    if not (is_preset_folder(path) and os.path.isfile(os.path.join(path, "task.json"))):
        raise FileNotFoundError(
            f"--with-mlm needs a masked LM: {path} is not a preset folder with task.json. Pass "
            "a pre-training run folder or a preset folder saved from a TupeMaskedLM.")
    model = keras_hub.models.MaskedLM.from_preset(path)
    if not isinstance(model, TupeMaskedLM):
        raise ValueError(f"{path} holds a {type(model).__name__}, not a TupeMaskedLM (--with-mlm).")
    return model


def export(args):
    from keras_tupe import export as exporting
    from keras_tupe.finetuning import default_vocabulary, load_classifier

    versioning = dict(version=args.version, overwrite=args.overwrite)
    if args.command == "encoder":
        return exporting.export_encoder(_encoder_model(args.init, args.with_mlm), args.out,
                                        **versioning)
    if args.command == "preprocessor":
        if not (args.vocab or args.init):
            raise ValueError("preprocessor needs --vocab or --init (a run with vocab.txt).")
        vocab = args.vocab or default_vocabulary(args.init)
        return exporting.export_preprocessor(vocab, args.out, seq_length=args.seq_len,
                                             lowercase=args.lowercase, **versioning)
    classifier, vocab, info = load_classifier(args.init)
    return exporting.export_classifier(
        classifier, vocab, args.out, seq_length=info["seq_len"],
        num_segments=info["num_segments"], lowercase=info["lowercase"],
        label_names=info["label_names"] or None, **versioning)


def check_paths(args):
    """The paths given, checked before Keras and TensorFlow are imported."""
    for flag, path in (("--init", args.init), ("--vocab", getattr(args, "vocab", None))):
        if path is not None and not os.path.exists(path):
            raise FileNotFoundError(f"{flag} {path} does not exist.")
    if os.path.exists(args.out) and not os.path.isdir(args.out):
        raise NotADirectoryError(f"--out {args.out} is a file; exports go into a folder "
                                 "(OUT/<version>/).")


def check_backend(argv=None):
    """The TensorFlow backend, before TensorFlow's seconds-long import (Keras's may come)."""
    backend = os.environ.get("KERAS_BACKEND")
    if backend is None:  # keras.json decides, read as Keras reads it
        import keras

        backend = keras.backend.backend()
    if backend != "tensorflow":
        command = " ".join([PROG, *(sys.argv[1:] if argv is None else argv)])
        raise ValueError(
            f"export writes TensorFlow SavedModels and needs the TensorFlow backend, not "
            f"{backend}. Run it with KERAS_BACKEND=tensorflow: KERAS_BACKEND=tensorflow "
            f"{command} (a model trained under {backend} exports unchanged).")


@entry_point({"export_dir": "--out", "version": "--version", "overwrite": "--overwrite",
              **INIT_FLAGS})
def main(argv=None):
    args = parse_args(argv)
    check_paths(args)
    # Held before Keras is imported (`check_backend` may): a second export to --out is
    # refused at once.
    with output_lock(args.out, command=f"export {args.command}"):
        check_backend(argv)
        from keras_tupe_base.progress import Heartbeat

        print(f"Exporting the {args.command} to {args.out}/<version> ...", flush=True)
        with Heartbeat(f"  exporting the {args.command}"):  # loading, tracing, saving: silent
            path = export(args)
    print(f"Saved the {args.command} to {path}.\nNext: {next_step(args.command, path)}",
          flush=True)
    return 0


def next_step(command, path):
    """What to do with an export of `command` at `path`, as a line to copy."""
    from keras_tupe.pretraining import console_command

    if command == "classifier":
        return (f"{console_command('keras-tupe-predict')} {os.path.dirname(path)} "
                '"a gripping film"')
    if command == "encoder":
        return (f"fine-tune or embed with it: keras_tupe.hub.load_encoder({path!r}) "
                "(a Keras layer: token ids in, vectors out)")
    return (f"tokenize with it: keras_tupe.hub.load_saved_model({path!r})"
            '(tf.constant(["a sentence"]))')


if __name__ == "__main__":
    sys.exit(main())
