"""The TUPE authors' fairseq checkpoints (TUPE-R, TUPE-A) → a keras_tupe masked-LM preset.

The fork (github.com/guolinke/TUPE at 4c64ff7) writes `checkpoint*.pt`, a `torch.save` dict
of `args` (an `argparse.Namespace`), `model` (the state dict, float16 with `--fp16`) and
training state; `torch_files.load_torch_file` reads it without PyTorch or fairseq. The model
becomes a `TupeMaskedLM` with the fields that reproduce the fork (`tupe_*_fairseq_*` presets,
docs/converting-checkpoints.md): `cls_reset_style="fairseq"` ([CLS] terms from rows 0 and 1
of the `max_positions + 1`-row position table and, for TUPE-R, buckets 16 and 32 of the
33-row relative table), `mask_padding_embeddings=True`, `num_segments=0`,
`absolute_position="none"`, LayerNorm epsilon 1e-5; q/k/v split from the fused
`in_proj_weight` (rows `[q; k; v]`); the tied LM head as keras-hub's `MaskedLMHead`.

Token ids are the fork's dictionary's: 7 specials (`<s>`=0 plays [CLS], `<pad>`=1, `</s>`=2,
`<unk>`=3, `<file>`, `<email>`, `<url>`), the words of `dict.txt` from 7, and `<mask>` last.
The model takes `padding_mask = token_ids != 1`.
"""

import argparse
import glob
import os

import keras
import numpy as np

from keras_tupe.convert.common import (
    ConversionError,
    StateDict,
    assign_weights,
    attention_values,
    file_records,
    heads_dense,
    refuse_existing_output,
    require_file,
    write_preset,
)
from keras_tupe.convert.torch_files import TorchFileError, load_torch_file
from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_bpe_tokenizer import (
    FAIRSEQ_SPECIAL_TOKENS as SPECIAL_SYMBOLS,
    MASK_TOKEN as MASK_SYMBOL,
    TupeBpeTokenizer,
    read_fairseq_dictionary_words,
)
from keras_tupe.models.tupe_masked_lm import TupeMaskedLM
from keras_tupe.models.tupe_masked_lm_preprocessor import TupeMaskedLMPreprocessor

PAD_ID = SPECIAL_SYMBOLS.index("<pad>")
# Checkpoint names looked for, in this order, when `source` is a folder.
CHECKPOINT_NAMES = ("model.pt", "checkpoint_best.pt", "checkpoint_last.pt")
DICTIONARY_NAME = "dict.txt"
# The fork's architectures (fairseq/models/bert/model.py) and their defaults.
_BASE = dict(encoder_layers=12, encoder_embed_dim=768, encoder_ffn_embed_dim=3072,
             encoder_attention_heads=12)
ARCHITECTURES = {
    "bert": _BASE,
    "bert_base": _BASE,
    "bert_large": dict(encoder_layers=24, encoder_embed_dim=1024, encoder_ffn_embed_dim=4096,
                       encoder_attention_heads=16),
}
# `TransformerSentenceEncoder` constructor defaults, never in `args`.
REL_POS_BINS = 32
MAX_REL_POS = 128
LAYER_NORM_EPSILON = 1e-5  # torch.nn.LayerNorm / apex FusedLayerNorm
ENCODER = "decoder.sentence_encoder."
HEAD = "decoder.lm_head."


def _checkpoint_path(source):
    """The checkpoint file of `source` (a file, or a folder holding one)."""
    source = os.fspath(source)
    if os.path.isfile(source):
        return source
    if not os.path.isdir(source):
        raise ConversionError(f"{source}: no such file or folder (a fairseq checkpoint*.pt).")
    for name in CHECKPOINT_NAMES:
        if os.path.isfile(os.path.join(source, name)):
            return os.path.join(source, name)
    found = sorted(glob.glob(os.path.join(source, "checkpoint*.pt")))
    if len(found) == 1:
        return found[0]
    if found:
        raise ConversionError(
            f"{source}: several checkpoints ({[os.path.basename(f) for f in found]}) and no "
            f"{' or '.join(CHECKPOINT_NAMES)}; pass the checkpoint file itself."
        )
    return require_file(source, CHECKPOINT_NAMES, "fairseq checkpoint")  # raises


def _dictionary_path(checkpoint, dictionary):
    if dictionary is not None:
        dictionary = os.fspath(dictionary)
        if not os.path.isfile(dictionary):
            raise ConversionError(f"{dictionary}: no such dictionary file (fairseq dict.txt).")
        return dictionary
    try:
        return require_file(os.path.dirname(os.path.abspath(checkpoint)), [DICTIONARY_NAME],
                            "fairseq dictionary")
    except ConversionError as error:
        raise ConversionError(
            f"{error} The fork's dictionary (`dict.txt` of fairseq-preprocess, beside "
            "the checkpoint) decides the token ids; pass it as `dictionary=`."
        ) from None


