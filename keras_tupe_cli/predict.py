"""Ask a classifier SavedModel for predictions, in a process that imports no keras_tupe model.

    keras-tupe-predict saved_models/demo_tupe_r_tiny_sst2 "a gripping film" "dull , dull"
    keras-tupe-predict saved_models/mrpc/1 --pairs "first a" "second a" ...
    keras-tupe-predict saved_models/sst2 --file reviews.txt --json > answers.jsonl
    cat reviews.txt | keras-tupe-predict saved_models/sst2 --file - --batch-size 256

Sentences come from the arguments and from `--file` (one a line; `-` is standard input),
are answered in batches of `--batch-size`, and each answer is printed (one line, or with
`--json` one JSON object) as soon as its batch is done: memory stays that of one batch,
however many sentences there are.

The model is a classifier export (`keras-tupe-export classifier`, or the one `make demo`
writes): a version folder (`.../1`), or its model folder, whose newest version is taken; a
newer version without its saved_model.pb or variables/variables.index (a copy cut short) is
skipped with a note naming it, and one TensorFlow cannot read is refused as corrupt.

Only TensorFlow and tensorflow-text (whose WordPiece ops the SavedModel uses) are
imported, and no module of keras_tupe (`import keras_tupe` imports Keras and the model
family): this is what a serving client of an exported model needs. The command is
`keras_tupe_cli`, which imports keras_tupe only inside the other commands' functions.
"""

import contextlib
import itertools
import json
import os
import sys

# TensorFlow is imported inside the functions, after the flags parse; keras_tupe never.
from keras_tupe_cli.common import at_least, command_parser, entry_point

DEFAULT_BATCH_SIZE = 64

# What to pass instead, by the kind of export (assets.extra/keras_tupe.json's "kind").
_NOT_A_CLASSIFIER = {
    "encoder": "an encoder export (TF-Hub BERT encoder API: token ids in, vectors out), not "
               "a classifier; load it with keras_tupe.hub.load_encoder, or fine-tune it and "
               "pass the classifier export (keras-tupe-export classifier)",
    "preprocessor": "a preprocessor export (strings in, token ids out), not a classifier; "
                    "pass a classifier export (keras-tupe-export classifier)",
}


# A SavedModel's graph and its variables' index: `tf.saved_model.save` writes both, even for
# a model without variables, so a version lacking one is a copy or an upload cut short.
SAVED_MODEL_FILES = ("saved_model.pb", os.path.join("variables", "variables.index"))


def missing_files(folder):
    """The files of `SAVED_MODEL_FILES` that the version folder `folder` lacks."""
    return [name for name in SAVED_MODEL_FILES if not os.path.isfile(os.path.join(folder, name))]


def version_folders(model_dir):
    """`(complete, incomplete)`: the numbered version folders of `model_dir`, newest first."""
    numbers = sorted((int(name) for name in os.listdir(model_dir)
                      if name.isdigit() and os.path.isdir(os.path.join(model_dir, name))),
                     reverse=True)
    complete = [n for n in numbers if not missing_files(os.path.join(model_dir, str(n)))]
    return complete, [n for n in numbers if n not in complete]


