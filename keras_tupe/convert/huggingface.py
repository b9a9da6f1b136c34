"""Hugging Face BERT folders (`BertModel`, `BertForMaskedLM`) to keras_tupe preset folders.

A folder written by transformers' `save_pretrained` (`config.json`, `model.safetensors`
and/or `pytorch_model.bin`, `vocab.txt`, optionally `tokenizer_config.json`) becomes a
keras-hub preset folder of a `TupeBackbone`. `position_embedding_type="absolute"` (BERT) is
the `bert_a` variant; `"relative_key"` (Shaw et al.) is `shaw`, `"relative_key_query"`
(Huang et al., method 4) is `huang_m4`, neither adding the absolute table such a checkpoint
still stores.

transformers 4.x indexes `distance_embedding` (2M - 1 rows, one table a layer, shared by
the heads) by `i - j + M - 1`, with `M` = `max_position_embeddings`; keras_tupe's tables
hold distance `r = j - i` at row `r + k`. With `k = M - 1` the two are each other reversed.
"""

import json
import os

import numpy as np

from keras_tupe.convert.common import (
    ConversionError,
    StateDict,
    assign_weights,
    attention_values,
    file_records,
    refuse_existing_output,
    require_file,
    write_preset,
)
from keras_tupe.convert.torch_files import TorchFileError, load_torch_file
from keras_tupe.models import (
    TupeBackbone,
    TupeMaskedLM,
    TupeMaskedLMPreprocessor,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)

# position_embedding_type -> (keras_tupe variant, backbone fields).
POSITION_EMBEDDING_TYPES = {
    "absolute": ("bert_a", dict(absolute_position="added")),
    "relative_key": ("shaw", dict(absolute_position="none", relative_position="shaw")),
    "relative_key_query": (
        "huang_m4", dict(absolute_position="none", relative_position="method4")
    ),
}
# transformers' ACT2FN names -> the backbone's activation. The tanh GELUs
# (`gelu_new`, `gelu_pytorch_tanh`, `gelu_fast`) are one formula.
ACTIVATIONS = {"gelu": "gelu", "gelu_python": "gelu", "gelu_new": "gelu_approximate",
               "gelu_pytorch_tanh": "gelu_approximate", "gelu_fast": "gelu_approximate",
               "relu": "relu", "silu": "silu", "swish": "silu", "tanh": "tanh"}
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
WEIGHT_FILES = {"safetensors": "model.safetensors", "pytorch": "pytorch_model.bin"}
# The preprocessor's default length: BERT's, or the position table's if shorter.
MAX_PREPROCESSOR_LENGTH = 512


def convert_huggingface(source, out, weights="auto", dropout=None):
    """Converts a Hugging Face BERT folder into a keras_tupe preset folder.

    A `BertForMaskedLM` (or `BertForPreTraining`) folder becomes a `TupeMaskedLM` with its
    head, tokenizer and a `TupeMaskedLMPreprocessor`; its pooler, absent, stays freshly
    initialized (`metadata.json` says so). A `BertModel` folder becomes a backbone with its
    pooler, the tokenizer and a `TupeTextClassifierPreprocessor`: no masked-LM head is
    invented. After `import keras_tupe`, either loads with keras-hub's
    `Backbone.from_preset(out)` and `TextClassifier.from_preset(out, num_classes=...)`, the
    first also with `MaskedLM.from_preset(out)`. `metadata.json` records the conversion
    under `keras_tupe_conversion` (source, files and their sha256, notes). Everything is
    checked before anything is written.

    Args:
        source: the Hugging Face folder.
        out: the preset folder to write; must not exist, or be empty.
        weights: `"auto"` (`model.safetensors` where present, else `pytorch_model.bin`),
            `"safetensors"` or `"pytorch"`. Defaults to `"auto"`.
        dropout: float or None. The backbone's single dropout rate (attention
            probabilities and residual branches). `None` takes `hidden_dropout_prob`, and
            refuses a config whose `attention_probs_dropout_prob` differs from it.
            Defaults to `None`.

    Returns:
        The path of the preset folder.

    Raises:
        ConversionError: the folder is no BERT checkpoint keras_tupe can represent; the
            message names the file, the problem and what is accepted.
    """
    out = os.fspath(out).rstrip("/")
    refuse_existing_output(out)
    checked = read_source(os.fspath(source), weights, dropout)
    model, preprocessor, contents = build_model(checked)
    assign_weights(checked["values"], model, checked["weights_path"])
    conversion = {
        "kind": "huggingface",
        "source": os.path.abspath(source),
        "architectures": checked["config"].get("architectures"),
        "position_embedding_type": checked["position_embedding_type"],
        "variant": checked["variant"],
        "contents": contents,
        "files": file_records(checked["files"]),
        "notes": checked["notes"],
    }
    return write_preset(out, model, conversion, preprocessor=preprocessor)


