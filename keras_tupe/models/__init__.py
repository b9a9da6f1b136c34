"""Encoder backbones and presets of keras_tupe."""

from keras_tupe.models.classifier import TupeClassifier
from keras_tupe.models.masked_lm import MaskedLM
from keras_tupe.models.presets import PRESETS, SIZES, VARIANTS
from keras_tupe.models.span_qa import TupeSpanQA
from keras_tupe.models.task import Task
from keras_tupe.models.tupe_backbone import TupeBackbone

__all__ = [
    "MaskedLM",
    "PRESETS",
    "SIZES",
    "Task",
    "TupeBackbone",
    "TupeClassifier",
    "TupeSpanQA",
    "VARIANTS",
]