def read_dictionary(path):
    """The words of a fairseq `dict.txt` in id order (`read_fairseq_dictionary_words`),
    or a `ConversionError` naming the line that is not a `dict.txt` line."""
    try:
        return read_fairseq_dictionary_words(path)
    except ValueError as error:
        raise ConversionError(str(error)) from None


def _load_checkpoint(path):
    try:
        checkpoint = load_torch_file(path)
    except TorchFileError as error:
        raise ConversionError(f"{path}: not a fairseq checkpoint ({error}).") from None
    except Exception as error:  # a damaged zip or pickle
        raise ConversionError(
            f"{path}: not a readable fairseq checkpoint ({type(error).__name__}: {error})."
        ) from None
    if not isinstance(checkpoint, dict) or not isinstance(checkpoint.get("model"), dict):
        raise ConversionError(
            f"{path}: not a fairseq checkpoint (a torch.save dict with `args` and `model`)."
        )
    if not isinstance(checkpoint.get("args"), argparse.Namespace):
        hint = " (it has `cfg`: a fairseq >= 0.10 checkpoint, not the TUPE fork's)" if (
            "cfg" in checkpoint) else ""
        raise ConversionError(
            f"{path}: the checkpoint has no `args` (argparse.Namespace){hint}; the model's "
            "sizes and options are read from it."
        )
    return checkpoint


def _fork_args(args, path):
    """The model options of `args`, with the fork's defaults; refuses what keras_tupe lacks."""
    arch = getattr(args, "arch", None)
    if arch not in ARCHITECTURES:
        raise ConversionError(
            f"{path}: arch={arch!r} is not one of the TUPE fork's BERT architectures "
            f"{sorted(ARCHITECTURES)}; only those are converted."
        )
    used = {key: getattr(args, key, default) for key, default in ARCHITECTURES[arch].items()}
    max_positions = getattr(args, "max_positions", None)
    if max_positions is None:
        max_positions = getattr(args, "tokens_per_sample", None)
    if max_positions is None:
        raise ConversionError(f"{path}: args has neither max_positions nor tokens_per_sample.")
    used.update(
        arch=arch,
        max_positions=int(max_positions),
        rel_pos=bool(getattr(args, "rel_pos", False)),
        rel_pos_bins=int(getattr(args, "rel_pos_bins", REL_POS_BINS)),
        max_rel_pos=int(getattr(args, "max_rel_pos", MAX_REL_POS)),
        activation_fn=getattr(args, "activation_fn", "gelu"),
        embedding_normalize=bool(getattr(args, "embedding_normalize", False)),
        encoder_normalize_before=bool(getattr(args, "encoder_normalize_before", False)),
        dropout=float(getattr(args, "dropout", 0.1)),
    )
    refusals = {
        "encoder_normalize_before": (
            used["encoder_normalize_before"], False,
            "pre-LayerNorm layers and a final LayerNorm; keras_tupe's layers are post-LN",
        ),
        "embedding_normalize": (
            used["embedding_normalize"], True,
            "no input LayerNorm; keras_tupe's encoder always has one",
        ),
        "activation_fn": (
            used["activation_fn"], "gelu",
            "keras_tupe converts the exact-erf gelu only (fairseq's `gelu`)",
        ),
    }
    for name, (value, valid, why) in refusals.items():
        if value != valid:
            raise ConversionError(
                f"{path}: args.{name}={value!r} cannot be reproduced ({why}). "
                f"Only {name}={valid!r} is converted."
            )
    if used["encoder_embed_dim"] % used["encoder_attention_heads"]:
        raise ConversionError(
            f"{path}: encoder_embed_dim={used['encoder_embed_dim']} is not divisible by "
            f"encoder_attention_heads={used['encoder_attention_heads']}."
        )
    return used


def _backbone_config(used, vocabulary_size):
    return dict(
        vocabulary_size=vocabulary_size,
        num_layers=used["encoder_layers"],
        num_heads=used["encoder_attention_heads"],
        hidden_dim=used["encoder_embed_dim"],
        intermediate_dim=used["encoder_ffn_embed_dim"],
        dropout=used["dropout"],
        max_sequence_length=used["max_positions"],
        num_segments=0,
        absolute_position="none",
        absolute_correlation="untied",
        relative_position="t5_bias" if used["rel_pos"] else "none",
        cls_reset=True,
        cls_reset_style="fairseq",
        mask_padding_embeddings=True,
        num_buckets=used["rel_pos_bins"],
        max_distance=used["max_rel_pos"],
        layer_norm_epsilon=LAYER_NORM_EPSILON,
        activation="gelu",
    )


