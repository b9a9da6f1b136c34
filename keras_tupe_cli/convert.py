"""Convert a released checkpoint of the papers into a keras_tupe preset folder.

    keras-tupe-convert huggingface HF_FOLDER --out PRESET_DIR
    keras-tupe-convert fairseq CHECKPOINT.pt --out PRESET_DIR [--dictionary dict.txt] [--bpe-codes CODES]

`huggingface`: a Hugging Face BERT folder (`config.json`, `model.safetensors` or
`pytorch_model.bin`, `vocab.txt`); `position_embedding_type` absolute -> bert_a,
relative_key -> shaw, relative_key_query -> huang_m4. `fairseq`: a checkpoint of the
TUPE authors' fairseq fork (TUPE-R or TUPE-A; `dict.txt` beside it unless
--dictionary). The folder loads with `keras_hub.models.Backbone.from_preset`,
`MaskedLM.from_preset` and `TextClassifier.from_preset(..., num_classes=N)` after
`import keras_tupe`. Neither kind needs PyTorch, transformers or fairseq.
"""

import os

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_base.output_lock import output_lock
from keras_tupe_cli.common import command_parser, entry_point

KINDS = ("huggingface", "fairseq")
# The library's arguments, as this command's flags (messages speak the command line).
FLAGS = {"dictionary": "--dictionary", "bpe_codes": "--bpe-codes", "out": "--out",
         "source": "SOURCE"}


def parse_args(argv=None):
    parser = command_parser("keras-tupe-convert", __doc__)
    parser.add_argument("kind", choices=KINDS, help="the checkpoint's origin")
    parser.add_argument("source", help="the Hugging Face folder, or the fairseq checkpoint file")
    parser.add_argument("--out", required=True,
                        help="the preset folder to write (must not exist, or be empty)")
    parser.add_argument("--dictionary",
                        help="fairseq: the checkpoint's dict.txt (default: beside the checkpoint)")
    parser.add_argument("--bpe-codes",
                        help="fairseq: the BPE codes the authors' text went through; the preset "
                             "then has the tokenizer and preprocessor (raw strings in)")
    args = parser.parse_args(argv)
    if args.kind == "huggingface" and (args.dictionary or args.bpe_codes):
        parser.error("--dictionary and --bpe-codes are for fairseq checkpoints; a Hugging "
                     "Face folder brings its vocab.txt")
    return args


def check_paths(args):
    """The checks of the paths given that need no TensorFlow: before its seconds-long import."""
    for flag, path in (("SOURCE", args.source), ("--dictionary", args.dictionary),
                       ("--bpe-codes", args.bpe_codes)):
        if path is not None and not os.path.exists(path):
            raise FileNotFoundError(f"{flag} {path} does not exist.")
    if os.path.exists(args.out) and (not os.path.isdir(args.out) or os.listdir(args.out)):
        raise FileExistsError(
            f"--out {args.out} already exists and is not an empty folder; a converter never "
            "overwrites a preset or any other file. Choose a new --out folder.")


@entry_point(FLAGS)
def main(argv=None):
    args = parse_args(argv)  # usage errors return before TensorFlow is imported
    check_paths(args)
    kwargs = {}
    if args.kind == "fairseq":
        kwargs = {"dictionary": args.dictionary, "bpe_codes": args.bpe_codes}
    # Held before Keras is imported: a second conversion to --out is refused at once.
    with output_lock(args.out, command=f"convert {args.kind} {args.source}"):
        from keras_tupe.convert import convert

        out = convert(args.kind, args.source, args.out, **kwargs)
    print(f"Wrote the keras_tupe preset {out} (keras_hub.models.Backbone.from_preset({out!r}))")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
