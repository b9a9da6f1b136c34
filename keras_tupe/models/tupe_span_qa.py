"""Extractive question answering (SQuAD): start and end logits over the tokens."""

import keras
import keras_hub
from keras import ops

from keras_tupe.models.task import ReplicaXLAStep
from keras_tupe.models.tupe_backbone import TupeBackbone


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
class TupeSpanQA(ReplicaXLAStep, keras_hub.models.Task):
    """A span-extraction head: one dense layer maps each token to a start and an end logit.

    A `keras_hub.models.Task` (so `TupeSpanQA.from_preset(folder)` loads the
    pre-trained backbone). Its inputs are packed SQuAD windows
    (`keras_tupe.data.squad`: BERT's question/context windowing with a
    document stride), not raw strings: windowing one example into several
    features and mapping spans back needs the offsets, so it stays in the data
    pipeline (`preprocessor` is `None`).

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

    backbone_cls = TupeBackbone
    preprocessor_cls = None

    def __init__(self, backbone, preprocessor=None, **kwargs):
        if preprocessor is not None:
            raise ValueError(
                "TupeSpanQA takes packed SQuAD windows (keras_tupe.data.squad), not a "
                f"preprocessor. Received: preprocessor={type(preprocessor).__name__}"
            )
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = None
        self.span_dense = keras.layers.Dense(
            2,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype="float32",
            name="span_logits",
        )
        # === Functional Model ===
        inputs = dict(backbone.input)
        logits = self.span_dense(backbone(inputs)["sequence_output"])  # (B, L, 2)
        start, end = SplitSpanLogits(name="span_split")(logits, inputs["padding_mask"])
        super().__init__(inputs=inputs, outputs={"start_positions": start, "end_positions": end},
                         **kwargs)

    def compile(self, optimizer="adam", loss="auto", **kwargs):
        if optimizer == "auto":
            optimizer = "adam"
        if loss == "auto":
            loss = {
                "start_positions": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
                "end_positions": keras.losses.SparseCategoricalCrossentropy(from_logits=True),
            }
        super().compile(optimizer=optimizer, loss=loss, **kwargs)
