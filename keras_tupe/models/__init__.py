"""Encoder backbones and presets of keras_tupe."""

from keras_tupe.models.presets import PRESETS, SIZES, VARIANTS
from keras_tupe.models.tupe_backbone import TupeBackbone

__all__ = ["PRESETS", "SIZES", "TupeBackbone", "VARIANTS"]
