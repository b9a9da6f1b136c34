"""The table of positional schemes: one row per `relative_position` / `absolute_correlation`.

A row says everything `TupeBackbone` and `TransformerEncoderBlock` need to know about one
value: the attention layer of every block and which block settings it takes, the term the
backbone computes once per forward pass and hands to every block, whether the logits can run
through the fused `keras.ops.dot_product_attention`, what the value composes with, whether
its shared term is position-only (what `cls_reset` resets and `positional_bias` returns) and
the backbone arguments that are its own knobs, with their defaults. The backbone and the
block validate and build by looking rows up; neither names a scheme, and both take the same
`relative_position` value: `BackbonePositions` takes the backbone's positional arguments,
checks them against the table and says what they build.

A new encoding is one layer file and one row: the rotary scheme, for instance, is
`rotary_positional_attention.py` plus the `"rotary"` row of `RELATIVE_POSITION_SCHEMES`.
The table lives in `layers/`, not `models/`: the block reads its attention class from the
row, and layers never import from models.
"""

import dataclasses
from typing import Callable, Optional

import keras
from keras_hub.layers import PositionEmbedding

from keras_tupe.layers.bidirectional_alibi_bias import BidirectionalAlibiBias
from keras_tupe.layers.cls_reset import CLS_RESET_STYLES, ClsReset
from keras_tupe.layers.disentangled_attention import DisentangledAttention, check_bucket_size
from keras_tupe.layers.disentangled_relative_embedding import DisentangledRelativeEmbedding
from keras_tupe.layers.qkr_multiplicative_attention import METHODS, QKRMultiplicativeAttention
from keras_tupe.layers.relative_bucket_bias import RelativeBucketBias
from keras_tupe.layers.rotary_positional_attention import (
    RotaryPositionalAttention,
    check_rotary_head_dim,
)
from keras_tupe.layers.untied_positional_attention import (
    UntiedPositionalAttention,
    check_attention_implementation,
)
from keras_tupe.layers.untied_positional_correlation import UntiedPositionalCorrelation
from keras_tupe.layers.utils import clone_initializer
from keras_tupe_base.checks import check_choice

# `absolute_position`: positions added to the token embeddings, or none.
ABSOLUTE_POSITIONS = ("none", "added")
# What the backbone computes once per pass and gives every block (its call arguments).
SHARED_INPUTS = ("attention_bias", "position_query", "position_key", "relative_embeddings")


@dataclasses.dataclass(frozen=True)
class SharedTerm:
    """A layer the backbone builds once and calls once per pass; every block gets its output.

    Attributes:
        layer: the layer class.
        name: its layer name, the path of its weights.
        attribute: the `TupeBackbone` attribute that holds it (`None` when unused).
        arguments: its constructor arguments, each mapped to the backbone value it takes
            (`num_heads`, `max_sequence_length`, `layer_norm_epsilon`, `num_buckets`,
            `max_distance`, `max_relative_distance`, `fairseq_reset`, `initializer`).
        fixed: constructor arguments the row sets.
        outputs: the block call arguments (`SHARED_INPUTS`) its outputs go to; terms
            given as `attention_bias` are summed.
    """

    layer: type
    name: str
    attribute: str
    arguments: dict
    fixed: dict = dataclasses.field(default_factory=dict)
    outputs: tuple = ("attention_bias",)

    def build(self, values, dtype):
        """The layer, from the backbone's `values`; each initializer a fresh clone."""
        arguments = {}
        for argument, key in self.arguments.items():
            value = values[key]
            if isinstance(value, keras.initializers.Initializer):
                # One unseeded initializer shared by two weights fills both alike.
                value = clone_initializer(value)
            arguments[argument] = value
        return self.layer(**self.fixed, **arguments, dtype=dtype, name=self.name)


