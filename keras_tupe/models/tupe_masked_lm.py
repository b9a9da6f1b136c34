"""The masked-language-model task for pre-training any backbone preset."""

import keras
import keras_hub

from keras_tupe.models.task import TupeTask
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_masked_lm_preprocessor import TupeMaskedLMPreprocessor


@keras.saving.register_keras_serializable(package="keras_tupe")
class TupeMaskedLM(TupeTask, keras_hub.models.MaskedLM):
    """Masked-LM pre-training model: a backbone plus keras-hub's `MaskedLMHead`.

    A `keras_hub.models.MaskedLM`. The head (dense + LayerNorm + output bias)
    predicts the vocabulary at the masked positions only, with the output
    projection tied to the word embeddings (as BERT and RoBERTa). No
    next-sentence prediction (TUPE follows RoBERTa's FULL-SENTENCES).

    Inputs: the backbone's inputs and `mask_positions`, int32 `(batch, P)`;
    without a segment embedding (`num_segments=0`: the fairseq-fork presets)
    no `segment_ids`, as keras-hub's `RobertaMaskedLM` (a batch that holds them
    is accepted, the values ignored: `TupeTask`). Output: logits
    `(batch, P, vocabulary_size)`, float32.
    Train with targets `(batch, P)` (the original ids) and sample weights
    `(batch, P)` (0 for padded slots); `compile()` defaults to the weighted
    sparse cross-entropy and accuracy. With a `TupeMaskedLMPreprocessor` it
    takes raw strings.

    Args:
        backbone: a `TupeBackbone`.
        preprocessor: a `TupeMaskedLMPreprocessor` or `None`.

    Example:
    >>> mlm = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny"))
    >>> mlm.compile(optimizer="adam")
    """

    backbone_cls = TupeBackbone
    preprocessor_cls = TupeMaskedLMPreprocessor

    def __init__(self, backbone, preprocessor=None, **kwargs):
        # === Layers ===
        self.backbone = backbone
        self.preprocessor = preprocessor
        # The masked-LM loss never reaches the pooler ([CLS] tanh dense). Frozen, it
        # is neither updated nor weight-decayed on any backend (TensorFlow skips
        # variables without a gradient, JAX would decay them with a zero gradient),
        # and Keras does not warn about its missing gradients. A backbone reloaded
        # from the preset (or its .keras file) has a trainable pooler again.
        backbone.pooled_dense.trainable = False
        self.mlm_head = keras_hub.layers.MaskedLMHead(
            token_embedding=backbone.token_embedding,
            # keras-hub's head takes Keras activation names; a converted
            # keras-hub BERT ("gelu_approximate") gets a new head anyway.
            intermediate_activation=(
                "gelu" if backbone.activation == "gelu_approximate" else backbone.activation
            ),
            kernel_initializer=keras.initializers.TruncatedNormal(stddev=0.02),
            layer_norm_epsilon=backbone.layer_norm_epsilon,
            dtype=backbone.dtype_policy,
            name="mlm_head",
        )
        # === Functional Model ===
        inputs = {name: keras.Input(shape=(None,), dtype="int32", name=name)
                  for name in self.input_names_for(backbone)}
        encoded = backbone({name: inputs[name] for name in backbone.input})
        logits = self.mlm_head(encoded["sequence_output"], mask_positions=inputs["mask_positions"])
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)
        self.fit_preprocessor()

    @staticmethod
    def input_names_for(backbone):
        """The task's inputs: the backbone's and `mask_positions`."""
        return [*backbone.input, "mask_positions"]

    def compile(self, optimizer="auto", loss="auto", *, weighted_metrics="auto", **kwargs):
        if weighted_metrics == "auto":
            weighted_metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)
