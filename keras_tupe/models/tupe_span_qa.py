"""Extractive question answering (SQuAD): start and end logits over the tokens."""

import keras
import keras_hub
from keras import ops

from keras_tupe.models.task import TupeTask
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_span_qa_preprocessor import TupeSpanQAPreprocessor


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
class TupeSpanQA(TupeTask, keras_hub.models.Task):
    """A span-extraction head: one dense layer maps each token to a start and an end logit.

    A `keras_hub.models.Task`: `TupeSpanQA.from_preset(folder)` loads the
    pre-trained backbone and a `TupeSpanQAPreprocessor` on the folder's
    tokenizer. `answer(questions, contexts)` takes raw strings and returns the
    answer strings (BERT's windowing and best-span rule). Training and `predict`
    take packed SQuAD windows (`preprocessor.featurize(...)` or
    `keras_tupe.models.span_windows.featurize`): one question may span several windows,
    which keras-hub's per-example pipeline cannot express.

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
    preprocessor_cls = TupeSpanQAPreprocessor

    def __init__(self, backbone, preprocessor=None, **kwargs):
        if preprocessor is not None and not isinstance(preprocessor, TupeSpanQAPreprocessor):
            raise ValueError(
                "TupeSpanQA takes a TupeSpanQAPreprocessor (SQuAD windowing) or None. "
                f"Received: preprocessor={type(preprocessor).__name__}"
            )
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        # The span loss never reaches the pooler: frozen, as in `TupeMaskedLM`.
        backbone.pooled_dense.trainable = False
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
            loss = {name: keras.losses.SparseCategoricalCrossentropy(from_logits=True)
                    for name in ("start_positions", "end_positions")}
        super().compile(optimizer=optimizer, loss=loss, **kwargs)

    def answer(self, questions, contexts, batch_size=32):
        """The answer to each question in its context, as a string (raw text in and out).

        Args:
            questions: a list of strings.
            contexts: a list of strings, one per question.
            batch_size: int. Windows per forward pass. Defaults to `32`.
        """
        if self.preprocessor is None:
            raise ValueError("answer() needs the task's TupeSpanQAPreprocessor; build the task "
                             "with one or load it with TupeSpanQA.from_preset(folder).")
        self.preprocessor.articles(questions, contexts)  # clear errors for bad input
        questions, contexts = list(questions), list(contexts)
        features = self.preprocessor.featurize(questions, contexts)
        self.backbone.check_sequence_length(features.token_ids.shape[1])
        logits = self.predict(features.inputs, batch_size=batch_size, verbose=0)
        return self.preprocessor.postprocess(features, logits["start_positions"],
                                             logits["end_positions"], contexts, questions)
