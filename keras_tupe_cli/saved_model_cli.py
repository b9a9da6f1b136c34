"""`keras-tupe-saved-model-cli`: TensorFlow's `saved_model_cli` with the WordPiece ops loaded.

Started through `keras_tupe_cli` so TensorFlow's start-up lines are quiet
(`keras_tupe_base.command_line.quiet_start`), and without importing a keras_tupe model (a
serving client needs only TensorFlow and tensorflow-text):

    .venv/bin/keras-tupe-saved-model-cli run --dir saved_models/sst2/1 --tag_set serve \\
        --signature_def serving_default --input_exprs 'sentence=["a fine film"]'
"""

import sys
import warnings

# TensorFlow is imported inside main, so importing this module stays light (keras_tupe_cli).


def main():
    import tensorflow as tf
    import tensorflow_text  # noqa: F401  (registers the ops before any graph is loaded)
    from tensorflow.python.tools import saved_model_cli

    # `run` goes through TF1 session code that logs and warns about its own deprecation,
    # and the tool's `main` sets TensorFlow's log level to INFO first: it keeps ERROR here
    # (this process is only the tool), `--tf-logs` gives the tool's own INFO back.
    from tensorflow.python.platform import tf_logging

    level = tf_logging.INFO if "--tf-logs" in sys.argv else tf_logging.ERROR
    if "--tf-logs" in sys.argv:
        sys.argv.remove("--tf-logs")
    set_verbosity = tf_logging.set_verbosity
    tf_logging.set_verbosity = lambda _: set_verbosity(level)
    tf.get_logger().setLevel(level)
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    sys.argv[0] = "saved_model_cli"
    return saved_model_cli.main()


if __name__ == "__main__":
    sys.exit(main())
