"""keras_tupe: TUPE and relative position encodings for Keras 3 encoders."""

from keras_tupe import convert, layers, models, optimization
from keras_tupe.models import (
    PRESETS,
    TupeBackbone,
    TupeBpeTokenizer,
    TupeMaskedLM,
    TupeMaskedLMPreprocessor,
    TupeSpanQA,
    TupeSpanQAPreprocessor,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)

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
