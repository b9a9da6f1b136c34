"""TensorFlow is optional, the `tensorflow` extra: the one error where a route needs it.

The model family, pre-training from token-id shards and GLUE/SQuAD fine-tuning through Grain
run without it; tf.data, tensorflow-text, tensorflow-datasets, TensorBoard and SavedModel
export need it, imported where used. `require_tensorflow` (at a package's door) and
`keras_tupe_base.command_line.run` turn its absence into `tensorflow_missing`'s message.
"""

import importlib
import json
import os

TENSORFLOW_EXTRA = 'pip install "keras-tupe[tensorflow]"'
# The modules the extra installs: an ImportError naming one of them is the extra's.
TENSORFLOW_MODULES = ("tensorflow", "tensorflow_text", "tensorflow_datasets", "tensorboard")


def tensorflow_missing(error, purpose=None):
    """The message for `error` if it is a missing module of the extra, else None.

    Args:
        error: an `ImportError`.
        purpose: str or None, what needed it ("SavedModel export"). Defaults to "this".
    """
    if not isinstance(error, ImportError):
        return None
    module = (error.name or "").partition(".")[0]
    if module not in TENSORFLOW_MODULES:
        return None
    if TENSORFLOW_EXTRA in str(error):  # require_tensorflow's, said once
        return str(error)
    return (f"{purpose or 'This'} needs TensorFlow ({module} does not import here: {error}). "
            f"Install keras-tupe's TensorFlow extra: {TENSORFLOW_EXTRA}. Without TensorFlow, "
            "pre-train from token-id shards and fine-tune through the grain loader.")


def require_tensorflow(purpose, module="tensorflow"):
    """Imports and returns `module` (of the extra), or raises one ImportError naming the extra.

    Args:
        purpose: str, what needs it, for the message ("SavedModel export").
        module: str, the module to import. Defaults to "tensorflow".
    """
    try:
        return importlib.import_module(module)
    except ImportError as error:
        message = tensorflow_missing(error, purpose)
        if message is None:  # the module is there but one of its own imports failed
            raise
        raise ImportError(message, name=error.name) from error


def keras_backend():
    """The backend Keras will run on, found as Keras finds it, without importing Keras
    (`keras.config.backend()` imports it and its backend: seconds, and a command answers
    before that): `KERAS_BACKEND` where set and not empty, else `"backend"` of `keras.json`
    in `KERAS_HOME` (else `~/.keras`, or `/tmp/.keras` where the home folder is not
    writable), else `"tensorflow"`."""
    if os.environ.get("KERAS_BACKEND"):
        return os.environ["KERAS_BACKEND"]
    home = os.environ.get("KERAS_HOME") or os.path.join(
        os.path.expanduser("~") if os.access(os.path.expanduser("~"), os.W_OK) else "/tmp",
        ".keras")
    try:
        with open(os.path.join(os.path.expanduser(home), "keras.json")) as file:
            config = json.load(file)
    except (OSError, ValueError):
        config = {}
    return config.get("backend", "tensorflow") if isinstance(config, dict) else "tensorflow"