def _weights(state, used, path):
    """{keras weight path: float32 array} of a `TupeMaskedLM`, from the fork's state dict."""
    tensors = StateDict(
        {key: np.asarray(value, "float32") for key, value in state.items()
         if not key.startswith("classification_heads.")}, path,
        missing="the TUPE fork's BERT has one.",
        leftover="state-dict tensors this converter does not know (not the TUPE fork's BERT, "
                 "or options it cannot reproduce)")
    d, h = used["encoder_embed_dim"], used["encoder_attention_heads"]
    embeddings = tensors.pop(ENCODER + "embed_tokens.weight")
    tensors.pop_tied(HEAD + "weight", embeddings, "decoder.lm_head.weight differs from "
                     "embed_tokens.weight; the fork ties them and keras_tupe's masked-LM head "
                     "reuses the word embeddings.")
    positions = tensors.pop(ENCODER + "pos.weight")
    if positions.shape[0] != used["max_positions"] + 1:
        raise ConversionError(
            f"{path}: pos.weight has {positions.shape[0]} rows; the fork's table has "
            f"max_positions + 1 = {used['max_positions'] + 1}."
        )
    correlation = "untied_positional_correlation/"
    values = {
        "token_embedding/embeddings": embeddings,
        **tensors.layer_norm("embeddings_layer_norm", ENCODER + "emb_layer_norm"),
        correlation + "position_embeddings": positions,
        **tensors.layer_norm(correlation + "position_layer_norm", ENCODER + "pos_ln"),
    }
    for ours, theirs in (("query", "pos_q_linear"), ("key", "pos_k_linear")):
        values.update(heads_dense(f"{correlation}{ours}_projection",
                                  tensors.pop(f"{ENCODER}{theirs}.weight"),
                                  tensors.pop(f"{ENCODER}{theirs}.bias"), h))
    if used["rel_pos"]:
        values["relative_bucket_bias/relative_attention_bias"] = tensors.pop(
            ENCODER + "relative_attention_bias.weight")
    for i in range(used["encoder_layers"]):
        theirs, ours = f"{ENCODER}layers.{i}.", f"transformer_layer_{i}/"
        in_weight = tensors.pop(theirs + "self_attn.in_proj_weight")  # (3d, d), rows [q; k; v]
        in_bias = tensors.pop(theirs + "self_attn.in_proj_bias")
        if in_weight.shape != (3 * d, d):
            raise ConversionError(
                f"{path}: {theirs}self_attn.in_proj_weight has shape {in_weight.shape}; "
                f"expected (3 * {d}, {d})."
            )
        query, key, value = ((in_weight[rows], in_bias[rows])
                             for rows in (slice(0, d), slice(d, 2 * d), slice(2 * d, 3 * d)))
        output = (tensors.pop(theirs + "self_attn.out_proj.weight"),
                  tensors.pop(theirs + "self_attn.out_proj.bias"))
        values.update({
            **attention_values(ours + "self_attention", query, key, value, output, h),
            **tensors.layer_norm(ours + "attention_layer_norm", theirs + "self_attn_layer_norm"),
            **tensors.layer_norm(ours + "output_layer_norm", theirs + "final_layer_norm"),
            **tensors.dense(ours + "intermediate_dense", theirs + "fc1"),
            **tensors.dense(ours + "output_dense", theirs + "fc2"),
        })
    values.update({
        **tensors.dense("mlm_head/intermediate_dense", HEAD + "dense"),
        **tensors.layer_norm("mlm_head/intermediate_layer_norm", HEAD + "layer_norm"),
        "mlm_head/output_bias": tensors.pop(HEAD + "bias"),
    })
    tensors.check_all_used()
    return values


def _pooler_values(hidden_dim):
    """The fork has no pooler; ours starts as a fixed draw (reproducible output)."""
    kernel = keras.initializers.TruncatedNormal(stddev=0.02, seed=0)((hidden_dim, hidden_dim))
    return {
        "pooled_dense/kernel": keras.ops.convert_to_numpy(kernel),
        "pooled_dense/bias": np.zeros((hidden_dim,), "float32"),
    }


