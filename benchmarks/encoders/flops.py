"""A row's model FLOPs (`keras_tupe_base.flops`), and the throughput, TFLOP/s and MFU of
measured rows."""

from benchmarks.encoders.plan import KERAS_HUB_BERT
from keras_tupe_base.flops import variant_flops_per_token

# Dense bfloat16 tensor-core peaks (TFLOP/s, no sparsity), matched against the
# device kind in this order. float32 rows get no MFU unless --peak-tflops is
# given (their TF32 peak depends on settings this benchmark does not record).
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("A100", 312.0))


def row_flops_per_token(variant, size, seq_len, batch_size, training=True):
    """`keras_tupe_base.flops.variant_flops_per_token` of a row's variant; keras_hub_bert's is
    bert_a's (keras-hub's BertBackbone at bert_a's sizes: the same layers)."""
    return variant_flops_per_token("bert_a" if variant == KERAS_HUB_BERT else variant, size,
                                   seq_len, batch_size, training=training)


def peak_tflops(override, gpus, precision):
    """(peak TFLOP/s or None, where it came from) for the MFU of `precision` rows."""
    if override:
        return override, "--peak-tflops"
    if not gpus:
        return None, "n/a: no GPU (pass --peak-tflops)"
    if precision not in ("mixed_bfloat16", "bfloat16"):
        return None, f"n/a: no {precision} peak in the table (pass --peak-tflops)"
    kind = gpus[0]["name"]
    for pattern, value in PEAK_BF16_TFLOPS:
        if pattern.lower() in kind.lower():
            return value, f"dense bfloat16 peak of {pattern} (device kind {kind!r})"
    return None, f"n/a: {kind!r} not in the peak table (pass --peak-tflops)"


def add_throughput(rows, gpus, override=None):
    """Per ok row: tokens/s, model FLOPs per step, achieved TFLOP/s, MFU and its peak."""
    for row in rows:
        if row["status"] != "ok":
            continue
        tokens = row["batch_size"] * row["seq_len"]
        seconds = row["median_ms"] / 1000
        per_token = row["model_flops_per_token"]  # the worker's `row_flops_per_token`
        row["tokens_per_s"] = tokens / seconds
        row["model_flops_per_step"] = per_token * tokens
        row["model_tflops_per_s"] = per_token * tokens / seconds / 1e12
        peak, source = peak_tflops(override, gpus, row["precision"])
        row["peak_tflops"], row["peak_tflops_source"] = peak, source
        row["mfu"] = row["model_tflops_per_s"] / peak if peak else None
    return rows