@dataclasses.dataclass(frozen=True)
class PositionalScheme:
    """One value of `relative_position` or `absolute_correlation`.

    Attributes:
        description: what it is, in a few words (for messages and docs).
        knobs: the backbone arguments of this scheme alone, each with its default: a
            value, or a function of `max_sequence_length`. An argument left `None` gets it.
        former_knobs: `{knob: argument}`: configs written before the knob was an
            argument of its own held it in that argument (`with_own_knobs`).
        attention: relative rows: the attention layer of every block.
        attention_arguments: its constructor arguments, each mapped to the
            `TransformerEncoderBlock` attribute it takes.
        attention_inputs: the block call arguments besides `attention_bias`
            (`SHARED_INPUTS`) the attention takes.
        shared_term: the `SharedTerm` the backbone computes once per pass, or `None`.
        fusable: the logits are a scaled dot product plus an additive bias, so
            `attention_implementation="fused"` applies.
        position_only: the shared term depends on positions only (the [CLS] reset
            and `TupeBackbone.positional_bias` need one).
        composes_with: relative rows: the `absolute_correlation` values it takes
            (`None`: all of them); `why_not` says why not the others.
        fairseq_cls_reset: relative rows: the TUPE authors' [CLS] reset
            (`cls_reset_style="fairseq"`) is defined with it.
        untied_scaling: correlation rows: content logits scaled by `1/sqrt(2 d_h)`.
        beyond_papers: relative rows: a scheme from neither TUPE nor Huang et al.
            (issue 37: ALiBi, rotary, DeBERTa).
        check: further checks of the backbone values (keyword arguments), raising a
            one-line `ValueError`.
    """

    description: str
    knobs: dict = dataclasses.field(default_factory=dict)
    former_knobs: dict = dataclasses.field(default_factory=dict)
    attention: Optional[type] = None
    attention_arguments: dict = dataclasses.field(default_factory=dict)
    attention_inputs: tuple = ()
    shared_term: Optional[SharedTerm] = None
    fusable: bool = True
    position_only: bool = False
    composes_with: Optional[tuple] = None
    why_not: str = ""
    fairseq_cls_reset: bool = False
    untied_scaling: bool = False
    beyond_papers: bool = False
    check: Optional[Callable] = None

    @property
    def needed_inputs(self):
        """The block inputs its attention cannot do without: its own shared term's."""
        if self.shared_term is None:
            return ()
        return tuple(name for name in self.shared_term.outputs if name in self.attention_inputs)


def _same(*names):
    return {name: name for name in names}


def _dot_product_attention(attention, inputs=("position_query", "position_key")):
    """The row fields of an attention whose logits are a scaled dot product plus a bias."""
    return dict(
        attention=attention,
        attention_arguments=_same("untied_scaling", "attention_implementation"),
        attention_inputs=inputs,
    )


