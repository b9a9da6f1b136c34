"""Sentence (pair) classification and regression on the pooled [CLS] output."""

import keras
import keras_hub

from keras_tupe.models.string_inputs import check_text_batch
from keras_tupe.models.task import TupeTask
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_text_classifier_preprocessor import TupeTextClassifierPreprocessor


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeTextClassifier(TupeTask, keras_hub.models.TextClassifier):
    """A GLUE-style head: dropout and a dense layer on the backbone's `pooled_output`.

    A `keras_hub.models.TextClassifier`: with its preprocessor it takes raw
    strings (`fit(("a fine film", 1))`, `predict(["a fine film"])`; a tuple of
    two string batches for sentence pairs), and
    `keras_hub.models.TextClassifier.from_preset(folder, num_classes=2)`
    returns one with the folder's pre-trained backbone and tokenizer.
    `num_classes=1` makes it a regressor (STS-B), trained with the mean squared
    error; otherwise it outputs class logits trained with cross-entropy. The
    logits are float32 under every dtype policy, so serving outputs stay
    float32 under mixed precision.

    Args:
        backbone: a `TupeBackbone`.
        num_classes: int. `1` for regression.
        preprocessor: a `TupeTextClassifierPreprocessor`, or `None` to feed
            `token_ids`, `padding_mask`, `segment_ids` directly.
        dropout: float. Dropout before the head. Defaults to `0.1`.

    Example:
    >>> classifier = keras_hub.models.TextClassifier.from_preset(
    ...     "runs/tupe_r_mini/preset", num_classes=2, sequence_length=128)
    >>> classifier.fit(x=["a fine film", "a dull film"], y=[1, 0], batch_size=2)
    >>> classifier.predict(["a fine film"])
    """

    backbone_cls = TupeBackbone
    preprocessor_cls = TupeTextClassifierPreprocessor

    def __init__(self, backbone, num_classes=None, preprocessor=None, dropout=0.1, **kwargs):
        if isinstance(num_classes, bool) or not isinstance(num_classes, int) or num_classes < 1:
            raise ValueError(
                "`num_classes` must be a positive int: the number of labels, or 1 for a "
                f"regression (STS-B). Received: num_classes={num_classes!r}"
            )
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
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
        # === Config ===
        # Set before `super().__init__`, which compiles with the defaults below.
        self.num_classes = num_classes
        self.dropout = dropout
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.fit_preprocessor()

    def compile(self, optimizer="auto", loss="auto", *, metrics="auto", **kwargs):
        regression = self.num_classes == 1
        if loss == "auto":
            loss = (keras.losses.MeanSquaredError() if regression
                    else keras.losses.SparseCategoricalCrossentropy(from_logits=True))
        if metrics == "auto":
            metrics = [] if regression else [keras.metrics.SparseCategoricalAccuracy("accuracy")]
        super().compile(optimizer=optimizer, loss=loss, metrics=metrics, **kwargs)

    def predict(self, x, *args, **kwargs):
        """keras-hub's `predict`; with a preprocessor, `x` must be strings (said plainly)."""
        if self.preprocessor is not None:
            check_text_batch(f"{type(self).__name__}.predict", x)
        return super().predict(x, *args, **kwargs)

    def get_config(self):
        return {**super().get_config(), "num_classes": self.num_classes, "dropout": self.dropout}