def read_source(source, weights="auto", dropout=None):
    """Reads and checks everything of a Hugging Face folder; builds nothing.

    Returns a dict: `config`, `position_embedding_type`, `variant`, `backbone_config`,
    `vocabulary`, `tokenizer_args`, `values` (backbone weights by path, without the pooler
    when the checkpoint has none), `head` (masked-LM head weights or None),
    `weights_path`, `files` (the files read, by role) and `notes`. Raises
    `ConversionError` on anything it cannot convert.
    """
    if not os.path.isdir(source):
        raise ConversionError(f"{source}: not a folder; pass a Hugging Face model folder.")
    config_path = require_file(source, ["config.json"], "model configuration")
    config = _read_json(config_path)
    variant, backbone_config, notes = backbone_settings(config, config_path, dropout)
    vocabulary_path = require_file(source, ["vocab.txt"], "WordPiece vocabulary")
    vocabulary = read_vocabulary(vocabulary_path, config["vocab_size"])
    files = {"config": config_path, "vocabulary": vocabulary_path}
    tokenizer_config = {}
    tokenizer_config_path = os.path.join(source, "tokenizer_config.json")
    if os.path.isfile(tokenizer_config_path):
        tokenizer_config = _read_json(tokenizer_config_path)
        files["tokenizer_config"] = tokenizer_config_path
    tokenizer_args, tokenizer_notes = tokenizer_settings(tokenizer_config)
    weights_path = files["weights"] = weights_file(source, weights)
    values, head, checkpoint_notes = checkpoint_values(
        read_tensors(weights_path), weights_path, config
    )
    if head is not None and backbone_config["activation"] == "gelu_approximate":
        # TupeMaskedLM gives its head the exact GELU for a "gelu_approximate"
        # backbone (keras-hub's head takes Keras activation names only).
        raise ConversionError(
            f"{config_path}: hidden_act={config.get('hidden_act')!r} (the tanh GELU) with a "
            "masked-LM head: keras_tupe's masked-LM head computes the exact GELU, so the "
            "converted head would not reproduce the checkpoint. Accepted with a head: "
            "hidden_act 'gelu', 'relu', 'silu', 'tanh'; a BertModel folder (no head) may "
            "use the tanh GELU."
        )
    return dict(
        config=config,
        position_embedding_type=config.get("position_embedding_type") or "absolute",
        variant=variant, backbone_config=backbone_config, vocabulary=vocabulary,
        tokenizer_args=tokenizer_args, values=values, head=head, weights_path=weights_path,
        files=files, notes=notes + tokenizer_notes + checkpoint_notes,
    )


def build_model(checked):
    """`(model, preprocessor, description)`: what `write_preset` saves for a `read_source`
    result.

    With a `head`, a `TupeMaskedLM` holding its preprocessor (and None); without, the
    backbone and a text-classifier preprocessor saved beside it (keras-hub's loaders take
    the two files as a task preset without `task.json`). `values` gains the head's weights
    and, where the checkpoint has no pooler, the fresh pooler's.
    """
    values, head = checked["values"], checked["head"]
    tokenizer = TupeTokenizer(vocabulary=checked["vocabulary"], **checked["tokenizer_args"])
    backbone = TupeBackbone(**checked["backbone_config"])
    if "pooled_dense/kernel" not in values:
        values.update({weight.path: weight.numpy() for weight in backbone.pooled_dense.weights})
    sequence_length = min(MAX_PREPROCESSOR_LENGTH, backbone.max_sequence_length)
    if head is None:
        return backbone, TupeTextClassifierPreprocessor(tokenizer, sequence_length), (
            "TupeBackbone with its pooler, tokenizer, "
            f"TupeTextClassifierPreprocessor(sequence_length={sequence_length}); no "
            "masked-LM head (the checkpoint has none: MaskedLM.from_preset would give a "
            "freshly initialized one)"
        )
    values.update(head)
    model = TupeMaskedLM(
        backbone, preprocessor=TupeMaskedLMPreprocessor(tokenizer, sequence_length)
    )
    return model, None, (
        "TupeMaskedLM (backbone, masked-LM head from cls.predictions), tokenizer, "
        f"TupeMaskedLMPreprocessor(sequence_length={sequence_length})"
    )