def _check_rotary(hidden_dim, num_heads, **_):
    check_rotary_head_dim(hidden_dim // num_heads, hidden_dim, num_heads)


def _check_disentangled(bucket_size, max_sequence_length, **_):
    check_bucket_size(bucket_size, max_sequence_length, "max_sequence_length")


def _untied_correlation(output_mode, **row):
    return SharedTerm(
        UntiedPositionalCorrelation,
        "untied_positional_correlation",
        "untied_correlation",
        {**_same("num_heads", "max_sequence_length", "layer_norm_epsilon"), **row},
        fixed={"output_mode": output_mode},
        outputs=("attention_bias",) if output_mode == "correlation" else (
            "position_query", "position_key"
        ),
    )


ABSOLUTE_CORRELATION_SCHEMES = {
    "none": PositionalScheme("no absolute correlation"),
    "untied": PositionalScheme(
        "TUPE's untied positional correlation (TUPE Eq. 7)",
        shared_term=_untied_correlation("correlation", reserved_cls_rows="fairseq_reset"),
        position_only=True,
        untied_scaling=True,
    ),
    "untied_cross": PositionalScheme(
        "BERT-A^d's position projections added to the queries and keys",
        shared_term=_untied_correlation("projections"),
        fusable=False,
        untied_scaling=True,
    ),
}

_QKR_ROW = dict(
    # No clipping unless asked for.
    knobs={
        "max_relative_distance": lambda max_sequence_length: max_sequence_length,
        "zero_init_relative_tables": False,
    },
    attention=QKRMultiplicativeAttention,
    attention_arguments={
        "method": "relative_position", **_same("max_relative_distance", "zero_init_tables")
    },
    fusable=False,
    composes_with=("none",),
    why_not="the untied correlation and the Shaw / Huang relative embeddings are not combined "
    "by either paper; choose one",
)

RELATIVE_POSITION_SCHEMES = {
    "none": PositionalScheme(
        "no relative term", **_dot_product_attention(UntiedPositionalAttention),
        fairseq_cls_reset=True,
    ),
    "t5_bias": PositionalScheme(
        "T5's bucketed relative bias (BERT-R, TUPE-R; TUPE Eq. 8)",
        knobs={"num_buckets": 32, "max_distance": 128},
        **_dot_product_attention(UntiedPositionalAttention),
        shared_term=SharedTerm(
            RelativeBucketBias,
            "relative_bucket_bias",
            "relative_bias",
            {
                **_same("num_heads", "num_buckets", "max_distance"),
                "reserved_cls_buckets": "fairseq_reset",
            },
        ),
        position_only=True,
        fairseq_cls_reset=True,
    ),
    **{
        method: PositionalScheme(
            "Shaw et al.'s relative embeddings" if method == "shaw"
            else f"Huang et al.'s relative embeddings, {method}",
            **_QKR_ROW,
        )
        for method in METHODS
    },
    "alibi": PositionalScheme(
        "ALiBi's fixed linear bias, both directions (Press et al.)",
        **_dot_product_attention(UntiedPositionalAttention),
        shared_term=SharedTerm(
            BidirectionalAlibiBias, "alibi_bias", "alibi_bias", _same("num_heads")
        ),
        position_only=True,
        beyond_papers=True,
    ),
    "rotary": PositionalScheme(
        "rotary position embeddings of the queries and keys (RoFormer)",
        **_dot_product_attention(RotaryPositionalAttention, inputs=()),
        # The rotated content term plus an additive untied correlation is well
        # defined; positions added to q/k before or after the rotation is not.
        composes_with=("none", "untied"),
        why_not="BERT-A^d adds position projections to the rotated queries and keys, and "
        "neither paper says whether before or after the rotation",
        beyond_papers=True,
        check=_check_rotary,
    ),
    "disentangled": PositionalScheme(
        "DeBERTa's disentangled attention",
        # DeBERTa's 256 for 512 positions.
        knobs={"bucket_size": lambda max_sequence_length: max_sequence_length // 2},
        # Before issue 66 DeBERTa's bucket size borrowed the Shaw / Huang clipping distance.
        former_knobs={"bucket_size": "max_relative_distance"},
        attention=DisentangledAttention,
        attention_arguments={**_same("bucket_size"), "max_position": "max_sequence_length"},
        attention_inputs=("relative_embeddings",),
        shared_term=SharedTerm(
            DisentangledRelativeEmbedding,
            "disentangled_relative_embedding",
            "disentangled_embedding",
            {
                "embeddings_initializer": "initializer",
                **_same("bucket_size", "layer_norm_epsilon"),
            },
            outputs=("relative_embeddings",),
        ),
        fusable=False,
        composes_with=("none",),
        why_not="DeBERTa's logits have position terms of their own and the scale "
        "1/sqrt(3 d_h), which leave no place for TUPE's 1/sqrt(2 d_h) terms",
        beyond_papers=True,
        check=_check_disentangled,
    ),
}

SCHEMES = {
    "absolute_correlation": ABSOLUTE_CORRELATION_SCHEMES,
    "relative_position": RELATIVE_POSITION_SCHEMES,
}
ABSOLUTE_CORRELATIONS = tuple(ABSOLUTE_CORRELATION_SCHEMES)
RELATIVE_POSITIONS = tuple(RELATIVE_POSITION_SCHEMES)


# Every shared term, once per backbone attribute.
SHARED_TERMS = tuple(
    {
        scheme.shared_term.attribute: scheme.shared_term
        for table in SCHEMES.values()
        for scheme in table.values()
        if scheme.shared_term is not None
    }.values()
)


def build_shared_terms(schemes, values, dtype):
    """`{attribute: layer}` for every `SHARED_TERMS` attribute: the layers of the `schemes`'
    shared terms, built from the backbone's `values`, and `None` for the others."""
    layers = dict.fromkeys(term.attribute for term in SHARED_TERMS)
    for scheme in schemes:
        if scheme.shared_term is not None:
            layers[scheme.shared_term.attribute] = scheme.shared_term.build(values, dtype)
    return layers


def knob_defaults():
    """`{argument: default}` of every row's knobs (read at each call, as the choices are)."""
    return {
        name: default
        for table in SCHEMES.values()
        for scheme in table.values()
        for name, default in scheme.knobs.items()
    }


def resolve_knobs(knobs, max_sequence_length):
    """`knobs` (`{argument: value}`) with each `None` replaced by its row's default."""
    defaults = knob_defaults()
    resolved = {}
    for name, value in knobs.items():
        if value is None:
            value = defaults[name]
            if callable(value):
                value = value(max_sequence_length)
        resolved[name] = value
    return resolved


def with_own_knobs(config):
    """A backbone `config` with each knob of its rows that an older version held in
    another argument (`PositionalScheme.former_knobs`) under its own name."""
    moved = {}
    for field, table in SCHEMES.items():
        scheme = table.get(config.get(field, "none"))
        for knob, former in (scheme.former_knobs.items() if scheme else ()):
            if knob not in config and former in config:
                moved[knob] = config[former]
    return {**config, **moved}


def _values_with(field, keep):
    """`field='a'` or `field in ('a', 'b')`: the values of a table whose row `keep`s."""
    names = tuple(name for name, scheme in SCHEMES[field].items() if keep(scheme))
    return f"{field}={names[0]!r}" if len(names) == 1 else f"{field} in {names}"


def position_only_choices():
    """The values that give a position-only term, as a message names them."""
    return " or ".join(_values_with(field, lambda s: s.position_only) for field in SCHEMES)


def check_content_free(absolute_correlation, relative_position):
    """Refuses a combination with no content-free term to return; returns the two rows.

    It needs a position-only term and no shared term that mixes the positions
    with the content (BERT-A^d's projections, DeBERTa's table).
    """
    schemes = (
        ABSOLUTE_CORRELATION_SCHEMES[absolute_correlation],
        RELATIVE_POSITION_SCHEMES[relative_position],
    )
    if not any(s.position_only for s in schemes) or any(_mixes(s) for s in schemes):
        mixing = " or ".join(_values_with(field, _mixes) for field in SCHEMES)
        raise ValueError(
            "This encoder has no content-free positional term: it needs "
            f"{position_only_choices()}, and not {mixing}, whose positions mix with the "
            f"content. Received: absolute_correlation={absolute_correlation!r}, "
            f"relative_position={relative_position!r}"
        )
    return schemes


def _mixes(scheme):
    return scheme.shared_term is not None and not scheme.position_only


def check_fused(attention_implementation, schemes, received):
    """Refuses `attention_implementation="fused"` unless every row in `schemes` is fusable."""
    if attention_implementation == "fused" and not all(s.fusable for s in schemes):
        fusable = " and ".join(_values_with(field, lambda s: s.fusable) for field in SCHEMES)
        raise ValueError(
            "attention_implementation='fused' applies to logits that are a scaled dot "
            f"product plus an additive positional bias: {fusable}; use 'auto' or 'einsum' "
            f"with the others. Received: {received}"
        )


def check_schemes(
    absolute_correlation,
    relative_position,
    attention_implementation="auto",
    cls_reset=False,
    cls_reset_style="paper",
    **values,
):
    """Refuses a combination the table does not allow, one line naming the valid choices.

    `values` are the backbone's sizes (`hidden_dim`, `num_heads`,
    `max_sequence_length`, `max_relative_distance`, ...) for the rows' own
    checks. Returns the two rows, `(correlation, relative)`.
    """
    if cls_reset_style != "paper" and not cls_reset:
        raise ValueError(
            "`cls_reset_style` chooses how the [CLS] reset is done; "
            f"cls_reset_style={cls_reset_style!r} needs cls_reset=True. Received: "
            f"cls_reset={cls_reset!r}"
        )
    correlation = ABSOLUTE_CORRELATION_SCHEMES[absolute_correlation]
    relative = RELATIVE_POSITION_SCHEMES[relative_position]
    received = (
        f"absolute_correlation={absolute_correlation!r}, relative_position={relative_position!r}"
    )
    check_fused(attention_implementation, (correlation, relative), received)
    if cls_reset and not (correlation.position_only or relative.position_only):
        raise ValueError(
            "`cls_reset=True` resets the position-only correlation, which needs "
            f"{position_only_choices()}. Received: {received}"
        )
    valid = relative.composes_with
    if valid is not None and absolute_correlation not in valid:
        raise ValueError(
            f"relative_position={relative_position!r} does not compose with "
            f"absolute_correlation={absolute_correlation!r}: {relative.why_not}. With "
            f"relative_position={relative_position!r}, `absolute_correlation` must be one "
            f"of {valid}. Received: absolute_correlation={absolute_correlation!r}"
        )
    if cls_reset and cls_reset_style == "fairseq" and not relative.fairseq_cls_reset:
        raise ValueError(
            "cls_reset_style='fairseq' reproduces the TUPE authors' code, whose reset "
            f"lives in the untied table and the T5 buckets; it has no {relative_position!r}. "
            "`cls_reset_style` must be 'paper' here. Received: "
            f"cls_reset_style={cls_reset_style!r}, relative_position={relative_position!r}"
        )
    for scheme in (correlation, relative):
        if scheme.check is not None:
            scheme.check(**values)
    return correlation, relative



@dataclasses.dataclass(frozen=True)
class BackbonePositions:
    """A `TupeBackbone`'s positional arguments, checked against the table, and what they build.

    `TupeBackbone` hands over its scheme-specific arguments and the sizes the rows
    need; `BackbonePositions.check` refuses what the table does not allow (one line
    naming the valid choices) and resolves the defaults. The backbone then builds
    the position table, the shared terms, the [CLS] reset and the blocks from it
    without naming a scheme.

    Attributes:
        rows: the `absolute_correlation` and `relative_position` rows.
        arguments: the backbone's scheme-specific constructor arguments (the four
            choices, `cls_reset_style`, `attention_implementation` and the rows' knobs,
            each knob resolved); the backbone stores and returns them.
        values: what the rows' shared terms and checks are built from: the sizes
            (`hidden_dim`, `num_heads`, `max_sequence_length`, `layer_norm_epsilon`),
            the knobs, `fairseq_reset` and the `initializer`.
    """

    rows: tuple
    arguments: dict
    values: dict

    @classmethod
    def check(cls, *, absolute_position, absolute_correlation, relative_position, cls_reset,
              cls_reset_style, attention_implementation, hidden_dim, num_heads,
              max_sequence_length, layer_norm_epsilon, initializer, **knobs):
        """The positions of a backbone whose arguments the table allows.

        `knobs` are the backbone's arguments that rows own (`knob_defaults`), each
        `None` for its row's default.
        """
        check_choice("absolute_position", absolute_position, ABSOLUTE_POSITIONS)
        # Read at each call: a row added to a table (a test's) is a valid choice.
        check_choice("absolute_correlation", absolute_correlation,
                     tuple(ABSOLUTE_CORRELATION_SCHEMES))
        check_choice("relative_position", relative_position, tuple(RELATIVE_POSITION_SCHEMES))
        check_attention_implementation(attention_implementation)
        check_choice("cls_reset_style", cls_reset_style, CLS_RESET_STYLES)
        knobs = resolve_knobs(knobs, max_sequence_length)
        values = dict(
            knobs, hidden_dim=hidden_dim, num_heads=num_heads,
            max_sequence_length=max_sequence_length, layer_norm_epsilon=layer_norm_epsilon,
            initializer=initializer, fairseq_reset=cls_reset and cls_reset_style == "fairseq",
        )
        rows = check_schemes(
            absolute_correlation, relative_position, attention_implementation, cls_reset,
            cls_reset_style, **values,
        )
        arguments = dict(
            knobs, absolute_position=absolute_position, absolute_correlation=absolute_correlation,
            relative_position=relative_position, cls_reset=cls_reset,
            cls_reset_style=cls_reset_style, attention_implementation=attention_implementation,
        )
        return cls(rows, arguments, values)

    @property
    def block_arguments(self):
        """The positional arguments of every `TransformerEncoderBlock`."""
        return dict(
            untied_scaling=self.rows[0].untied_scaling,
            relative_position=self.arguments["relative_position"],
            max_relative_distance=self.arguments["max_relative_distance"],
            bucket_size=self.arguments["bucket_size"],
            zero_init_tables=self.arguments["zero_init_relative_tables"],
            attention_implementation=self.arguments["attention_implementation"],
        )

    def position_embedding(self, dtype):
        """The learned absolute positions added to the token embeddings, or `None`."""
        if self.arguments["absolute_position"] == "none":
            return None
        return PositionEmbedding(
            self.values["max_sequence_length"],
            initializer=clone_initializer(self.values["initializer"]),
            dtype=dtype,
            name="position_embedding",
        )

    def shared_terms(self, dtype):
        """`{attribute: layer}` for every `SHARED_TERMS` attribute (`None`: unused)."""
        return build_shared_terms(self.rows, self.values, dtype)

    def cls_reset_layer(self, dtype):
        """The paper's [CLS] reset (`ClsReset`, learned θ), or `None`: none asked for, or
        the fairseq style, which resets inside the untied table and the T5 buckets."""
        if not self.arguments["cls_reset"] or self.values["fairseq_reset"]:
            return None
        return ClsReset(self.values["num_heads"], dtype=dtype, name="cls_reset")
