"""The TF-Hub BERT names, spoken only at the export seam.

Inside keras_tupe the encoder takes keras-hub's `token_ids`, `padding_mask`,
`segment_ids`; the exported SavedModels keep TF-Hub's BERT encoder and
preprocessor API (`input_word_ids`, `input_mask`, `input_type_ids`; outputs
`sequence_output`, `pooled_output`, `default`, `encoder_outputs`), so the
serving and TF-Hub contracts are those of every TF-Hub BERT.
"""

# TF-Hub name -> keras-hub name.
TFHUB_TO_KERAS_HUB = {
    "input_word_ids": "token_ids",
    "input_mask": "padding_mask",
    "input_type_ids": "segment_ids",
}
KERAS_HUB_TO_TFHUB = {value: key for key, value in TFHUB_TO_KERAS_HUB.items()}
ENCODER_INPUTS = tuple(TFHUB_TO_KERAS_HUB)


def from_tfhub(inputs):
    """TF-Hub-named encoder inputs -> the backbone's (other keys kept)."""
    return {TFHUB_TO_KERAS_HUB.get(key, key): value for key, value in inputs.items()}


def to_tfhub(inputs):
    """The backbone's inputs (a preprocessor's packed dict) -> TF-Hub names."""
    return {KERAS_HUB_TO_TFHUB.get(key, key): value for key, value in inputs.items()}
