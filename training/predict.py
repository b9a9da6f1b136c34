"""Ask a classifier SavedModel for predictions, in a process that never imports keras_tupe.

    python -m training.predict saved_models/demo_sst2/1 "a gripping film" "dull , dull , dull"
    python -m training.predict saved_models/mrpc/1 --pairs "first a" "second a" ...

Only TensorFlow and tensorflow-text (whose WordPiece ops the SavedModel uses) are
imported: this is what a serving client of an exported model needs.
"""

import argparse
import os
import sys


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m training.predict", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("saved_model", help="a classifier version directory, e.g. saved_models/x/1")
    p.add_argument("texts", nargs="+", help="sentences (with --pairs: first1 second1 first2 ...)")
    p.add_argument("--pairs", action="store_true", help="texts alternate sentence1, sentence2")
    args = p.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the WordPiece ops before loading)

    serving = tf.saved_model.load(args.saved_model).signatures["serving_default"]
    names = sorted(serving.structured_input_signature[1])
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
