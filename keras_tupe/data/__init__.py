"""Pre-training data: corpora, WordPiece vocabularies and the masked-LM pipeline."""

from keras_tupe.data.pretraining import (
    SPECIAL_TOKENS,
    line_dataset,
    load_tokenizer,
    mask_selection_length,
    mlm_dataset,
    packed_sequences,
    train_vocabulary,
    vocabulary_fingerprint,
)

__all__ = [
    "SPECIAL_TOKENS",
    "line_dataset",
    "load_tokenizer",
    "mask_selection_length",
    "mlm_dataset",
    "packed_sequences",
    "train_vocabulary",
    "vocabulary_fingerprint",
]
