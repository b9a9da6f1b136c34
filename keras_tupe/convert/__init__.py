"""Converters from the papers' released checkpoints to keras_tupe preset folders.

- `convert_huggingface(folder, out)`: a Hugging Face BERT folder (`config.json`,
  `model.safetensors` or `pytorch_model.bin`, `vocab.txt`) with `position_embedding_type`
  `absolute`, `relative_key` (Shaw) or `relative_key_query` (Huang et al. method 4).
- `convert_fairseq(checkpoint, out, dictionary=None, bpe_codes=None)`: a checkpoint of the
  TUPE authors' fairseq fork (TUPE-R or TUPE-A, float16 or float32).

Neither needs PyTorch, transformers or fairseq. The output is a keras-hub preset folder,
written whole or not at all, never over one that holds anything
(docs/converting-checkpoints.md).
"""

import importlib

from keras_tupe.convert.common import ConversionError
from keras_tupe_base.output_lock import output_lock

KINDS = ("huggingface", "fairseq")


def convert(kind, source, out, **kwargs):
    """Converts `source` (a checkpoint of `kind`, one of `KINDS`) to the preset folder `out`.

    Holds `out`'s lock (`keras_tupe_base.output_lock`) meanwhile: one writer per folder.
    """
    if kind not in KINDS:
        raise ConversionError(f"Unknown checkpoint kind {kind!r}. Valid kinds: {list(KINDS)}")
    function = getattr(importlib.import_module(f"keras_tupe.convert.{kind}"), f"convert_{kind}")
    with output_lock(out, command=f"convert_{kind}({source!r})", flag="`out=`"):
        return function(source, out, **kwargs)


def convert_huggingface(source, out, **kwargs):
    return convert("huggingface", source, out, **kwargs)


def convert_fairseq(source, out, **kwargs):
    return convert("fairseq", source, out, **kwargs)


__all__ = ["KINDS", "ConversionError", "convert", "convert_fairseq", "convert_huggingface"]
