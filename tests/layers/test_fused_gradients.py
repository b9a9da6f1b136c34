"""Under JAX, the fused attention's gradients equal the einsum path's: for every weight,
the positional terms' included (TUPE's untied correlation, the T5 bias, ALiBi's slopes act
through the queries and keys), with a padding mask, which the fused path folds into a
per-example bias. Stage S0 runs this file on the lent GPU (where the fused path may take
cuDNN's kernel); `make test-jax` runs it on the CPU.
"""

import keras
import numpy as np
import pytest

from keras_tupe import TupeBackbone
from tests.reference_params import randomize_weights

pytestmark = pytest.mark.jax
B, N = 3, 16
MASK = np.array([[1] * N, [1] * 11 + [0] * 5, [1] * 4 + [0] * 12], "int32")


def _gradients(backbone, inputs, cotangent):
    import jax

    def loss(trainable, non_trainable):
        outputs, _ = backbone.stateless_call(trainable, non_trainable, inputs)
        return (outputs["sequence_output"] * cotangent).sum()

    return jax.grad(loss)([v.value for v in backbone.trainable_variables],
                          [v.value for v in backbone.non_trainable_variables])


@pytest.mark.skipif(keras.backend.backend() != "jax", reason="the JAX backend's gradients")
@pytest.mark.parametrize("variant", ["tupe_r", "tupe_a", "bert_r", "alibi", "bert_a"])
def test_fused_gradients_equal_the_einsum_ones(variant):
    fused = TupeBackbone.from_preset(f"{variant}_tiny", attention_implementation="fused",
                                     dropout=0.0)
    randomize_weights(fused, seed=7)
    einsum = TupeBackbone.from_preset(f"{variant}_tiny", attention_implementation="einsum",
                                      dropout=0.0)
    einsum.set_weights(fused.get_weights())
    rng = np.random.default_rng(3)
    inputs = {"token_ids": rng.integers(0, fused.vocabulary_size, (B, N)).astype("int32"),
              "padding_mask": MASK,
              "segment_ids": rng.integers(0, 2, (B, N)).astype("int32")}
    cotangent = rng.normal(size=(B, N, fused.hidden_dim)).astype("float32")
    got = _gradients(fused, inputs, cotangent)
    want = _gradients(einsum, inputs, cotangent)
    names = [v.path for v in fused.trainable_variables]
    positional = [n for n in names if any(k in n for k in ("position", "relative", "untied"))]
    assert positional or variant == "alibi", names  # the positional terms are among them
    got = [np.asarray(a, "float64") for a in got]
    want = [np.asarray(b, "float64") for b in want]
    # Some gradients are zero in exact arithmetic (a key bias and the [CLS] row's constant
    # move every logit of a softmax row alike) and hold only float32 rounding (~1e-6): the
    # tolerance is set by the largest gradient of the model, not by each variable's own.
    atol = 2e-5 * max(np.abs(b).max() for b in want)
    for name, a, b in zip(names, got, want):
        if name in positional:  # far above the tolerance, so compared in earnest
            assert np.abs(b).max() > 100 * atol, name
        np.testing.assert_allclose(a, b, rtol=2e-4, atol=atol, err_msg=name)