def backbone_settings(config, config_path, dropout=None):
    """`(variant, TupeBackbone arguments, notes)` of a transformers `BertConfig` dict."""
    model_type = config.get("model_type")
    if model_type is None and all(
        str(name).startswith("Bert") for name in config.get("architectures") or ["?"]
    ):
        model_type = "bert"  # configs of transformers < 3 have no model_type
    if model_type != "bert":
        raise ConversionError(
            f"{config_path}: model_type={model_type!r}. Only Hugging Face BERT checkpoints "
            "(model_type 'bert': BertModel, BertForMaskedLM, BertForPreTraining) are "
            "converted; RoBERTa, ELECTRA and other families have other embeddings or heads."
        )
    position_type = config.get("position_embedding_type") or "absolute"
    if position_type not in POSITION_EMBEDDING_TYPES:
        raise ConversionError(
            f"{config_path}: position_embedding_type={position_type!r} is not known. "
            f"Accepted: {sorted(POSITION_EMBEDDING_TYPES)}."
        )
    if config.get("is_decoder") or config.get("add_cross_attention"):
        raise ConversionError(
            f"{config_path}: a decoder configuration (is_decoder / add_cross_attention); "
            "keras_tupe encoders are bidirectional. Accepted: encoder checkpoints."
        )
    required = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                "intermediate_size", "max_position_embeddings")
    missing = [key for key in required if not isinstance(config.get(key), int)]
    if missing:
        raise ConversionError(
            f"{config_path}: no integer {missing}; a BertConfig holds every one of "
            f"{list(required)}."
        )
    if config["hidden_size"] % config["num_attention_heads"]:
        raise ConversionError(
            f"{config_path}: hidden_size={config['hidden_size']} is not a multiple of "
            f"num_attention_heads={config['num_attention_heads']}."
        )
    hidden_act = config.get("hidden_act", "gelu")
    if hidden_act not in ACTIVATIONS:
        raise ConversionError(
            f"{config_path}: hidden_act={hidden_act!r} has no keras_tupe equivalent. "
            f"Accepted: {sorted(ACTIVATIONS)}."
        )
    notes = []
    hidden_dropout = config.get("hidden_dropout_prob", 0.1)
    attention_dropout = config.get("attention_probs_dropout_prob", 0.1)
    if dropout is None:
        if attention_dropout != hidden_dropout:
            raise ConversionError(
                f"{config_path}: attention_probs_dropout_prob={attention_dropout} differs "
                f"from hidden_dropout_prob={hidden_dropout}; keras_tupe's backbone has one "
                "dropout rate for both. Pass dropout=RATE to choose it (dropout does not "
                "change the converted outputs, only fine-tuning)."
            )
        dropout = hidden_dropout
    elif dropout != hidden_dropout or dropout != attention_dropout:
        notes.append(
            f"dropout={dropout} chosen by the caller (checkpoint: hidden_dropout_prob="
            f"{hidden_dropout}, attention_probs_dropout_prob={attention_dropout})."
        )
    variant, fields = POSITION_EMBEDDING_TYPES[position_type]
    length = config["max_position_embeddings"]
    backbone_config = dict(
        vocabulary_size=config["vocab_size"],
        num_layers=config["num_hidden_layers"],
        num_heads=config["num_attention_heads"],
        hidden_dim=config["hidden_size"],
        intermediate_dim=config["intermediate_size"],
        dropout=float(dropout),
        max_sequence_length=length,
        num_segments=config.get("type_vocab_size", 2),
        layer_norm_epsilon=float(config.get("layer_norm_eps", 1e-12)),
        activation=ACTIVATIONS[hidden_act],
        **fields,
    )
    if position_type != "absolute":
        # HF's table covers every distance of a length-M input, unclipped.
        backbone_config["max_relative_distance"] = length - 1
        notes.append(
            f"{position_type}: distance_embedding reversed into relative_embeddings "
            f"(max_relative_distance={length - 1}); embeddings.position_embeddings is not "
            "used by this type and was not converted. Longer inputs than "
            f"max_position_embeddings={length} (which transformers refuses) share the "
            "last table rows."
        )
    return variant, backbone_config, notes