def resolve_saved_model(path):
    """The SavedModel version folder to load: `path`, or its model folder's newest complete
    version (newer incomplete ones are skipped, and the note names them).

    Returns `(folder, note)`: `note` says which version was taken, or is None.
    Raises FileNotFoundError / ValueError with what to pass instead.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist. Pass a classifier export: a model folder such as "
            "saved_models/demo_tupe_r_tiny_sst2, or one of its version folders (.../1).")
    note = None
    if os.path.isfile(os.path.join(path, "saved_model.pb")):
        if missing_files(path):
            raise ValueError(
                f"{path} is an incomplete SavedModel: it has no {missing_files(path)[0]} (an "
                f"export or copy cut short). Export it again{_or_older_version(path)}.")
    else:
        complete, incomplete = version_folders(path)
        if not complete:
            found = (f"only incomplete version folders ({', '.join(map(str, incomplete))}: "
                     f"each lacks {' or '.join(SAVED_MODEL_FILES)})" if incomplete else
                     "no saved_model.pb and no numbered version folder holding one")
            raise ValueError(
                f"{path} is not a SavedModel: it has {found}. Pass a classifier export "
                "(keras-tupe-export classifier --out DIR writes DIR/<version>/).")
        model_dir, newest = path, complete[0]
        path = os.path.join(model_dir, str(newest))
        note = f"(using the newest version of {len(complete)}: {path})"
        skipped = [f"{n} (no {missing_files(os.path.join(model_dir, str(n)))[0]})"
                   for n in incomplete if n > newest]
        if skipped:
            note = (f"(skipping the incomplete version{'s' if len(skipped) > 1 else ''} "
                    f"{', '.join(skipped)}; using version {newest}: {path})")
    info_file = os.path.join(path, "assets.extra", "keras_tupe.json")
    if os.path.isfile(info_file):
        with open(info_file) as f:
            kind = json.load(f).get("kind")
        if kind in _NOT_A_CLASSIFIER:
            raise ValueError(f"{path} is {_NOT_A_CLASSIFIER[kind]}.")
    return path, note


def load_saved_model(path):
    """`tf.saved_model.load(path)` with the tensorflow-text ops registered; a SavedModel
    TensorFlow cannot read (a variables file cut short or damaged) is one ValueError
    naming it as corrupt and an older version to pass instead, where there is one."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the WordPiece ops before loading)

    try:
        return tf.saved_model.load(path)
    except (IndexError, OSError, tf.errors.OpError) as error:
        # A truncated variables file is an IndexError, a damaged one an OpError, a damaged
        # graph an OSError without errno; an OSError with one is the system's (a permission).
        if isinstance(error, OSError) and error.errno is not None:
            raise
        reason = (str(error).strip().splitlines() or [type(error).__name__])[0].rstrip(".")
        raise ValueError(f"{path} is corrupt: TensorFlow cannot read it ({reason}). Export it "
                         f"again{_or_older_version(path)}.") from None


def _or_older_version(path):
    """`", or pass <model folder>/<n>"`: the newest complete version older than the version
    folder `path`; `""` where there is none."""
    model_dir, version = os.path.split(os.path.normpath(path))
    older = [n for n in version_folders(model_dir)[0] if version.isdigit() and n < int(version)]
    return f", or pass {os.path.join(model_dir, str(older[0]))}" if older else ""


def parse_args(argv=None):
    p = command_parser("keras-tupe-predict", __doc__)
    p.add_argument("saved_model", help="a classifier export: its model folder (the newest "
                                       "version is taken) or a version folder, e.g. .../1")
    p.add_argument("texts", nargs="*", help="sentences (with --pairs: first1 second1 first2 ...)")
    p.add_argument("--file", help="read sentences from this UTF-8 file too, one a line (with "
                                  "--pairs: first<TAB>second); - reads standard input")
    p.add_argument("--pairs", action="store_true", help="texts alternate sentence1, sentence2")
    p.add_argument("--batch-size", type=at_least(1), default=DEFAULT_BATCH_SIZE,
                   help=f"sentences per call of the model (default: {DEFAULT_BATCH_SIZE}); "
                        "memory grows with it, not with the number of sentences")
    p.add_argument("--json", action="store_true",
                   help="one JSON object a line (the inputs and every output) instead of text")
    args = p.parse_args(argv)
    if args.batch_size < 1:
        p.error(f"argument --batch-size: must be >= 1 (received {args.batch_size})")
    if not args.texts and args.file is None:
        p.error("give sentences as arguments, or --file FILE (- for standard input)")
    if args.pairs and len(args.texts) % 2:
        p.error(f"--pairs needs an even number of texts (first1 second1 ...); received "
                f"{len(args.texts)}")
    return args


