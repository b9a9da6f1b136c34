"""The table of positional schemes is the single source of what the backbone allows and builds."""

import itertools
import re
from pathlib import Path

import numpy as np
import pytest

from keras_tupe.layers import schemes
from keras_tupe.layers.schemes import (
    ABSOLUTE_CORRELATION_SCHEMES,
    RELATIVE_POSITION_SCHEMES,
    PositionalScheme,
)
from keras_tupe.models import tupe_backbone
from keras_tupe.models.tupe_backbone import TupeBackbone
from tests.numpy_reference import ABSOLUTE_CORRELATIONS, RELATIVE_POSITIONS, alibi_bias

TINY = dict(vocabulary_size=50, num_layers=1, num_heads=2, hidden_dim=16, intermediate_dim=32,
            max_sequence_length=16, absolute_position="none", dropout=0.0)
PAIRS = list(itertools.product(ABSOLUTE_CORRELATION_SCHEMES, RELATIVE_POSITION_SCHEMES))


def _inputs(length=6):
    return {"token_ids": np.arange(1, length + 1, dtype="int32")[None],
            "padding_mask": np.ones((1, length), "int32"),
            "segment_ids": np.zeros((1, length), "int32")}


def _composes(correlation, relative):
    valid = RELATIVE_POSITION_SCHEMES[relative].composes_with
    return valid is None or correlation in valid


def test_every_value_has_one_row():
    # The reference's own lists (written from the papers) against the table's keys.
    assert tuple(ABSOLUTE_CORRELATION_SCHEMES) == ABSOLUTE_CORRELATIONS
    assert tuple(RELATIVE_POSITION_SCHEMES) == RELATIVE_POSITIONS
    assert schemes.RELATIVE_POSITIONS == RELATIVE_POSITIONS
    assert schemes.ABSOLUTE_CORRELATIONS == ABSOLUTE_CORRELATIONS
    # The papers' relative schemes are the reference's; the column marks the others.
    beyond = {name for name, row in RELATIVE_POSITION_SCHEMES.items() if row.beyond_papers}
    assert beyond == set(RELATIVE_POSITIONS) - {"none", "t5_bias"} - set(
        schemes.METHODS) == {"alibi", "rotary", "disentangled"}
    for scheme in RELATIVE_POSITION_SCHEMES.values():
        assert scheme.attention is not None
        assert set(scheme.needed_inputs) <= set(scheme.attention_inputs)
    for scheme in ABSOLUTE_CORRELATION_SCHEMES.values():
        assert scheme.attention is None  # the relative row chooses the attention


def test_no_scheme_is_named_in_the_backbone_or_the_block():
    """Neither file compares a field with a scheme's name: they look rows up."""
    names = set(RELATIVE_POSITIONS + ABSOLUTE_CORRELATIONS) - {"none"}
    root = Path(tupe_backbone.__file__).parents[1]
    for path in ("models/tupe_backbone.py", "layers/transformer_encoder_block.py"):
        source = (root / path).read_text()
        compared = set(re.findall(r'(?:==|!=|\bin)\s*\(?"(\w+)"', source))
        assert not compared & names, (path, compared & names)


@pytest.mark.parametrize("correlation, relative", PAIRS)
def test_the_backbone_enforces_the_rows(correlation, relative):
    config = dict(TINY, absolute_correlation=correlation, relative_position=relative)
    row, relative_row = ABSOLUTE_CORRELATION_SCHEMES[correlation], RELATIVE_POSITION_SCHEMES[relative]
    if not _composes(correlation, relative):
        with pytest.raises(ValueError, match=rf"relative_position='{relative}' does not compose "
                                             rf"with absolute_correlation='{correlation}'"):
            TupeBackbone(**config)
        return
    backbone = TupeBackbone(**config)
    output = backbone(_inputs())["sequence_output"]
    assert output.shape == (1, 6, 16)
    assert type(backbone.transformer_layers[0].attention) is relative_row.attention
    used = {s.shared_term.attribute for s in (row, relative_row) if s.shared_term is not None}
    for term in schemes.SHARED_TERMS:
        layer = getattr(backbone, term.attribute)
        assert (layer is not None) == (term.attribute in used), term.attribute
    fusable = row.fusable and relative_row.fusable
    if fusable:
        TupeBackbone(**config, attention_implementation="fused")
    else:
        with pytest.raises(ValueError, match="attention_implementation='fused' applies to"):
            TupeBackbone(**config, attention_implementation="fused")
    if row.position_only or relative_row.position_only:
        TupeBackbone(**config, cls_reset=True)
    else:
        with pytest.raises(ValueError, match="cls_reset=True.*needs"):
            TupeBackbone(**config, cls_reset=True)
    mixes = any(s.shared_term is not None and not s.position_only for s in (row, relative_row))
    if (row.position_only or relative_row.position_only) and not mixes:
        assert backbone.positional_bias(5).shape == (2, 5, 5)
    else:
        with pytest.raises(ValueError, match="no content-free positional term"):
            backbone.positional_bias(5)


def test_a_new_scheme_is_one_row(monkeypatch):
    """Rotary queries and keys plus ALiBi's bias: one row, no other change."""
    rotary, alibi = RELATIVE_POSITION_SCHEMES["rotary"], RELATIVE_POSITION_SCHEMES["alibi"]
    row = PositionalScheme(
        "rotary position embeddings plus ALiBi's bias",
        attention=rotary.attention,
        attention_arguments=rotary.attention_arguments,
        shared_term=alibi.shared_term,
        position_only=True,
        composes_with=("none", "untied"),
        why_not=rotary.why_not,
        check=rotary.check,
    )
    monkeypatch.setitem(RELATIVE_POSITION_SCHEMES, "rotary_alibi", row)
    backbone = TupeBackbone(**TINY, relative_position="rotary_alibi")
    assert type(backbone.transformer_layers[0].attention) is rotary.attention
    np.testing.assert_allclose(backbone.positional_bias(5), alibi_bias(2, 5, 5), atol=1e-6)
    assert np.all(np.isfinite(backbone(_inputs())["sequence_output"]))
    revived = TupeBackbone.from_config(backbone.get_config())
    revived.set_weights(backbone.get_weights())
    np.testing.assert_array_equal(revived(_inputs())["sequence_output"],
                                  backbone(_inputs())["sequence_output"])
    with pytest.raises(ValueError, match=r"does not compose.*must be one of \('none', 'untied'\)"):
        TupeBackbone(**TINY, relative_position="rotary_alibi", absolute_correlation="untied_cross")
