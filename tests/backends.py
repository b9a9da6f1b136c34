"""Which tests `make test-jax` runs again under JAX: those marked `backends`.

A test whose result depends on the backend (the numbers of Keras ops, random initializers,
saving, a compiled training step) is marked `backends` and runs in `make test` under
TensorFlow and again in `make test-jax` under JAX. One that does not (a refused argument,
a config's fields, pure data code) runs once. Over the variants, the backend changes the ops
and not the formula, so JAX runs one variant per attention path (`ATTENTION_PATHS`) where
TensorFlow runs every one.
"""

import pytest

backends = pytest.mark.backends

# One variant per attention path: dot-product logits with TUPE's untied correlation, T5
# bias and [CLS] reset (tupe_r), BERT-A^d's projections, rotary, DeBERTa's disentangled
# attention, Huang's query-key-relative product (huang_m4).
ATTENTION_PATHS = ("tupe_r", "bert_a_d", "rope", "deberta", "huang_m4")


def on_every_backend(values, representative=ATTENTION_PATHS):
    """`values` as pytest params, those in `representative` (else the first) marked `backends`."""
    values = list(values)
    chosen = [value for value in values if value in representative] or values[:1]
    return [pytest.param(value, marks=backends if value in chosen else ()) for value in values]