def read_vocabulary(path, vocabulary_size):
    """The tokens of `vocab.txt`, as keras-hub's `WordPieceTokenizer` reads them."""
    with open(path, encoding="utf-8") as f:
        vocabulary = [line.rstrip() for line in f]
    if len(vocabulary) != vocabulary_size:
        raise ConversionError(
            f"{path}: {len(vocabulary)} tokens, but config.json says vocab_size="
            f"{vocabulary_size}. The vocabulary must have one line per row of the word "
            "embeddings; use the vocab.txt saved with these weights."
        )
    missing = [token for token in SPECIAL_TOKENS if token not in vocabulary]
    if missing:
        raise ConversionError(
            f"{path}: no {missing}. keras_tupe's tokenizer needs the BERT special tokens "
            f"{list(SPECIAL_TOKENS)} in the vocabulary."
        )
    return vocabulary


def tokenizer_settings(tokenizer_config):
    """`TupeTokenizer` arguments and notes from a `tokenizer_config.json` dict.

    transformers' `BertTokenizer` lowercases by default and strips accents when
    `strip_accents` is unset and it lowercases; keras-hub's strips them only when asked.
    """
    lowercase = bool(tokenizer_config.get("do_lower_case", True))
    strip_accents = tokenizer_config.get("strip_accents")
    strip_accents = lowercase if strip_accents is None else bool(strip_accents)
    notes = []
    if tokenizer_config.get("tokenize_chinese_chars") is False:
        notes.append("tokenize_chinese_chars=False is not kept: the tokenizer splits CJK "
                     "characters (keras-hub's WordPieceTokenizer does not save that setting).")
    if tokenizer_config.get("do_basic_tokenize") is False:
        notes.append("do_basic_tokenize=False is not kept: the tokenizer splits on whitespace "
                     "and punctuation first.")
    return {"lowercase": lowercase, "strip_accents": strip_accents}, notes


def weights_file(source, weights="auto"):
    """The weight file of `source`: safetensors first with `weights="auto"`."""
    if weights == "auto":
        names = list(WEIGHT_FILES.values())
    elif weights in WEIGHT_FILES:
        names = [WEIGHT_FILES[weights]]
    else:
        raise ConversionError(
            f"weights must be 'auto' or one of {sorted(WEIGHT_FILES)}. "
            f"Received: weights={weights!r}"
        )
    for name in names:
        if os.path.isfile(os.path.join(source, f"{name}.index.json")):
            if not os.path.isfile(os.path.join(source, name)):
                raise ConversionError(
                    f"{source}: a sharded checkpoint ({name}.index.json) is not converted; "
                    f"save the model as a single {name} (save_pretrained(max_shard_size=...))."
                )
    return require_file(source, names, "weight file")


def read_tensors(path):
    """`{name: numpy array}` of a `model.safetensors` or `pytorch_model.bin`."""
    if path.endswith(".safetensors"):
        from safetensors.numpy import load_file  # optional: only a .safetensors file needs it

        try:
            return load_file(path)
        except Exception as error:  # safetensors raises its own error types
            raise ConversionError(f"{path}: not a readable safetensors file ({error}).") from error
    try:
        tensors = load_torch_file(path)
    except TorchFileError as error:
        raise ConversionError(f"{path}: {error}") from error
    if not isinstance(tensors, dict) or not all(
        isinstance(value, np.ndarray) for value in tensors.values()
    ):
        raise ConversionError(
            f"{path}: not a state dict of tensors (a torch.save of model.state_dict(), as "
            "save_pretrained writes)."
        )
    return dict(tensors)


