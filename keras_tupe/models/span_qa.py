"""Extractive question answering (SQuAD): start and end logits over the tokens."""

import keras
from keras import ops

from keras_tupe.models.task import Task


@keras.saving.register_keras_serializable(package="keras_tupe")
class SplitSpanLogits(keras.layers.Layer):
    """`(B, L, 2)` logits and the padding mask → float32 start and end logits, padding at -1e9."""

    def call(self, logits, mask):
        bias = (1.0 - ops.cast(mask, "float32")) * -1e9
        logits = ops.cast(logits, "float32")
        return logits[..., 0] + bias, logits[..., 1] + bias

    def compute_output_spec(self, logits, mask):
        spec = keras.KerasTensor(logits.shape[:-1], "float32")
        return spec, keras.KerasTensor(spec.shape, "float32")


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeSpanQA(Task):
    """A span-extraction head: one dense layer maps each token to a start and an end logit.

    Outputs a dict of float32 `start_positions` and `end_positions` logits,
    `(batch, seq)`, with padded tokens at -1e9, so that targets named the same
    (token indices, 0 = [CLS] for "no answer in this window") train it with
    sparse cross-entropy, as BERT's SQuAD fine-tuning does.

    Args:
        backbone: a `TupeBackbone`.

    Example:
    >>> qa = TupeSpanQA(TupeBackbone.from_preset("huang_m4_tiny"))
    >>> qa.compile(optimizer="adam")
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.span_dense = keras.layers.Dense(
            2,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype="float32",
            name="span_logits",
        )
        # === Functional Model ===
        inputs = dict(backbone.input)
        logits = self.span_dense(backbone(inputs)["sequence_output"])  # (B, L, 2)
        start, end = SplitSpanLogits(name="span_split")(logits, inputs["input_mask"])
        super().__init__(inputs=inputs, outputs={"start_positions": start, "end_positions": end},
                         **kwargs)

    def compile(self, optimizer="adam", loss="auto", **kwargs):
        if loss == "auto":
            loss = {
                "start_positions": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                "end_positions": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            }
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
