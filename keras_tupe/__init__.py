"""keras_tupe: TUPE and relative position encodings for Keras 3 encoders.

`import keras_tupe` imports the model family, which registers its classes with Keras and
keras-hub, so `keras_hub.models.Backbone.from_preset(folder)` finds them: in every process,
as `import keras_hub` does. The commands live beside it, in `keras_tupe_cli`, and import it
after they have read their flags.
"""

# First: modules of the family read it while this package is still importing them.
__version__ = "0.1.0"

from keras_tupe_base import extras  # noqa: E402  (the standard library only)

try:
    import keras  # noqa: F401
except ImportError as error:  # Keras's TensorFlow backend (its default) without TensorFlow
    message = extras.tensorflow_missing(error, "Keras's TensorFlow backend (KERAS_BACKEND)")
    if message is None:
        raise
    raise ImportError(f"{message} Or run with KERAS_BACKEND=jax.", name=error.name) from error

from keras_tupe import convert, layers, models, optimization  # noqa: E402
from keras_tupe.models import (  # noqa: E402
    TupeBackbone, TupeBpeTokenizer, TupeMaskedLM, TupeMaskedLMPreprocessor, TupeSpanQA,
    TupeSpanQAPreprocessor, TupeTextClassifier, TupeTextClassifierPreprocessor, TupeTokenizer)

__all__ = [
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