def checkpoint_values(tensors, path, config):
    """`(backbone values, masked-LM head values or None, notes)` of a BERT state dict, by
    keras_tupe weight path (no pooler where the checkpoint has none). Every tensor must be
    used, checked, or known to be unused."""
    tensors = {_modern_name(name): value for name, value in tensors.items()}
    prefix = "bert." if any(name.startswith("bert.") for name in tensors) else ""
    checkpoint = StateDict(
        tensors, path,
        missing="a BertModel / BertForMaskedLM checkpoint of the config.json beside it has one.",
        leftover="tensors that a BertModel / BertForMaskedLM / BertForPreTraining checkpoint "
                 "does not hold (task heads other than the masked LM, e.g. classifiers or QA, "
                 "are not converted; convert the base model's folder)")
    position_type = config.get("position_embedding_type") or "absolute"
    hidden = config["hidden_size"]
    notes = []

    embeddings = f"{prefix}embeddings"
    word_embeddings = checkpoint.pop(f"{embeddings}.word_embeddings.weight")
    if word_embeddings.shape != (config["vocab_size"], hidden):
        raise ConversionError(
            f"{path}: {embeddings}.word_embeddings.weight has shape {word_embeddings.shape}, "
            f"but config.json says vocab_size={config['vocab_size']}, "
            f"hidden_size={hidden}; the weights and the config must come from one model."
        )
    values = {
        "token_embedding/embeddings": word_embeddings,
        "segment_embedding/embeddings": checkpoint.pop(
            f"{embeddings}.token_type_embeddings.weight"
        ),
        **checkpoint.layer_norm("embeddings_layer_norm", f"{embeddings}.LayerNorm"),
    }
    if position_type == "absolute":
        values["position_embedding/embeddings"] = checkpoint.pop(
            f"{embeddings}.position_embeddings.weight"
        )
    else:
        checkpoint.discard(f"{embeddings}.position_embeddings.weight")
    checkpoint.discard(f"{embeddings}.position_ids")  # a buffer (arange) of older versions
    for i in range(config["num_hidden_layers"]):
        hf_layer, layer = f"{prefix}encoder.layer.{i}", f"transformer_layer_{i}"
        attention = f"{layer}/self_attention"
        query, key, value, output = (
            (checkpoint.pop(f"{hf_layer}.attention.{name}.weight"),
             checkpoint.pop(f"{hf_layer}.attention.{name}.bias"))
            for name in ("self.query", "self.key", "self.value", "output.dense"))
        values.update(attention_values(attention, query, key, value, output,
                                       config["num_attention_heads"]))
        if position_type != "absolute":
            # HF row i - j + M - 1 is keras_tupe row (j - i) + (M - 1): reversed.
            table = checkpoint.pop(f"{hf_layer}.attention.self.distance_embedding.weight")
            values[f"{attention}/relative_embeddings"] = table[::-1]
        values.update({
            **checkpoint.layer_norm(f"{layer}/attention_layer_norm",
                                    f"{hf_layer}.attention.output.LayerNorm"),
            **checkpoint.dense(f"{layer}/intermediate_dense", f"{hf_layer}.intermediate.dense"),
            **checkpoint.dense(f"{layer}/output_dense", f"{hf_layer}.output.dense"),
            **checkpoint.layer_norm(f"{layer}/output_layer_norm", f"{hf_layer}.output.LayerNorm"),
        })
    if f"{prefix}pooler.dense.weight" in tensors:
        values.update(checkpoint.dense("pooled_dense", f"{prefix}pooler.dense"))
    else:
        notes.append("The checkpoint has no pooler (pooler.dense): pooled_dense is freshly "
                     "initialized; fine-tune before using pooled_output.")
    head = None
    if "cls.predictions.bias" in tensors:
        head = {
            **checkpoint.dense("mlm_head/intermediate_dense", "cls.predictions.transform.dense"),
            **checkpoint.layer_norm("mlm_head/intermediate_layer_norm",
                                    "cls.predictions.transform.LayerNorm"),
            "mlm_head/output_bias": checkpoint.pop("cls.predictions.bias"),
        }
        # pytorch_model.bin may repeat the tied decoder; keras-hub's head is tied too.
        for name, tied_to, what in (
                ("cls.predictions.decoder.weight", word_embeddings,
                 "the word embeddings (keras_tupe's masked-LM head is tied to them)"),
                ("cls.predictions.decoder.bias", head["mlm_head/output_bias"],
                 "cls.predictions.bias")):
            checkpoint.pop_tied(name, tied_to, required=False, problem=(
                f"{name} differs from {what}; an untied masked-LM decoder is not converted "
                "(keras-hub's MaskedLMHead uses the word embeddings)."))
    if any(name.startswith("cls.seq_relationship.") for name in tensors):
        for name in [n for n in checkpoint.tensors if n.startswith("cls.seq_relationship.")]:
            checkpoint.discard(name)
        notes.append("The next-sentence-prediction head (cls.seq_relationship) was dropped: "
                     "keras_tupe pre-trains without NSP.")
    checkpoint.check_all_used()
    return values, head, notes


def _modern_name(name):
    # BERT checkpoints converted from TensorFlow (e.g. bert-base-uncased's
    # pytorch_model.bin) name LayerNorm parameters gamma/beta; transformers
    # renames them on load, and so does this converter.
    if ".LayerNorm." in name or name.startswith("LayerNorm."):
        if name.endswith(".gamma"):
            return name[: -len("gamma")] + "weight"
        if name.endswith(".beta"):
            return name[: -len("beta")] + "bias"
    return name


def _read_json(path):
    try:
        with open(path, encoding="utf-8") as f:
            value = json.load(f)
    except (OSError, ValueError) as error:
        raise ConversionError(f"{path}: not a readable JSON file ({error}).") from error
    if not isinstance(value, dict):
        raise ConversionError(f"{path}: holds a {type(value).__name__}, not a JSON object.")
    return value
