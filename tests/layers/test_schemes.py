"""The table of positional schemes is the single source of what the backbone allows and builds."""

import inspect
import itertools
import json
import re
from pathlib import Path

import keras_hub
import numpy as np
import pytest

from keras_tupe.layers import TransformerEncoderBlock, schemes
from keras_tupe.layers.cls_reset import CLS_RESET_STYLES
from keras_tupe.layers.schemes import (
    ABSOLUTE_CORRELATION_SCHEMES,
    ABSOLUTE_POSITIONS,
    RELATIVE_POSITION_SCHEMES,
    PositionalScheme,
)
from keras_tupe.models import tupe_backbone
from keras_tupe.models.tupe_backbone import CONFIG_KEYS, TupeBackbone
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


def _quoted(text):
    """The `"values"` a docstring entry or a docs table cell names; `"method1"` ...
    `"method4"` is the four of them."""
    names = re.findall(r'"(\w+)"', text)
    for stem, first, last in re.findall(r'"(\w+?)(\d+)"`?\s*(?:\.\.\.|…)\s*`?"\1(\d+)"', text):
        names += [f"{stem}{i}" for i in range(int(first), int(last) + 1)]
    return set(names)


def _argument_entry(cls, name):
    """The text of `name`'s entry in the Args of `cls`'s docstring."""
    lines = inspect.cleandoc(cls.__doc__).splitlines()
    start = next(i for i, line in enumerate(lines) if line.lstrip().startswith(f"{name}:"))
    indent = len(lines[start]) - len(lines[start].lstrip())
    entry = [lines[start]]
    for line in lines[start + 1:]:
        if not line.strip() or len(line) - len(line.lstrip()) <= indent:
            break
        entry.append(line)
    return " ".join(entry)


def _position_only():
    return {name for table in schemes.SCHEMES.values()
            for name, row in table.items() if row.position_only}


# Each hand-written list of values and the table (or tuple) it must name exactly.
DOCUMENTED_VALUES = [
    (TupeBackbone, "absolute_position", lambda: set(ABSOLUTE_POSITIONS)),
    (TupeBackbone, "absolute_correlation", lambda: set(ABSOLUTE_CORRELATION_SCHEMES)),
    (TupeBackbone, "relative_position", lambda: set(RELATIVE_POSITION_SCHEMES)),
    (TupeBackbone, "cls_reset", _position_only),
    (TupeBackbone, "cls_reset_style", lambda: set(CLS_RESET_STYLES)),
    (TransformerEncoderBlock, "relative_position", lambda: set(RELATIVE_POSITION_SCHEMES)),
]


@pytest.mark.parametrize("cls, name, table", DOCUMENTED_VALUES)
def test_the_docstrings_value_lists_are_the_tables(cls, name, table):
    assert _quoted(_argument_entry(cls, name)) == table(), (cls.__name__, name)


def test_the_formulas_page_lists_the_tables():
    page = (Path(tupe_backbone.__file__).parents[2] / "docs" / "formulas.md").read_text()
    cells = dict(re.findall(r"^\| `(\w+)` \| ([^|]+) \|", page, re.M))
    assert _quoted(cells["absolute_position"]) == set(ABSOLUTE_POSITIONS)
    assert _quoted(cells["absolute_correlation"]) == set(ABSOLUTE_CORRELATION_SCHEMES)
    assert _quoted(cells["relative_position"]) == set(RELATIVE_POSITION_SCHEMES)


def test_a_value_missing_from_a_docstring_is_caught(monkeypatch):
    """The check above can fail: a row the docstring does not name."""
    monkeypatch.setitem(RELATIVE_POSITION_SCHEMES, "xpos", RELATIVE_POSITION_SCHEMES["rotary"])
    entry = _argument_entry(TupeBackbone, "relative_position")
    assert _quoted(entry) == set(RELATIVE_POSITION_SCHEMES) - {"xpos"}
    assert {"method2", "method3"} <= _quoted(entry)


def test_every_knob_is_a_backbone_argument_with_one_default():
    arguments = inspect.signature(TupeBackbone).parameters
    for name in schemes.knob_defaults():
        assert name in CONFIG_KEYS and arguments[name].default is None, name
        # Two rows that share a knob share its default.
        defaults = {repr(row.knobs[name](512) if callable(row.knobs[name]) else row.knobs[name])
                    for table in schemes.SCHEMES.values() for row in table.values()
                    if name in row.knobs}
        assert len(defaults) == 1, (name, defaults)


def test_the_bucket_size_is_deberta_s_own():
    """DeBERTa's table follows `bucket_size`, not the Shaw / Huang clipping distance."""
    config = dict(TINY, relative_position="disentangled")
    default = TupeBackbone(**config, max_relative_distance=3)
    assert default.bucket_size == 8 and default.max_relative_distance == 3
    assert tuple(default.disentangled_embedding.relative_embeddings.shape) == (16, 16)
    own = TupeBackbone(**config, bucket_size=6)
    assert own.max_relative_distance == 16
    assert tuple(own.disentangled_embedding.relative_embeddings.shape) == (12, 16)
    assert own.transformer_layers[0].attention.bucket_size == 6
    with pytest.raises(ValueError, match=r"needs `bucket_size` k.*Received: bucket_size=1, "
                                         r"max_sequence_length=16"):
        TupeBackbone(**config, bucket_size=1, max_relative_distance=4)


def test_a_deberta_folder_written_before_bucket_size_loads(tmp_path):
    """An older version wrote DeBERTa's bucket size as `max_relative_distance`."""
    backbone = TupeBackbone(**TINY, relative_position="disentangled", bucket_size=6)
    backbone.save_to_preset(str(tmp_path))
    path = tmp_path / "config.json"
    saved = json.loads(path.read_text())
    config = saved["config"]
    del config["bucket_size"]
    config["max_relative_distance"] = 6
    path.write_text(json.dumps(saved))
    revived = keras_hub.models.Backbone.from_preset(str(tmp_path))
    assert revived.bucket_size == 6
    np.testing.assert_array_equal(revived(_inputs())["sequence_output"],
                                  backbone(_inputs())["sequence_output"])
    # A config that names its bucket size keeps it.
    assert schemes.with_own_knobs(dict(config, bucket_size=4))["bucket_size"] == 4
