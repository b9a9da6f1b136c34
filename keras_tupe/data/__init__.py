"""Data: corpora, WordPiece vocabularies, the masked-LM pipeline; GLUE and SQuAD
in `keras_tupe.data.glue` and `keras_tupe.data.squad`."""

from keras_tupe.data import pretraining as _pipeline
from keras_tupe.data.pretraining import *  # noqa: F401,F403  (the names of __all__)

__all__ = list(_pipeline.__all__)
