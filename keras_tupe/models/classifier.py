"""Sentence (pair) classification and regression on the pooled [CLS] output."""

import keras

from keras_tupe.models.task import Task


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeClassifier(Task):
    """A GLUE-style head: dropout and a dense layer on the backbone's `pooled_output`.

    `num_classes=1` makes it a regressor (STS-B), trained with the mean squared
    error; otherwise it outputs class logits trained with cross-entropy. The
    logits are float32 under every dtype policy, so serving outputs stay
    float32 under mixed precision.

    Args:
        backbone: a `TupeBackbone` (or any functional model with the TF-Hub
            BERT inputs and a `pooled_output`).
        num_classes: int. `1` for regression.
        dropout: float. Dropout before the head. Defaults to `0.1`.

    Example:
    >>> classifier = TupeClassifier(TupeBackbone.from_preset("tupe_r_tiny"), num_classes=2)
    >>> classifier.compile(optimizer="adam")
    """

    def __init__(self, backbone, num_classes, dropout=0.1, **kwargs):
        if not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(f"`num_classes` must be a positive int. Received: {num_classes!r}")
        # === Layers ===
        self.backbone = backbone
        self.head_dropout = keras.layers.Dropout(dropout, name="head_dropout")
        self.logits_dense = keras.layers.Dense(
            num_classes,
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            dtype="float32",
            name="logits",
        )
        # === Functional Model ===
        inputs = dict(backbone.input)
        pooled = backbone(inputs)["pooled_output"]
        logits = self.logits_dense(self.head_dropout(pooled))
        if num_classes == 1:
            logits = keras.layers.Reshape((), name="score")(logits)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        # === Config ===
        self.num_classes = num_classes
        self.dropout = dropout

    def compile(self, optimizer="adam", loss="auto", metrics="auto", **kwargs):
        regression = self.num_classes == 1
        if loss == "auto":
            loss = (keras.losses.MeanSquaredError() if regression
                    else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if metrics == "auto":
            metrics = [] if regression else [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "dropout": self.dropout}
