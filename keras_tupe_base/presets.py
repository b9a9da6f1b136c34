"""Named presets: every positional-encoding variant of the papers at four sizes.

A preset is plain data, the constructor arguments of `TupeBackbone`. The
positional encoding is a set of orthogonal fields, so a variant is a dict here,
not a class.
"""

import difflib

# What the TUPE authors' fork (github.com/guolinke/TUPE) does beyond the paper's TUPE.
_FAIRSEQ_FORK = dict(
    cls_reset=True,
    cls_reset_style="fairseq",
    num_segments=0,
    mask_padding_embeddings=True,
    layer_norm_epsilon=1e-5,
)

# Positional-encoding variants (TUPE Table 2; Huang et al. Table 1/2).
VARIANTS = {
    # BERT: absolute positions added to the words.
    "bert_a": dict(absolute_position="added"),
    # BERT + the T5 relative bias shared by all layers.
    "bert_r": dict(absolute_position="added", relative_position="t5_bias"),
    # Ablation: untied projections for positions, the four correlations kept.
    "bert_a_d": dict(absolute_position="none", absolute_correlation="untied_cross"),
    # TUPE-A: untied absolute correlation + [CLS] reset.
    "tupe_a": dict(absolute_position="none", absolute_correlation="untied", cls_reset=True),
    # Ablation: TUPE-A without the [CLS] reset.
    "tupe_a_tie_cls": dict(absolute_position="none", absolute_correlation="untied"),
    # TUPE-R: untied absolute + T5 relative bias + [CLS] reset.
    "tupe_r": dict(absolute_position="none", absolute_correlation="untied",
                   relative_position="t5_bias", cls_reset=True),
    # TUPE-A and TUPE-R as the authors' code computes them (github.com/guolinke/TUPE,
    # a fairseq fork): [CLS] reset from reserved table rows / buckets, no segment
    # embedding, embeddings zeroed at padding, LayerNorm epsilon 1e-5.
    # `keras_tupe.convert.convert_fairseq` writes the authors' checkpoints as these.
    "tupe_a_fairseq": dict(absolute_position="none", absolute_correlation="untied",
                           **_FAIRSEQ_FORK),
    "tupe_r_fairseq": dict(absolute_position="none", absolute_correlation="untied",
                           relative_position="t5_bias", **_FAIRSEQ_FORK),
    # Relative position embeddings only (Shaw et al.; Huang et al. methods 1-4).
    "shaw": dict(absolute_position="none", relative_position="shaw"),
    "huang_m1": dict(absolute_position="none", relative_position="method1"),
    "huang_m2": dict(absolute_position="none", relative_position="method2"),
    "huang_m3": dict(absolute_position="none", relative_position="method3"),
    "huang_m4": dict(absolute_position="none", relative_position="method4"),
    # Beyond the two papers (issue 37), each without absolute positions.
    # RoFormer (Su et al.): queries and keys rotated by position.
    "rope": dict(absolute_position="none", relative_position="rotary"),
    # ALiBi (Press et al.), bidirectional: a fixed slope per head times -|i - j|.
    "alibi": dict(absolute_position="none", relative_position="alibi"),
    # DeBERTa (He et al.): disentangled c2p / p2c attention, log buckets, one
    # relative table (bucket_size = max_sequence_length // 2) for all layers.
    "deberta": dict(absolute_position="none", relative_position="disentangled"),
}

# (vocabulary_size, num_layers, num_heads, hidden_dim, intermediate_dim, max_sequence_length)
SIZES = {
    name: dict(zip(("vocabulary_size", "num_layers", "num_heads", "hidden_dim",
                    "intermediate_dim", "max_sequence_length"), values))
    for name, values in {
        "tiny": (1024, 2, 4, 64, 128, 128),  # For tests: a few milliseconds a step.
        "mini": (30522, 4, 4, 256, 1024, 512),  # BERT-Mini (Turc et al. 2019): CPU experiments.
        "small": (30522, 4, 8, 512, 2048, 512),  # BERT-Small (Turc et al. 2019).
        "base": (30522, 12, 12, 768, 3072, 512),  # BERT-Base, the papers' size.
    }.items()
}

PRESETS = {
    f"{variant}_{size}": {**size_config, **variant_config}
    for variant, variant_config in VARIANTS.items()
    for size, size_config in SIZES.items()
}


def unknown_preset(name):
    """What to say of a preset name that is not one: the nearest names, then how names are
    made (all 64 in one line would hide the answer)."""
    close = difflib.get_close_matches(str(name), PRESETS, n=3, cutoff=0.5)
    nearest = f" The nearest: {', '.join(close)}." if close else ""
    return (f"Unknown preset {name}.{nearest} A preset is a variant and a size, "
            f"VARIANT_SIZE: variants {', '.join(VARIANTS)}; sizes {', '.join(SIZES)} "
            "(`keras-tupe-presets` describes each).")


def preset_description(name):
    """One line describing a built-in preset, e.g. for `TupeBackbone.presets`."""
    variant, size = name.rsplit("_", 1)
    config = PRESETS[name]
    return (
        f"{variant} ({', '.join(f'{k}={v!r}' for k, v in VARIANTS[variant].items())}) at size "
        f"{size}: {config['num_layers']} layers, hidden {config['hidden_dim']}, "
        f"{config['num_heads']} heads. Architecture only: no published weights."
    )


def absolute_length_limit(
    absolute_position="added", absolute_correlation="none", max_sequence_length=512, **_
):
    """The longest input of an encoder config (or preset), or `None` for any length.

    An absolute table (positions added at the input, or the untied correlation)
    bounds the length; relative terms do not. Defaults are the constructor's.
    """
    if absolute_position == "added" or absolute_correlation != "none":
        return max_sequence_length
    return None
