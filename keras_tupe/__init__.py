"""keras_tupe: TUPE and relative position encodings for Keras 3 encoders.

`import keras_tupe` imports the model family, which registers its classes with Keras and
keras-hub, so `keras_hub.models.Backbone.from_preset(folder)` finds them. A process that runs
one of keras_tupe's commands (`keras_tupe_cli`) imports the family where it is first used
instead: the command reads its flags and starts TensorFlow quietly before Keras (and with it
TensorFlow) is imported, so a usage error takes a fraction of a second.
"""

import importlib
import os
import sys

__version__ = "0.1.0"

__all__ = [
    "PRESETS",
    "TupeBackbone",
    "TupeBpeTokenizer",
    "TupeMaskedLM",
    "TupeMaskedLMPreprocessor",
    "TupeSpanQA",
    "TupeSpanQAPreprocessor",
    "TupeTextClassifier",
    "TupeTextClassifierPreprocessor",
    "TupeTokenizer",
    "__version__",
    "convert",
    "layers",
    "models",
    "optimization",
]
_SUBMODULES = ("convert", "layers", "models", "optimization")


def __getattr__(name):
    """A name of `__all__`, imported on first use (PEP 562)."""
    if name in _SUBMODULES:
        return importlib.import_module(f"keras_tupe.{name}")
    if name not in __all__:
        raise AttributeError(f"module 'keras_tupe' has no attribute {name!r}")
    value = getattr(importlib.import_module("keras_tupe.models"), name)
    globals()[name] = value
    return value


def __dir__():
    return sorted({*globals(), *__all__})


def _runs_a_command():
    """Whether this process runs a command: a `keras-tupe-<name>` console script, `python -m
    keras_tupe_cli.<name>`, or the repository's `training` package (which says so before it
    imports keras_tupe: `python -m training.<name>`, the studies, the benchmarks)."""
    started_as = os.path.basename(sys.argv[0]) if getattr(sys, "argv", None) else ""
    arguments = getattr(sys, "orig_argv", [])
    # `python -m MODULE`: sys.argv[0] is "-m" while MODULE's packages are imported.
    run_module = (arguments[arguments.index("-m") + 1]
                  if started_as == "-m" and "-m" in arguments[:-1] else "")
    return (started_as.startswith("keras-tupe-") or run_module.startswith("keras_tupe_cli.")
            or getattr(sys.modules.get("training"), "RUNS_KERAS_TUPE_COMMANDS", False))


if not _runs_a_command():
    # The family, registered with Keras and keras-hub now; its names resolve on first use.
    from keras_tupe import convert, layers, models, optimization  # noqa: F401