def convert_fairseq(source, out, dictionary=None, bpe_codes=None):
    """Converts a TUPE-fork checkpoint into a `TupeMaskedLM` preset folder.

    Args:
        source: a `checkpoint*.pt` (as the fork's trainer writes it, float16 or float32),
            or a folder holding one (`model.pt`, `checkpoint_best.pt`,
            `checkpoint_last.pt`, or a single `checkpoint*.pt`).
        out: the preset folder to write; must not exist or be empty.
        dictionary: the fork's `dict.txt`. Defaults to the one beside the checkpoint.
        bpe_codes: optional BPE codes file. Given, the preset also holds a
            `TupeBpeTokenizer` and a `TupeMaskedLMPreprocessor`; otherwise it has no
            tokenizer (token ids in, as the fork's dictionary numbers them), and its
            metadata says so.

    Returns:
        The path of the preset folder, for `keras_hub.models.MaskedLM.from_preset` (or
        `Backbone.from_preset`).

    Raises:
        ConversionError: anything that cannot be converted exactly; nothing is written then.
    """
    out = os.fspath(out).rstrip("/")
    refuse_existing_output(out)
    checkpoint_path = _checkpoint_path(source)
    dictionary_path = _dictionary_path(checkpoint_path, dictionary)
    if bpe_codes is not None and not os.path.isfile(bpe_codes):
        raise ConversionError(f"{bpe_codes}: no such BPE codes file.")
    words = read_dictionary(dictionary_path)
    checkpoint = _load_checkpoint(checkpoint_path)
    used = _fork_args(checkpoint["args"], checkpoint_path)
    state = checkpoint["model"]
    dtypes = sorted({str(np.asarray(value).dtype) for value in state.values()})

    # The fork's ids: masked_lm's `add_symbol("<mask>")` adds a row unless dict.txt has one.
    tokens = [*SPECIAL_SYMBOLS, *words] + [MASK_SYMBOL] * (MASK_SYMBOL not in words)
    rows = len(tokens)
    mask_id = {token: i for i, token in enumerate(tokens)}[MASK_SYMBOL]
    embedding = state.get(ENCODER + "embed_tokens.weight")
    if embedding is None:
        raise ConversionError(
            f"{checkpoint_path}: the state dict has no {ENCODER}embed_tokens.weight.")
    if embedding.shape[0] != rows:
        raise ConversionError(
            f"{dictionary_path} does not match {checkpoint_path}: {len(SPECIAL_SYMBOLS)} "
            f"specials + {len(words)} words of dict.txt + {MASK_SYMBOL} = {rows} tokens, but "
            f"embed_tokens has {embedding.shape[0]} rows. Pass the dictionary the model "
            "was trained with."
        )

    config = _backbone_config(used, rows)
    backbone = TupeBackbone(**config)
    preprocessor = None
    if bpe_codes is not None:
        tokenizer = TupeBpeTokenizer(
            vocabulary=dictionary_path, bpe_codes=os.fspath(bpe_codes), lowercase=True
        )
        preprocessor = TupeMaskedLMPreprocessor(tokenizer, sequence_length=used["max_positions"],
                                                segment_ids=False)  # num_segments=0
    model = TupeMaskedLM(backbone, preprocessor=preprocessor)
    values = _weights(state, used, checkpoint_path)
    values.update(_pooler_values(used["encoder_embed_dim"]))
    assign_weights(values, model, checkpoint_path)

    files = {"checkpoint": checkpoint_path, "dictionary": dictionary_path}
    if bpe_codes is not None:
        files["bpe_codes"] = os.fspath(bpe_codes)
    specials = ", ".join(f"{symbol}={i}" for i, symbol in enumerate(SPECIAL_SYMBOLS))
    notes = [
        "The TUPE authors' fairseq fork (github.com/guolinke/TUPE at 4c64ff7): "
        "cls_reset_style='fairseq', mask_padding_embeddings=True, LayerNorm epsilon 1e-5.",
        f"Token ids are the fork's dictionary's: {specials}, "
        f"the words of dict.txt from {len(SPECIAL_SYMBOLS)}, {MASK_SYMBOL}={mask_id}. "
        f"Feed padding_mask = token_ids != {PAD_ID}; <s> plays [CLS], </s> ends a sentence.",
        f"Weights stored as {dtypes} in the checkpoint, converted to float32.",
        "pooled_dense (the [CLS] tanh pooler) is not in the fork's model; it is a fixed "
        "draw (truncated normal, stddev 0.02, seed 0) with zero bias, to be fine-tuned.",
        "Dropout is args.dropout; the fork's separate attention_dropout and "
        "activation_dropout have no keras_tupe counterpart (eval outputs are unaffected).",
    ]
    if bpe_codes is None:
        notes.append(
            "No bpe_codes given: the preset has no tokenizer or preprocessor; it takes "
            "token ids. Convert again with bpe_codes= for one that takes text."
        )
    if any(key.startswith("classification_heads.") for key in state):
        notes.append("classification_heads.* of the checkpoint were not converted.")
    conversion = {
        "source": os.path.abspath(checkpoint_path),
        "kind": "fairseq",
        "variant": "tupe_r_fairseq" if used["rel_pos"] else "tupe_a_fairseq",
        "args": used,
        "files": file_records(files),
        "tokenizer": "TupeBpeTokenizer" if bpe_codes is not None else None,
        "notes": notes,
    }
    return write_preset(out, model, conversion)
