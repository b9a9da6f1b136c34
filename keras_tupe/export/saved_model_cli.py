"""TensorFlow's `saved_model_cli`, with the tensorflow-text ops registered first.

The preprocessor and classifier SavedModels tokenize with tensorflow-text's WordPiece
ops. TensorFlow Serving's model server has them built in, but TensorFlow's Python
`saved_model_cli run` cannot load a graph that uses them ("Op type not registered
'RegexSplitWithOffsets'"); `show` works as is. This entry point takes the same
arguments:

    keras-tupe-saved-model-cli run --dir saved_models/sst2/1 --tag_set serve \\
        --signature_def serving_default --input_exprs 'sentence=["a fine film"]'
    python -m keras_tupe.export.saved_model_cli show --dir saved_models/sst2/1 --all
"""

import sys


def main():
    import tensorflow_text  # noqa: F401  (registers the ops before any graph is loaded)
    from tensorflow.python.tools import saved_model_cli

    sys.argv[0] = "saved_model_cli"
    return saved_model_cli.main()


if __name__ == "__main__":
    sys.exit(main())
