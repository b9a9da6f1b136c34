"""The masked-language-model task for pre-training any backbone preset."""

import keras
import keras_hub

from keras_tupe.models.task import Task


@keras.saving.register_keras_serializable(package="keras_tupe")
class MaskedLM(Task):
    """Masked-LM pre-training model: a backbone plus keras-hub's `MaskedLMHead`.

    The head (dense + LayerNorm + output bias) predicts the vocabulary at the
    masked positions only, with the output projection tied to the word
    embeddings (as BERT and RoBERTa). No next-sentence prediction (TUPE follows
    RoBERTa's FULL-SENTENCES).

    Inputs: the backbone's three inputs and `masked_lm_positions`, int32
    `(batch, P)`. Output: logits `(batch, P, vocabulary_size)`, float32.
    Train with targets `masked_lm_ids` `(batch, P)` and sample weights
    `masked_lm_weights` `(batch, P)` (0 for padded slots); `compile()`
    defaults to the weighted sparse cross-entropy and accuracy.

    Args:
        backbone: a `TupeBackbone`.

    Example:
    >>> mlm = MaskedLM(TupeBackbone.from_preset("tupe_r_tiny"))
    >>> mlm.compile(optimizer="adam")
    """

    def __init__(self, backbone, **kwargs):
        # === Layers ===
        self.backbone = backbone
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
        inputs = dict(backbone.input)
        inputs["masked_lm_positions"] = keras.Input(
            shape=(None,), dtype="int32", name="masked_lm_positions"
        )
        encoded = backbone({name: inputs[name] for name in backbone.input})
        logits = self.mlm_head(
            encoded["sequence_output"], mask_positions=inputs["masked_lm_positions"]
        )
        logits = keras.layers.Activation("linear", dtype="float32", name="logits")(logits)
        super().__init__(inputs=inputs, outputs=logits, **kwargs)

    def compile(self, optimizer="adam", loss="auto", weighted_metrics="auto", **kwargs):
        if loss == "auto":
            loss = keras.losses.SparseCategoricalCrossentropy(from_logits=True)
        if weighted_metrics == "auto":
            weighted_metrics = [keras.metrics.SparseCategoricalAccuracy(name="accuracy")]
        super().compile(optimizer=optimizer, loss=loss, weighted_metrics=weighted_metrics,
                        **kwargs)