def examples(args):
    """The inputs, one at a time: the arguments, then the lines of `--file` as read.

    Yields a string, or with `--pairs` a (first, second) tuple. A file is read a line at a
    time (standard input too), so any number of sentences takes the memory of one batch.
    """
    if args.pairs:
        yield from zip(args.texts[0::2], args.texts[1::2])
    else:
        yield from args.texts
    if args.file is None:
        return
    if args.file == "-":  # not ours to close
        name, opened = "standard input", contextlib.nullcontext(sys.stdin.buffer)
    else:
        name, opened = args.file, open(args.file, "rb")
    with opened as stream:
        for number, raw in enumerate(stream, 1):
            try:
                line = raw.decode("utf-8").rstrip("\r\n")
            except UnicodeDecodeError as error:
                raise ValueError(
                    f"--file {name}: line {number} is not UTF-8 text (byte 0x"
                    f"{raw[error.start]:02x} at column {error.start + 1}). Convert it first, "
                    f"e.g. `iconv -f latin1 -t utf-8`.") from None
            if not args.pairs:
                yield line
                continue
            parts = line.split("\t")
            if len(parts) != 2:
                raise ValueError(
                    f"--file {name}: line {number} has {len(parts) - 1} tabs; with --pairs each "
                    "line is first sentence<TAB>second sentence.")
            yield tuple(parts)


def batches(items, size):
    """Lists of at most `size` consecutive items of the iterable `items`."""
    items = iter(items)
    return iter(lambda: list(itertools.islice(items, size)), [])


@entry_point()
def main(argv=None):
    args = parse_args(argv)
    if args.file not in (None, "-") and not os.path.isfile(args.file):
        raise FileNotFoundError(f"--file {args.file} does not exist (or is not a file).")
    path, note = resolve_saved_model(args.saved_model)
    if note:
        print(note, file=sys.stderr if args.json else sys.stdout)
    import tensorflow as tf

    serving = load_saved_model(path).signatures["serving_default"]
    names = sorted(serving.structured_input_signature[1])
    if not set(names) <= {"sentence", "sentence1", "sentence2"}:
        raise ValueError(f"{path} takes {names}, not sentences: it is not a classifier export. "
                         "Pass a classifier export (keras-tupe-export classifier).")
    if args.pairs != (names == ["sentence1", "sentence2"]):
        raise ValueError(f"this model takes {names}; {'drop' if args.pairs else 'add'} --pairs.")
    count = 0
    for batch in batches(examples(args), args.batch_size):
        if args.pairs:
            inputs = {"sentence1": tf.constant([a for a, _ in batch]),
                      "sentence2": tf.constant([b for _, b in batch])}
        else:
            inputs = {"sentence": tf.constant(batch)}
        outputs = {key: value.numpy() for key, value in serving(**inputs).items()}
        for index, example in enumerate(batch):
            print(_result_line(example, outputs, index, args.json), flush=index == len(batch) - 1)
        count += len(batch)
    if not args.json:
        imported = sorted(m for m in sys.modules
                          if m == "keras_tupe" or m.startswith("keras_tupe."))
        print(f"({count} sentence{'s' if count != 1 else ''} in batches of {args.batch_size}; "
              f"this process imported TensorFlow and tensorflow-text only; the command aside, "
              f"keras_tupe modules loaded: {imported or 'none'})")
    return 0


def _result_line(example, outputs, index, as_json):
    """One example's answer: `label (probabilities ...)  text`, or a JSON object."""
    if as_json:
        record = ({"sentence1": example[0], "sentence2": example[1]}
                  if isinstance(example, tuple) else {"sentence": example})
        for key, value in sorted(outputs.items()):
            value = value[index]
            record[key] = (value.decode() if isinstance(value, bytes)
                           else value.tolist() if hasattr(value, "tolist") else value)
        return json.dumps(record, ensure_ascii=False)
    shown = (f"{example[0]!r} / {example[1]!r}" if isinstance(example, tuple)
             else repr(example))
    if "score" in outputs:
        answer = f"score {outputs['score'][index]:.3f}"
    else:
        probabilities = " ".join(f"{p:.3f}" for p in outputs["probabilities"][index])
        label = (outputs["label"][index].decode() if "label" in outputs
                 else str(outputs["class_id"][index]))
        answer = f"{label:<10} (probabilities {probabilities})"
    return f"{answer}  {shown[:80]}"


if __name__ == "__main__":
    sys.exit(main())
