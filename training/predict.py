"""Ask a classifier SavedModel for predictions, in a process that never imports keras_tupe.

    python -m training.predict saved_models/demo_tupe_r_tiny_sst2 "a gripping film" "dull , dull"
    python -m training.predict saved_models/mrpc/1 --pairs "first a" "second a" ...

The model is a classifier export (`training.export classifier`, or the one `make demo`
writes): a version folder (`.../1`), or its model folder, whose newest version is taken.

Only TensorFlow and tensorflow-text (whose WordPiece ops the SavedModel uses) are
imported: this is what a serving client of an exported model needs.
"""

import argparse
import json
import os
import sys

from training.cli import add_common_flags, run

# What to pass instead, by the kind of export (assets.extra/keras_tupe.json's "kind").
_NOT_A_CLASSIFIER = {
    "encoder": "an encoder export (TF-Hub BERT encoder API: token ids in, vectors out), not "
               "a classifier; load it with keras_tupe.hub.load_encoder, or fine-tune it and "
               "pass the classifier export (python -m training.export classifier)",
    "preprocessor": "a preprocessor export (strings in, token ids out), not a classifier; "
                    "pass a classifier export (python -m training.export classifier)",
}


def resolve_saved_model(path):
    """The SavedModel version folder to load: `path`, or its model folder's newest version.

    Returns `(folder, note)`: `note` says which version was taken, or is None.
    Raises FileNotFoundError / ValueError with what to pass instead.
    """
    if not os.path.exists(path):
        raise FileNotFoundError(
            f"{path} does not exist. Pass a classifier export: a model folder such as "
            "saved_models/demo_tupe_r_tiny_sst2, or one of its version folders (.../1).")
    note = None
    if not os.path.isfile(os.path.join(path, "saved_model.pb")):
        versions = sorted(int(name) for name in os.listdir(path) if name.isdigit()
                          and os.path.isfile(os.path.join(path, name, "saved_model.pb")))
        if not versions:
            raise ValueError(
                f"{path} is not a SavedModel: it has no saved_model.pb and no numbered version "
                "folder holding one. Pass a classifier export (python -m training.export "
                "classifier --out DIR writes DIR/<version>/).")
        path = os.path.join(path, str(versions[-1]))
        note = f"(using the newest version of {len(versions)}: {path})"
    info_file = os.path.join(path, "assets.extra", "keras_tupe.json")
    if os.path.isfile(info_file):
        with open(info_file) as f:
            kind = json.load(f).get("kind")
        if kind in _NOT_A_CLASSIFIER:
            raise ValueError(f"{path} is {_NOT_A_CLASSIFIER[kind]}.")
    return path, note


def main(argv=None):
    return run(_main, argv)


def _main(argv=None):
    p = argparse.ArgumentParser(prog="python -m training.predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("saved_model", help="a classifier export: its model folder (the newest "
                                       "version is taken) or a version folder, e.g. .../1")
    p.add_argument("texts", nargs="+", help="sentences (with --pairs: first1 second1 first2 ...)")
    p.add_argument("--pairs", action="store_true", help="texts alternate sentence1, sentence2")
    add_common_flags(p)
    args = p.parse_args(argv)
    path, note = resolve_saved_model(args.saved_model)
    if note:
        print(note)
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the WordPiece ops before loading)

    serving = tf.saved_model.load(path).signatures["serving_default"]
    names = sorted(serving.structured_input_signature[1])
    if not set(names) <= {"sentence", "sentence1", "sentence2"}:
        raise ValueError(f"{path} takes {names}, not sentences: it is not a classifier export. "
                         "Pass a classifier export (python -m training.export classifier).")
    if args.pairs != (names == ["sentence1", "sentence2"]):
        print(f"error: this model takes {names}; "
              f"{'drop' if args.pairs else 'add'} --pairs.", file=sys.stderr)
        return 2
    if args.pairs:
        if len(args.texts) % 2:
            print("error: --pairs needs an even number of texts.", file=sys.stderr)
            return 2
        inputs = {"sentence1": tf.constant(args.texts[0::2]),
                  "sentence2": tf.constant(args.texts[1::2])}
        shown = [f"{a!r} / {b!r}" for a, b in zip(args.texts[0::2], args.texts[1::2])]
    else:
        inputs = {"sentence": tf.constant(args.texts)}
        shown = [repr(text) for text in args.texts]
    outputs = {key: value.numpy() for key, value in serving(**inputs).items()}
    for index, text in enumerate(shown):
        if "score" in outputs:
            answer = f"score {outputs['score'][index]:.3f}"
        else:
            probabilities = " ".join(f"{p:.3f}" for p in outputs["probabilities"][index])
            label = (outputs["label"][index].decode() if "label" in outputs
                     else str(outputs["class_id"][index]))
            answer = f"{label:<10} (probabilities {probabilities})"
        print(f"{answer}  {text[:80]}")
    imported = sorted(m for m in sys.modules if m.split(".")[0] == "keras_tupe")
    print(f"(this process imported TensorFlow and tensorflow-text only; keras_tupe modules "
          f"loaded: {imported or 'none'})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
