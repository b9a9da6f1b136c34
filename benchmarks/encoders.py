"""Encoder speed and memory: every preset beside keras-hub's BERT of the same size.

One command measures, side by side, the training step (forward + backward +
AdamW update) and inference of every `keras_tupe` variant and of
`keras_hub.models.BertBackbone` built with the sizes of `bert_a_<size>`, at each
sequence length, with and without XLA, in each precision, with peak memory:

    python -m benchmarks.encoders                  # CPU: --size mini, seq 128 and 512
    python -m benchmarks.encoders --quick          # smoke test (tiny, seq 32 64, 2 repeats)
    KERAS_BACKEND=jax python -m benchmarks.encoders --size base   # e.g. on a GPU

Method:
- Every (variant, sequence length, mode, XLA, precision) runs in a fresh
  subprocess: no model, allocator state or XLA cache leaks from one measurement
  into the next, and a crash or out-of-memory is recorded as such for that row.
- Measurements are interleaved: the configurations form the outer loop and the
  variants the inner one, so models being compared run next to each other in
  time; with `--rounds R` the whole sweep is repeated R times (variant order
  rotated each round) and the timings of the rounds pooled.
- The step is Keras's own: `train_on_batch` (loss, gradients, AdamW with the
  pre-training settings of `keras_tupe.optimization.create_optimizer`) or
  `predict_on_batch`, jit-compiled or not, on fixed random inputs converted to
  backend tensors once. The first call (tracing + compilation) is reported
  apart as the compile time; `--warmup` more calls are discarded; then each of
  `--repeats` calls is timed, synchronized (its result is on the host).
  Medians, min-max and the interquartile range are reported.
- The training head is the same for every model and touches every output
  position, so no layer can be pruned: loss = mean(sequence_output²) +
  mean(pooled_output²).
- Peak memory ("step Δ"): the backend allocator's peak during the warm-up and
  timed steps above what stays allocated after the first call (weights,
  optimizer state), i.e. the step's activations, gradients and temporaries.
  TensorFlow keeps these statistics on the CPU too; the process's peak RSS is
  not usable for this on a CPU (the allocators keep freed memory, and XLA's
  compiler peaks in the same first call). Also reported: the whole-life peak
  RSS (`ru_maxrss`) and that minus the RSS after the model was built; the
  latter is the step figure where the backend keeps no statistics (JAX, CPU).
- `--interleave` instead times the variants of a configuration in one process,
  their steps alternating (robust on a busy machine; no memory figures).
- Throughput: tokens/s = batch x sequence / median step; model TFLOP/s from
  `model_flops_per_token`; MFU against `--peak-tflops` or the dense bfloat16
  peak of a known GPU (`PEAK_BF16_TFLOPS`). `--flash` sets the keras_tupe
  models' `attention_implementation` ("fused" / "einsum"); each row records it,
  the path the step ran and the `flash_attention` asked (never on a CPU).

Results: `OUT.json` (machine, versions, command, every measurement) and
`OUT.md` (headline against the issue's thresholds, then one table per
configuration). The parent process never imports a deep-learning framework.
"""

import argparse
import json
import math
import os
import platform
import resource
import shlex
import statistics
import subprocess
import sys
import tempfile
import time
import traceback
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[1]

# === Defaults ===
VARIANT_NAMES = (  # keras_tupe.models.presets.VARIANTS, in its order (checked at run time).
    "bert_a", "bert_r", "bert_a_d", "tupe_a", "tupe_a_tie_cls", "tupe_r",
    "tupe_a_fairseq", "tupe_r_fairseq",
    "shaw", "huang_m1", "huang_m2", "huang_m3", "huang_m4",
    "rope", "alibi", "deberta",
)
KERAS_HUB_BERT = "keras_hub_bert"
ALL_VARIANTS = VARIANT_NAMES + (KERAS_HUB_BERT,)
SIZES = ("tiny", "mini", "small", "base")
DEFAULT_SIZE = {"cpu": "mini", "gpu": "base"}
DEFAULT_BATCH_SIZE = {"cpu": 8, "gpu": 32}
DEFAULT_SEQ_LENS = (128, 512)
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 2
DEFAULT_JOB_TIMEOUT_S = 1800
QUICK = dict(size="tiny", seq_lens=(32, 64), repeats=2, warmup=1)
MODES = ("train", "infer")
PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16")
# Pre-training optimizer (TUPE Table 1); the schedule is far from its end.
LEARNING_RATE, TOTAL_STEPS, WARMUP_STEPS = 1e-4, 1_000_000, 10_000
INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")

# The issue's thresholds (headline).
SPEED_THRESHOLD = 1.05  # tupe_r train step / bert_a and / keras_hub_bert, with XLA
MEMORY_THRESHOLD = 2.0  # huang_m3 / huang_m4 peak memory at the longest sequence
HEADLINE_SEQ_LENS = (128, 512)
MiB = 1024 * 1024
# The issue's GPU targets: training step, base size, sequence 512, mixed_bfloat16, XLA.
GPU_TARGET = dict(size="base", seq_len=512, precision="mixed_bfloat16")
GPU_TARGETS = (  # (name, numerator, denominator or None for MFU, "<=" / ">=", threshold)
    ("tupe_r / bert_a step time", "tupe_r", "bert_a", "<=", 1.05),
    ("tupe_r / keras_hub_bert step time", "tupe_r", KERAS_HUB_BERT, "<=", 1.0),
    ("bert_a MFU", "bert_a", None, ">=", 0.40),
    ("huang_m4 / bert_a step time", "huang_m4", "bert_a", "<=", 1.3),
)
# Dense bfloat16 tensor-core peaks (TFLOP/s, no sparsity), matched against the
# device kind in this order. float32 rows get no MFU unless --peak-tflops is
# given (their TF32 peak depends on settings this benchmark does not record).
PEAK_BF16_TFLOPS = (("H100 PCIe", 756.0), ("H100", 989.4), ("H200", 989.4), ("A100", 312.0))
FLASH = {"off": [False], "on": [True], "both": [False, True]}


# === Model FLOPs ===
def model_flops_per_token(num_layers, hidden_dim, intermediate_dim, num_heads, seq_len,
                          relative_position="none", absolute_correlation="none",
                          batch_size=1, training=True, relative_table_rows=None):
    """Model FLOPs per token of one step (multiply and add counted as 2).

    Training step = 3 x forward (the backward pass costs 2 x forward). Forward,
    per layer and token, with d = `hidden_dim`, d_ff = `intermediate_dim`,
    n = `seq_len`, h = `num_heads`:

        2 x (4 d² [Q, K, V, O projections] + 2 d d_ff [feed-forward])
        + 2 x 2 n d [QKᵀ and PV]

    (24 d² + 4 n d with d_ff = 4 d), plus the variant's positional logits,
    per layer and token:

        shaw:    + 2 n d      q_i·a_ij (keys only: this Shaw has no value-side term)
        method4: + 2 x 2 n d  q_i·a_ij and k_j·a_ij
        method3: + n d        Σ_c q_ic k_jc a_ijc: one more multiply per term than QKᵀ
        method1, method2: + h n  the logits multiplied by a scalar per pair
        t5_bias (bert_r, tupe_r), alibi: 0  a gathered or fixed bias, added
        rotary: 0      elementwise rotations of q and k (like the additions, not counted)
        disentangled: + 2 x 2 r d  c2p and p2c scores against the r = 2k rows of the
                       shared table (`relative_table_rows`)

    and, once per forward pass for the whole batch (not per layer: the encoder
    computes it once and every layer shares it), divided by the batch's B n
    tokens:

        untied (tupe_a, tupe_a_tie_cls, tupe_r): 2 x 2 n d² [U_Q, U_K projections
            of the positions] + 2 n² d [their correlation, (h, n, n)]
        untied_cross (bert_a_d): 2 x 2 n d² [the position projections]
        disentangled: 2 x 2 r d² per layer [each layer's W_Q, W_K of the table]

    Not counted: embeddings (gathers), additions (biases, residuals), softmax,
    layer norms, the pooler (one d x d product per sequence, < 0.1 % at mini,
    n = 128), the benchmark's loss; this benchmark has no MLM head. Inference:
    `training=False`, the forward pass alone.
    """
    d, d_ff, n, h = hidden_dim, intermediate_dim, seq_len, num_heads
    layer = 2 * (4 * d * d + 2 * d * d_ff) + 2 * 2 * n * d
    r = relative_table_rows or 0
    layer += {"shaw": 2 * n * d, "method4": 2 * 2 * n * d, "method3": n * d,
              "method1": h * n, "method2": h * n,
              "disentangled": 2 * 2 * r * d}.get(relative_position, 0)
    shared = {"untied": 2 * 2 * n * d * d + 2 * n * n * d,
              "untied_cross": 2 * 2 * n * d * d}.get(absolute_correlation, 0)
    if relative_position == "disentangled":
        shared += num_layers * 2 * 2 * r * d * d
    forward = num_layers * layer + shared / (batch_size * n)
    return 3 * forward if training else forward


def variant_flops_per_token(variant, size, seq_len, batch_size, training=True):
    """`model_flops_per_token` for a preset (keras_hub_bert: bert_a's)."""
    presets = _presets_module()
    fields = presets.VARIANTS["bert_a" if variant == KERAS_HUB_BERT else variant]
    size_config = presets.SIZES[size]
    return model_flops_per_token(
        size_config["num_layers"], size_config["hidden_dim"], size_config["intermediate_dim"],
        size_config["num_heads"], seq_len,
        relative_position=fields.get("relative_position", "none"),
        absolute_correlation=fields.get("absolute_correlation", "none"),
        batch_size=batch_size, training=training,
        # DeBERTa's table: 2k rows, k = max_relative_distance (default max_len // 2).
        relative_table_rows=2 * fields.get("max_relative_distance",
                                           size_config["max_sequence_length"] // 2),
    )


def peak_tflops(override, gpus, precision):
    """(peak TFLOP/s or None, where it came from) for the MFU of `precision` rows."""
    if override:
        return override, "--peak-tflops"
    if not gpus:
        return None, "n/a: no GPU (pass --peak-tflops)"
    if precision != "mixed_bfloat16":
        return None, f"n/a: no {precision} peak in the table (pass --peak-tflops)"
    kind = gpus[0]["name"]
    for pattern, value in PEAK_BF16_TFLOPS:
        if pattern.lower() in kind.lower():
            return value, f"dense bfloat16 peak of {pattern} (device kind {kind!r})"
    return None, f"n/a: {kind!r} not in the peak table (pass --peak-tflops)"


def add_throughput(rows, settings, gpus, override=None):
    """Per ok row: tokens/s, model FLOPs per step, achieved TFLOP/s, MFU and its peak."""
    for row in rows:
        if row["status"] != "ok":
            continue
        tokens = row["batch_size"] * row["seq_len"]
        seconds = row["median_ms"] / 1000
        per_token = variant_flops_per_token(row["variant"], row["size"], row["seq_len"],
                                            row["batch_size"], training=row["mode"] == "train")
        row["tokens_per_s"] = tokens / seconds
        row["model_flops_per_step"] = per_token * tokens
        row["model_tflops_per_s"] = per_token * tokens / seconds / 1e12
        peak, source = peak_tflops(override, gpus, row["precision"])
        row["peak_tflops"], row["peak_tflops_source"] = peak, source
        row["mfu"] = row["model_tflops_per_s"] / peak if peak else None
    return rows


# === Arguments ===
def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.encoders",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    from training.cli import one_line_errors  # no framework: `training` blocks TensorFlow

    one_line_errors(parser)  # the parser's own errors: one line
    parser.add_argument("--size", choices=SIZES, default=None,
                        help="preset size (default: mini on CPU, base on GPU)")
    parser.add_argument("--variants", nargs="+", choices=ALL_VARIANTS, default=list(ALL_VARIANTS),
                        metavar="VARIANT",
                        help=f"models to measure (default: all of {list(ALL_VARIANTS)})")
    parser.add_argument("--seq-lens", nargs="+", type=int, default=None,
                        help=f"sequence lengths (default: {list(DEFAULT_SEQ_LENS)})")
    parser.add_argument("--batch-size", type=int, default=None,
                        help="batch size (default: 8 on CPU, 32 on GPU)")
    parser.add_argument("--xla", choices=("both", "on", "off"), default="both",
                        help="jit_compile=True, False, or both (default: both)")
    parser.add_argument("--precisions", nargs="+", choices=PRECISIONS, default=None,
                        help="dtype policies (default: float32, plus mixed_bfloat16 and "
                             "mixed_float16 where a GPU supports them)")
    parser.add_argument("--flash", choices=tuple(FLASH), default="off",
                        help="the keras_tupe models' attention_implementation: 'fused' "
                             "(keras.ops.dot_product_attention, a flash kernel where the backend "
                             "has one) for on, 'einsum' for off, or both (default: off); "
                             "keras_hub_bert: keras.config.enable_flash_attention() on a GPU")
    parser.add_argument("--dropout", type=float, default=None,
                        help="dropout of every model (default: the preset's 0.1); the fused "
                             "attention has no attention dropout, so a training step with "
                             "dropout > 0 takes the einsum path whatever --flash says")
    parser.add_argument("--peak-tflops", type=float, default=None,
                        help="peak TFLOP/s for the MFU column of every row (default: the dense "
                             "bfloat16 peak of a known GPU for mixed_bfloat16 rows, else n/a)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES),
                        help="train: forward + backward + AdamW update; infer: forward "
                             "(default: both)")
    parser.add_argument("--repeats", type=int, default=None,
                        help="timed steps per measurement, after warm-up "
                             f"(default: {DEFAULT_REPEATS})")
    parser.add_argument("--warmup", type=int, default=None,
                        help="untimed steps after the compiling first call "
                             f"(default: {DEFAULT_WARMUP})")
    parser.add_argument("--rounds", type=int, default=1,
                        help="repeat the whole sweep this many times (variant order rotated), "
                             "splitting --repeats between rounds and pooling the timings "
                             "(default: 1)")
    parser.add_argument("--vocabulary-size", type=int, default=None,
                        help="vocabulary of every model (default: the preset's)")
    parser.add_argument("--activation", default=None,
                        help="feed-forward activation of the keras_tupe models (default: the "
                             "preset's exact 'gelu'; keras-hub's BERT always uses the tanh "
                             "'gelu_approximate')")
    parser.add_argument("--out", default=None,
                        help="output path without extension "
                             "(default: docs/results/benchmarks_<backend>_<size>)")
    parser.add_argument("--overwrite", action="store_true",
                        help="replace an existing report at --out (refused otherwise)")
    parser.add_argument("--job-timeout", type=float, default=DEFAULT_JOB_TIMEOUT_S,
                        help="seconds before one measurement is killed and recorded as failed "
                             f"(default: {DEFAULT_JOB_TIMEOUT_S})")
    parser.add_argument("--interleave", action="store_true",
                        help="time the variants of each configuration in one process, their "
                             "steps alternating (robust to a busy machine; no memory figures)")
    parser.add_argument("--quick", action="store_true",
                        help="smoke test: --size tiny --seq-lens 32 64 --repeats 2 --warmup 1 "
                             "(explicit flags still win)")
    # Internal: the parent runs each measurement (or group) as `--worker JOBS --worker-out F`.
    parser.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--probe", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    for name in ("batch_size", "repeats", "rounds", "vocabulary_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1. Received: {value}")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        parser.error(f"--dropout must be in [0, 1). Received: {args.dropout}")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        parser.error(f"--peak-tflops must be > 0. Received: {args.peak_tflops}")
    if args.warmup is not None and args.warmup < 0:
        parser.error(f"--warmup must be >= 0. Received: {args.warmup}")
    if args.seq_lens is not None and min(args.seq_lens) < 2:
        parser.error(f"--seq-lens must be >= 2. Received: {args.seq_lens}")
    return args


def resolve_settings(args, probe):
    """Fills the defaults that depend on the hardware (GPU or not) and `--quick`."""
    device = "gpu" if probe["gpus"] else "cpu"
    quick = QUICK if args.quick else {}
    notes = []
    if args.precisions is not None:
        precisions = list(dict.fromkeys(args.precisions))
    else:
        precisions = ["float32"] + [p for p in probe["fast_mixed_precisions"]]
        if device == "cpu" and probe["cpu_low_precision_flags"]:
            notes.append(
                "Mixed precision skipped by default: no GPU was found. This CPU does have "
                f"low-precision instructions ({probe['cpu_low_precision_flags']}), which "
                "TensorFlow's oneDNN kernels (not XLA's) can use for bfloat16 matmuls; measure "
                "them with --precisions float32 mixed_bfloat16."
            )
        elif device == "cpu":
            notes.append(
                "Mixed precision skipped: no GPU was found, and the CPU has no bfloat16/float16 "
                "matmul instructions (no avx512_bf16, avx512_fp16 or AMX), so it would not be "
                "faster than float32. Force it with --precisions."
            )
        elif len(precisions) < 3:
            skipped = sorted(set(PRECISIONS) - set(precisions))
            notes.append(f"Skipped {skipped}: the GPU's compute capability "
                         f"({probe['gpus'][0].get('compute_capability')}) has no fast "
                         "matmul for them (float16 needs 7.0, bfloat16 8.0).")
    repeats = args.repeats or quick.get("repeats", DEFAULT_REPEATS)
    settings = dict(
        backend=probe["backend"],
        device=device,
        size=args.size or quick.get("size", DEFAULT_SIZE[device]),
        variants=list(dict.fromkeys(args.variants)),
        seq_lens=list(dict.fromkeys(args.seq_lens or quick.get("seq_lens", DEFAULT_SEQ_LENS))),
        batch_size=args.batch_size or DEFAULT_BATCH_SIZE[device],
        xla=[True, False] if args.xla == "both" else [args.xla == "on"],
        precisions=precisions,
        modes=list(dict.fromkeys(args.modes)),
        repeats=repeats,
        warmup=args.warmup if args.warmup is not None else quick.get("warmup", DEFAULT_WARMUP),
        rounds=min(args.rounds, repeats),
        vocabulary_size=args.vocabulary_size,
        activation=args.activation,
        job_timeout_s=args.job_timeout,
        interleave=args.interleave,
        flash=FLASH[args.flash],
        dropout=args.dropout,
        peak_tflops=args.peak_tflops,
    )
    if not probe["keras_hub"] and KERAS_HUB_BERT in settings["variants"]:
        notes.append("keras_hub_bert skipped: keras_hub cannot be imported "
                     f"({probe['keras_hub_error']}).")
    if settings["backend"] == "jax" and False in settings["xla"]:
        notes.append("On JAX, XLA off (`jit_compile=False`) runs the step op by op, eagerly.")
    if settings["backend"] == "torch":
        notes.append("On the torch backend `jit_compile=True` means torch.compile, not XLA.")
    out = args.out or str(REPO_ROOT / "docs" / "results"
                          / f"benchmarks_{settings['backend']}_{settings['size']}")
    return settings, notes, out


# === Planning ===
def plan_jobs(settings):
    """The measurements in the order they run: configurations outer, variants inner.

    Each round rotates the variant order by one, so no model always runs first
    (right after another's compilation) or last.
    """
    jobs = []
    variants = settings["variants"]
    per_round = [settings["repeats"] // settings["rounds"]] * settings["rounds"]
    for i in range(settings["repeats"] % settings["rounds"]):
        per_round[i] += 1
    for round_index, repeats in enumerate(per_round):
        for precision in settings["precisions"]:
            for xla in settings["xla"]:
                for mode in settings["modes"]:
                    for seq_len in settings["seq_lens"]:
                        # Flash off and on side by side (one --interleave process).
                        for flash in settings.get("flash", [False]):
                            shift = round_index % len(variants)
                            for variant in variants[shift:] + variants[:shift]:
                                jobs.append(dict(
                                    variant=variant, size=settings["size"], seq_len=seq_len,
                                    mode=mode, xla=xla, precision=precision, flash=flash,
                                    batch_size=settings["batch_size"], repeats=repeats,
                                    warmup=settings["warmup"], round=round_index,
                                    vocabulary_size=settings["vocabulary_size"],
                                    activation=settings["activation"],
                                    dropout=settings.get("dropout"),
                                ))
    return jobs


def config_key(row):
    return (row["seq_len"], row["mode"], row["xla"], row["precision"], row.get("flash", False))


# === Statistics ===
def quantile(values, q):
    """Linear-interpolation quantile (numpy's default) of a non-empty list."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timing_stats(times_ms):
    return dict(
        median_ms=statistics.median(times_ms),
        min_ms=min(times_ms),
        max_ms=max(times_ms),
        q1_ms=quantile(times_ms, 0.25),
        q3_ms=quantile(times_ms, 0.75),
        iqr_ms=quantile(times_ms, 0.75) - quantile(times_ms, 0.25),
        repeats=len(times_ms),
    )


def merge_rounds(results):
    """One row per measurement: the timings of its rounds pooled.

    Compile time is the median over rounds; memory the largest; a failure in
    any round makes the row failed (its error kept).
    """
    grouped = {}
    for result in results:
        grouped.setdefault((result["variant"],) + config_key(result), []).append(result)
    rows = []
    for parts in grouped.values():
        first = parts[0]
        row = {key: first[key] for key in ("variant", "size", "seq_len", "mode", "xla",
                                           "precision", "batch_size")}
        row["flash"] = first.get("flash", False)
        failed = [p for p in parts if p["status"] != "ok"]
        row["rounds"] = len(parts)
        row["order"] = [p["order"] for p in parts]
        if failed:
            row.update(status=failed[0]["status"], error=failed[0].get("error", ""))
            row["params"] = next((p["params"] for p in parts if p.get("params")), None)
            rows.append(row)
            continue
        times = [t for p in parts for t in p["times_ms"]]
        row.update(status="ok", params=first["params"], times_ms=times, **timing_stats(times))
        row["cpu_ms"] = [t for p in parts for t in p["cpu_ms"]]
        row["cpu_median_ms"] = statistics.median(row["cpu_ms"])
        row["compile_s"] = statistics.median(p["compile_s"] for p in parts)
        row["xla_effective"] = all(p["xla_effective"] for p in parts) if first["xla"] else False
        for key in ("peak_mb", "peak_build_delta_mb", "peak_abs_mb", "allocator_peak_mb",
                    "rss_after_build_mb", "allocated_after_compile_mb"):
            values = [p[key] for p in parts if p.get(key) is not None]
            row[key] = max(values) if values else None
        row["memory_kind"] = first.get("memory_kind")
        utilization = [p["cpu_utilization"] for p in parts if p.get("cpu_utilization")]
        row["cpu_utilization"] = statistics.median(utilization) if utilization else None
        loads = [p[k] for p in parts for k in ("load_average_start", "load_average_end")
                 if p.get(k) is not None]
        row["load_average_range"] = [min(loads), max(loads)] if loads else None
        row["activation"] = first.get("activation")
        for key in ("attention_implementation", "attention_path", "flash_attention"):
            row[key] = first.get(key)
        rows.append(row)
    return rows


def add_ratios(rows):
    """`ratio_bert_a`, `ratio_keras_hub_bert`: median / the reference's median, same config."""
    medians = {(row["variant"],) + config_key(row): row["median_ms"]
               for row in rows if row["status"] == "ok"}
    for row in rows:
        for reference in ("bert_a", KERAS_HUB_BERT):
            ref = medians.get((reference,) + config_key(row))
            value = None
            if row["status"] == "ok" and ref:
                value = row["median_ms"] / ref
            row[f"ratio_{reference}"] = value
    return rows


def _find(rows, variant, seq_len, mode, xla, precision, flash=False, size=None):
    for row in rows:
        if (row["variant"], row["seq_len"], row["mode"], row["xla"], row["precision"],
            row.get("flash", False)) == (variant, seq_len, mode, xla, precision, flash) and (
            size is None or row["size"] == size
        ) and row["status"] == "ok":
            return row
    return None


def headline(rows, settings):
    """The issue's checks, each with its value, threshold and verdict.

    Speed: `tupe_r` training-step median over `bert_a`'s and keras-hub BERT's,
    with XLA, at every sequence length run. XLA speed-up: `tupe_r`'s median
    without XLA over with, per mode. Memory: `huang_m3` over `huang_m4` peak at
    the longest sequence (training step, XLA on if run, else off). These use
    the first `--flash` setting run. Then the issue's GPU targets
    (`gpu_targets`), per flash setting.
    """
    checks = []
    seq_lens = sorted(settings["seq_lens"])
    flash = settings.get("flash", [False])[0]
    for precision in settings["precisions"]:
        for reference in ("bert_a", KERAS_HUB_BERT):
            for seq_len in seq_lens:
                a = _find(rows, "tupe_r", seq_len, "train", True, precision, flash)
                b = _find(rows, reference, seq_len, "train", True, precision, flash)
                check = dict(kind="speed", name=f"tupe_r / {reference}", seq_len=seq_len,
                             mode="train", xla=True, precision=precision,
                             threshold=SPEED_THRESHOLD, value=None, verdict="n/a")
                if a and b:
                    check["value"] = a["median_ms"] / b["median_ms"]
                    # The spread of the ratio: best case vs worst case of the repeats.
                    check["range"] = [a["min_ms"] / b["max_ms"], a["max_ms"] / b["min_ms"]]
                    # Less sensitive to other processes: fastest steps, CPU time.
                    check["ratio_of_min"] = a["min_ms"] / b["min_ms"]
                    check["ratio_of_cpu_time"] = a["cpu_median_ms"] / b["cpu_median_ms"]
                    check["verdict"] = "PASS" if check["value"] <= SPEED_THRESHOLD else "FAIL"
                checks.append(check)
        for mode in settings["modes"]:
            for seq_len in seq_lens:
                on = _find(rows, "tupe_r", seq_len, mode, True, precision, flash)
                off = _find(rows, "tupe_r", seq_len, mode, False, precision, flash)
                check = dict(kind="xla_speedup", name="tupe_r XLA speed-up (off / on)",
                             seq_len=seq_len, mode=mode, precision=precision,
                             threshold=None, value=None, verdict="reported")
                if on and off:
                    check["value"] = off["median_ms"] / on["median_ms"]
                checks.append(check)
        longest = seq_lens[-1]
        xla = True in settings["xla"]
        m3 = _find(rows, "huang_m3", longest, "train", xla, precision, flash)
        m4 = _find(rows, "huang_m4", longest, "train", xla, precision, flash)
        check = dict(kind="memory", name="huang_m3 / huang_m4 peak memory", seq_len=longest,
                     mode="train", xla=xla, precision=precision, threshold=MEMORY_THRESHOLD,
                     value=None, verdict="n/a")
        if m3 and m4 and m3.get("peak_mb") and m4.get("peak_mb"):
            check["value"] = m3["peak_mb"] / m4["peak_mb"]
            check["detail"] = f"{m3['peak_mb']:,.0f} / {m4['peak_mb']:,.0f} MiB"
            check["verdict"] = "PASS" if check["value"] <= MEMORY_THRESHOLD else "FAIL"
        elif any(r["variant"] == "huang_m3" and r["seq_len"] == longest and r["mode"] == "train"
                 and r["xla"] == xla and r["precision"] == precision and r["status"] != "ok"
                 for r in rows):
            check["verdict"] = "FAIL"  # method 3 itself failed (e.g. out of memory)
        checks.append(check)
    for check in checks:
        if check["seq_len"] not in HEADLINE_SEQ_LENS:
            check["note"] = f"the issue's thresholds are for sequences {list(HEADLINE_SEQ_LENS)}"
    return checks + gpu_targets(rows, settings)


def gpu_targets(rows, settings):
    """The issue's GPU targets at base size, sequence 512, mixed_bfloat16, training, XLA.

    One check per target and flash setting run (flash off only when none was
    run); "n/a (not measured)" where a row is missing.
    """
    checks = []
    t = GPU_TARGET
    for flash in settings.get("flash", [False]):
        for name, variant, reference, direction, threshold in GPU_TARGETS:
            a = _find(rows, variant, t["seq_len"], "train", True, t["precision"], flash,
                      t["size"])
            b = reference and _find(rows, reference, t["seq_len"], "train", True,
                                    t["precision"], flash, t["size"])
            check = dict(kind="gpu_target", name=name, size=t["size"], seq_len=t["seq_len"],
                         mode="train", xla=True, precision=t["precision"], flash=flash,
                         direction=direction, threshold=threshold, value=None,
                         verdict="n/a (not measured)")
            if reference is None and a and a.get("mfu") is not None:
                check["value"] = a["mfu"]
                check["detail"] = (f"{a['model_tflops_per_s']:,.1f} / {a['peak_tflops']:,.1f} "
                                   "TFLOP/s")
            elif reference is None and a:
                check["verdict"] = "n/a (no peak: pass --peak-tflops)"
            elif a and b:
                check["value"] = a["median_ms"] / b["median_ms"]
                check["range"] = [a["min_ms"] / b["max_ms"], a["max_ms"] / b["min_ms"]]
            if check["value"] is not None:
                passed = (check["value"] <= threshold if direction == "<="
                          else check["value"] >= threshold)
                check["verdict"] = "PASS" if passed else "FAIL"
            checks.append(check)
    return checks


# === Machine and versions (parent side: no framework import) ===
def machine_info():
    info = dict(platform=platform.platform(), machine=platform.machine(),
                cpu_model=None, cpu_count=os.cpu_count(), cpu_flags_low_precision=None,
                memory_total_gb=None, load_average_start=None)
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = len(os.sched_getaffinity(0))
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name") and info["cpu_model"] is None:
                    info["cpu_model"] = line.split(":", 1)[1].strip()
    except OSError:
        info["cpu_model"] = platform.processor() or None
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    info["memory_total_gb"] = round(int(line.split()[1]) / 1024 / 1024, 1)
    except OSError:
        pass
    if hasattr(os, "getloadavg"):
        info["load_average_start"] = [round(x, 2) for x in os.getloadavg()]
    return info


def low_precision_cpu_flags():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    flags = set(line.split(":", 1)[1].split())
                    wanted = ("avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile")
                    return ", ".join(f for f in wanted if f in flags)
    except OSError:
        pass
    return ""


def git_state():
    def git(*command):
        result = subprocess.run(["git", *command], cwd=REPO_ROOT, capture_output=True,
                                text=True, check=False)
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    return dict(commit=commit, dirty=None if status is None else bool(status))


# === Subprocesses ===
def _child_env():
    env = dict(os.environ)
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    return env


def _run_child(flags, timeout):
    with tempfile.TemporaryDirectory(prefix="keras_tupe_bench_") as tmp:
        out = Path(tmp) / "result.json"
        command = [sys.executable, "-m", "benchmarks.encoders", *flags, "--worker-out", str(out)]
        start = time.perf_counter()
        try:
            process = subprocess.run(command, cwd=REPO_ROOT, env=_child_env(), capture_output=True,
                                     text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s", time.perf_counter() - start
        wall = time.perf_counter() - start
        if out.exists():
            return json.loads(out.read_text()), None, wall
        if process.returncode < 0:
            reason = f"killed by signal {-process.returncode}"
            if process.returncode == -9:
                reason += " (out of memory?)"
        else:
            reason = f"exit status {process.returncode}"
        tail = " | ".join(process.stderr.strip().splitlines()[-3:])
        return None, f"{reason}: {tail}"[:600], wall


def probe_backend(timeout=600):
    result, error, _ = _run_child(["--probe"], timeout)
    if result is None:
        raise RuntimeError(f"Could not start the backend: {error}")
    return result


def run_group(jobs, timeout):
    """Runs `jobs` in one fresh process; a crash is recorded for each of them."""
    results, error, wall = _run_child(["--worker", json.dumps(jobs)], timeout * len(jobs))
    if results is None:
        status = "out_of_memory" if "out of memory" in error else "failed"
        results = [dict(job, status=status, error=error) for job in jobs]
    for result in results:
        result["wall_s"] = round(wall / len(jobs), 2)
    return results


# === Worker side (fresh process) ===
def _current_rss_mb():
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def _maxrss_mb():
    value = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return value / MiB if sys.platform == "darwin" else value / 1024


class AllocatorMemory:
    """The backend allocator's bytes: in use now, and the peak since `mark()`.

    TensorFlow keeps these statistics for the CPU as well as the GPU (every
    buffer of a step, XLA's included, comes from its allocator); JAX and
    PyTorch for a GPU only. `for_backend` returns `None` where there are none.
    """

    def __init__(self, kind, in_use, peak, reset):
        self.kind = kind
        self._in_use, self._peak, self._reset = in_use, peak, reset
        self.base = 0

    @classmethod
    def for_backend(cls, backend):
        try:
            return cls._for_backend(backend)
        except Exception:  # noqa: BLE001 (no statistics: fall back to the RSS)
            return None

    @classmethod
    def _for_backend(cls, backend):
        if backend == "tensorflow":
            import tensorflow as tf

            device = "GPU:0" if tf.config.list_physical_devices("GPU") else "CPU:0"
            info = tf.config.experimental.get_memory_info
            info(device)  # raises where the device keeps no statistics
            return cls(f"tensorflow_allocator_{device.split(':')[0].lower()}",
                       lambda: info(device)["current"], lambda: info(device)["peak"],
                       lambda: tf.config.experimental.reset_memory_stats(device))
        if backend == "jax":
            import jax

            device = jax.devices()[0]
            if device.platform == "cpu" or not device.memory_stats():
                return None
            # JAX cannot reset its peak: the peak over the process's life is used
            # (fresh process per measurement; the first step peaks as the others).
            return cls("jax_allocator_gpu", lambda: device.memory_stats()["bytes_in_use"],
                       lambda: device.memory_stats()["peak_bytes_in_use"], lambda: None)
        if backend == "torch":
            import torch

            if not torch.cuda.is_available():
                return None
            return cls("torch_cuda_allocator", torch.cuda.memory_allocated,
                       torch.cuda.max_memory_allocated, torch.cuda.reset_peak_memory_stats)
        return None

    def mark(self):
        """Resets the peak; what is in use now (weights, optimizer state) is the base."""
        self._reset()
        self.base = self._in_use()
        return self.base / MiB

    def peak_above_mark_mb(self):
        return (self._peak() - self.base) / MiB

    def peak_mb(self):
        return self._peak() / MiB


def _versions():
    import keras
    import numpy as np

    backend = keras.backend.backend()
    versions = dict(python=platform.python_version(), keras=keras.__version__,
                    backend=backend, numpy=np.__version__)
    module = {"tensorflow": "tensorflow", "jax": "jax", "torch": "torch"}.get(backend)
    if module:
        versions[f"{backend}_version"] = __import__(module).__version__
    if backend == "jax":
        import jaxlib

        versions["jaxlib"] = jaxlib.__version__
    try:
        import keras_hub

        versions["keras_hub"] = keras_hub.__version__
    except Exception as error:  # noqa: BLE001 (any import failure: record it)
        versions["keras_hub"] = f"not importable: {type(error).__name__}: {error}"
    return versions


def _presets_module():
    """`keras_tupe.models.presets`, read without importing the package.

    (The package needs keras_hub, and the parent imports no framework; the
    absence of keras_hub is reported per measurement.)
    """
    import importlib.util

    path = REPO_ROOT / "keras_tupe" / "models" / "presets.py"
    spec = importlib.util.spec_from_file_location("_keras_tupe_presets", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _preset_variants():
    """`keras_tupe.models.presets.VARIANTS`."""
    return _presets_module().VARIANTS


def probe():
    """Backend, versions and accelerators, for the parent's defaults and header."""
    import keras

    backend = keras.backend.backend()
    gpus = []
    if backend == "tensorflow":
        import tensorflow as tf

        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            capability = details.get("compute_capability")
            gpus.append(dict(name=details.get("device_name", device.name),
                             compute_capability=(".".join(map(str, capability))
                                                 if capability else None)))
    elif backend == "jax":
        import jax

        for device in jax.devices():
            if device.platform == "gpu":
                gpus.append(dict(name=device.device_kind,
                                 compute_capability=getattr(device, "compute_capability", None)))
    elif backend == "torch":
        import torch

        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            gpus.append(dict(name=torch.cuda.get_device_name(i),
                             compute_capability=f"{major}.{minor}"))
    fast = []
    if gpus:
        try:
            capability = float(gpus[0]["compute_capability"])
        except (TypeError, ValueError):
            capability = 8.0  # unknown: assume a recent GPU
        fast = [p for p, need in (("mixed_bfloat16", 8.0), ("mixed_float16", 7.0))
                if capability >= need]
    keras_hub_ok, keras_hub_error = True, None
    try:
        import keras_hub  # noqa: F401
    except Exception as error:  # noqa: BLE001
        keras_hub_ok, keras_hub_error = False, f"{type(error).__name__}: {error}"
    return dict(backend=backend, gpus=gpus, fast_mixed_precisions=fast,
                cpu_low_precision_flags=low_precision_cpu_flags(), versions=_versions(),
                keras_hub=keras_hub_ok, keras_hub_error=keras_hub_error,
                preset_variants=list(_preset_variants()))


def _on_gpu():
    import keras

    backend = keras.backend.backend()
    if backend == "jax":
        import jax

        return jax.devices()[0].platform == "gpu"
    if backend == "tensorflow":
        import tensorflow as tf

        return bool(tf.config.list_physical_devices("GPU"))
    if backend == "torch":
        import torch

        return torch.cuda.is_available()
    return False


def attention_choice(variant, flash, mode, dropout, on_gpu):
    """What `--flash` sets and what the attention then runs, for one measurement.

    Returns `attention_implementation` (the keras_tupe setting; keras_hub_bert:
    Keras's `MultiHeadAttention`), `attention_path` (what a step runs) and
    `flash_attention` (what `keras.ops.dot_product_attention` is asked: never
    True on a CPU, where the flash kernels do not exist; "backend" where the
    backend chooses). keras_tupe's "fused" is refused for BERT-A^d and Shaw /
    methods 1-4 (no scaled dot product plus bias), so those run "einsum"; both
    fused paths (keras_tupe's and keras-hub's, i.e. Keras's MultiHeadAttention)
    fall back to einsums while attention dropout is active.
    """
    fields = {} if variant == KERAS_HUB_BERT else _presets_module().VARIANTS[variant]
    if variant == KERAS_HUB_BERT:
        implementation = "keras MultiHeadAttention"
        # Keras's MultiHeadAttention calls dot_product_attention whenever its
        # dropout is 0, even in inference (it checks the rate, not `training`).
        fused = dropout == 0
        flash_attention = bool(flash and on_gpu and fused)
        return implementation, "dot_product_attention" if fused else "einsum", flash_attention
    applies = not (fields.get("absolute_correlation") == "untied_cross"
                   or fields.get("relative_position", "none") not in ("none", "t5_bias"))
    implementation = "fused" if flash and applies else "einsum"
    fused = implementation == "fused" and not (mode == "train" and dropout > 0)
    # keras_tupe passes flash_attention=None: the backend picks a flash kernel on a GPU.
    return implementation, "fused" if fused else "einsum", "backend" if fused and on_gpu else False


def build_encoder(variant, size, vocabulary_size=None, activation=None,
                  attention_implementation=None, dropout=None):
    """The backbone and a function mapping TF-Hub-named inputs to its inputs.

    keras-hub's BERT gets every size field of `bert_a_<size>`, read from the
    built keras_tupe config so both always agree.
    """
    from keras_tupe import TupeBackbone

    overrides = {}
    if vocabulary_size:
        overrides["vocabulary_size"] = vocabulary_size
    if dropout is not None:
        overrides["dropout"] = dropout
    if variant != KERAS_HUB_BERT:
        if activation:
            overrides["activation"] = activation
        if attention_implementation:  # keras_hub_bert: set by keras.config (_set_attention)
            overrides["attention_implementation"] = attention_implementation
        backbone = TupeBackbone.from_preset(f"{variant}_{size}", **overrides)
        return backbone, (lambda inputs: inputs), backbone.activation
    import keras_hub

    from keras_tupe.models.conversion import keras_hub_inputs

    reference = TupeBackbone.from_preset(f"bert_a_{size}", **overrides)
    config = reference.get_config()
    del reference
    backbone = keras_hub.models.BertBackbone(
        vocabulary_size=config["vocabulary_size"],
        num_layers=config["num_layers"],
        num_heads=config["num_heads"],
        hidden_dim=config["hidden_dim"],
        intermediate_dim=config["intermediate_dim"],
        dropout=config["dropout"],
        max_sequence_length=config["max_sequence_length"],
        num_segments=config["num_segments"],
    )
    return backbone, keras_hub_inputs, "gelu_approximate"


def _score_loss(y_true, y_pred):
    """The model's output is already the per-example loss."""
    del y_true
    return y_pred


def build_benchmark_model(job):
    """(model, step function, parameter count, activation) for one measurement."""
    import keras
    import numpy as np
    from keras import ops

    from keras_tupe.optimization import create_optimizer

    backbone, adapt, activation = build_encoder(
        job["variant"], job["size"], job["vocabulary_size"], job["activation"],
        job.get("attention_implementation"), job.get("dropout"),
    )
    n = job["seq_len"]
    inputs = {name: keras.Input(shape=(n,), dtype="int32", name=name) for name in INPUT_NAMES}
    outputs = backbone(adapt(inputs))
    sequence, pooled = outputs["sequence_output"], outputs["pooled_output"]
    rng = np.random.default_rng(0)
    batch = job["batch_size"]
    data = {
        "token_ids": rng.integers(1, backbone.vocabulary_size, (batch, n)).astype("int32"),
        "padding_mask": np.ones((batch, n), "int32"),
        "segment_ids": (np.arange(n)[None, :] >= n // 2).repeat(batch, 0).astype("int32"),
    }
    x = {name: ops.convert_to_tensor(value) for name, value in data.items()}
    if job["mode"] == "train":
        # Every output position reaches the loss, so XLA can prune nothing.
        square_mean = keras.layers.Lambda(
            lambda t: ops.mean(ops.square(ops.cast(t[0], "float32")), axis=(1, 2))
            + ops.mean(ops.square(ops.cast(t[1], "float32")), axis=1),
            dtype="float32", name="score",
        )
        model = keras.Model(inputs, square_mean([sequence, pooled]))
        optimizer = create_optimizer(model, LEARNING_RATE, TOTAL_STEPS, WARMUP_STEPS)
        model.compile(optimizer=optimizer, loss=_score_loss, jit_compile=job["xla"])
        y = ops.convert_to_tensor(np.zeros((batch,), "float32"))

        def step():
            return model.train_on_batch(x, y)
    else:
        model = keras.Model(inputs, {"sequence_output": sequence, "pooled_output": pooled})
        model.compile(jit_compile=job["xla"])

        def step():
            return model.predict_on_batch(x)
    return model, step, backbone.count_params(), activation


def _step_cpu_s():
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _load_average():
    return round(os.getloadavg()[0], 2) if hasattr(os, "getloadavg") else None


def _failure(job, error):
    lines = traceback.format_exc().strip().splitlines()
    kind = "out_of_memory" if "ResourceExhausted" in type(error).__name__ or (
        "out of memory" in str(error).lower()) else "failed"
    return dict(job, status=kind, error=f"{type(error).__name__}: {str(error)[:400]}",
                traceback=lines[-12:])


def _timed(step, result):
    """Times one call; returns wall ms and appends the call's CPU ms to `result`."""
    cpu = _step_cpu_s()
    start = time.perf_counter()
    step()  # returns host values (loss or outputs as NumPy): the step has finished
    elapsed = time.perf_counter() - start
    result["cpu_ms"].append((_step_cpu_s() - cpu) * 1000)
    return elapsed * 1000


def _finish_timing(result, times, cpu_count):
    result["times_ms"] = times
    result.update(timing_stats(times))
    # Busy fraction of the usable cores during the timed steps: lower than the
    # same model's usual value means other processes took the CPU.
    result["cpu_median_ms"] = statistics.median(result["cpu_ms"])
    result["cpu_utilization"] = sum(result["cpu_ms"]) / (sum(times) * cpu_count)


def _usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def _set_attention(job):
    """Fills the job's attention fields (see `attention_choice`) and Keras's flash flag."""
    import keras

    dropout = 0.1 if job.get("dropout") is None else job["dropout"]  # the presets' dropout
    implementation, path, flash_attention = attention_choice(
        job["variant"], job.get("flash", False), job["mode"], dropout, _on_gpu())
    job.update(attention_implementation=implementation, attention_path=path,
               flash_attention=flash_attention)
    if flash_attention is True:
        keras.config.enable_flash_attention()
    else:
        keras.config.disable_flash_attention()
    return job


def worker(job):
    """One measurement alone in this process: builds, compiles, warms up, times, memory."""
    import keras

    keras.config.set_dtype_policy(job["precision"])
    job = _set_attention(dict(job))
    keras.utils.set_random_seed(0)
    backend = keras.backend.backend()
    cpus = _usable_cpus()
    result = dict(job, status="ok", backend=backend, load_average_start=_load_average(),
                  cpu_ms=[])
    allocator = AllocatorMemory.for_backend(backend)
    model, step, params, activation = build_benchmark_model(job)
    result.update(params=params, activation=activation)
    result["rss_after_build_mb"] = _current_rss_mb()
    start = time.perf_counter()
    step()  # trace + compile + first run (builds the optimizer state too)
    result["compile_s"] = time.perf_counter() - start
    result["xla_effective"] = bool(model.jit_compile)
    if allocator:
        result["allocated_after_compile_mb"] = allocator.mark()
    for _ in range(job["warmup"]):
        step()
    times = [_timed(step, result) for _ in range(job["repeats"])]
    _finish_timing(result, times, cpus)
    result["load_average_end"] = _load_average()
    # peak_mb ("step Δ"): the allocator's peak during the steps above what stays
    # allocated (weights, optimizer state): activations, gradients, temporaries.
    # peak_build_delta_mb: the process's whole-life peak RSS above the RSS after
    # the build (adds the optimizer state, the compiler's memory and what the
    # allocators keep); peak_abs_mb: the whole-life peak RSS.
    result["peak_abs_mb"] = _maxrss_mb()
    base = result["rss_after_build_mb"]
    result["peak_build_delta_mb"] = None if base is None else result["peak_abs_mb"] - base
    if allocator:
        result["memory_kind"] = allocator.kind
        result["peak_mb"] = allocator.peak_above_mark_mb()
        result["allocator_peak_mb"] = allocator.peak_mb()
    else:  # no allocator statistics (e.g. JAX on a CPU): the RSS figure
        result["memory_kind"] = "process_rss"
        result["peak_mb"] = result["peak_build_delta_mb"]
    return result


def worker_interleaved(jobs):
    """The variants of one configuration in this process, their steps alternating.

    Every model is built and compiled first; then each warm-up and timed
    repeat runs one step of every model, the order rotated by one each
    repeat, so a change in the machine's load hits all of them alike. Memory
    is not measured (the models share the process).
    """
    import keras

    keras.config.set_dtype_policy(jobs[0]["precision"])
    backend = keras.backend.backend()
    cpus = _usable_cpus()
    results, steps = [], []
    for job in jobs:
        keras.utils.set_random_seed(0)
        job = _set_attention(dict(job))
        result = dict(job, status="ok", backend=backend, load_average_start=_load_average(),
                      memory_kind="not measured (--interleave)", peak_mb=None, cpu_ms=[])
        try:
            model, step, params, activation = build_benchmark_model(job)
            result.update(params=params, activation=activation)
            start = time.perf_counter()
            step()
            result["compile_s"] = time.perf_counter() - start
            result["xla_effective"] = bool(model.jit_compile)
        except Exception as error:  # noqa: BLE001 (recorded, the others go on)
            result, step = _failure(job, error), None
        results.append(result)
        steps.append(step)
    live = [i for i, step in enumerate(steps) if step is not None]
    times = {i: [] for i in live}
    for repeat in range(-jobs[0]["warmup"], jobs[0]["repeats"]):
        shift = repeat % len(live) if live else 0
        for i in live[shift:] + live[:shift]:
            try:
                if repeat < 0:
                    steps[i]()
                else:
                    times[i].append(_timed(steps[i], results[i]))
            except Exception as error:  # noqa: BLE001
                results[i], steps[i] = _failure(jobs[i], error), None
        live = [i for i in live if steps[i] is not None]
    for i in live:
        _finish_timing(results[i], times[i], cpus)
        results[i]["load_average_end"] = _load_average()
    return results


def worker_main(args):
    out = Path(args.worker_out)
    if args.probe:
        out.write_text(json.dumps(probe()))
        return 0
    jobs = json.loads(args.worker)
    if len(jobs) > 1:
        results = worker_interleaved(jobs)
    else:
        try:
            results = [worker(jobs[0])]
        except Exception as error:  # noqa: BLE001 (recorded in the results, not raised)
            results = [_failure(jobs[0], error)]
    out.write_text(json.dumps(results))
    return 0


# === Report ===
def _fmt(value, digits=1, suffix=""):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def _percent(fraction):
    return None if fraction is None else 100 * fraction


def _attention_text(row):
    if not row.get("attention_implementation"):
        return "–"
    return (f"{row['attention_implementation']} → {row['attention_path']}, flash_attention "
            f"{row['flash_attention']}")


def render_markdown(report):
    rows = report["rows"]
    memory_kinds = {r["memory_kind"] for r in rows if r.get("memory_kind")}
    s = report["settings"]
    m = report["machine"]
    v = report["versions"]
    lines = [
        f"# Encoder benchmark: {s['size']} presets and keras-hub BERT ({s['backend']}, "
        f"{'GPU' if s['device'] == 'gpu' else 'CPU'})",
        "",
        f"Command: `{report['command']}`",
        "",
        f"- Machine: {m.get('cpu_model')}, {m.get('cpu_count')} cores"
        + (f" ({m['cpus_usable']} usable)" if m.get("cpus_usable") else "")
        + f", {m.get('memory_total_gb')} GB RAM; GPU: "
        + (", ".join(g["name"] for g in m.get("gpus", [])) or "none")
        + f"; {m.get('platform')}. Load average at start {m.get('load_average_start')}, "
        f"at end {m.get('load_average_end')}.",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if k != "keras_tupe")
        + f"; keras_tupe {v['keras_tupe'].get('commit')}"
        + (" (dirty)" if v["keras_tupe"].get("dirty") else ""),
        f"- Batch {s['batch_size']}; {s['repeats']} timed steps per measurement after "
        f"{s['warmup']} warm-up steps (the first, compiling call is reported as compile s), "
        f"{s['rounds']} round(s); "
        + ("the variants of each configuration in one fresh process, their steps alternating "
           "(--interleave; memory not measured). " if s.get("interleave") else
           "each measurement in a fresh process; configurations outer loop, variants inner. ")
        + "Times: median and min–max over the repeats, IQR; ratios of medians. CPU busy: the "
        "process's CPU time over wall time × usable cores during the timed steps (low values "
        f"mean other processes took the CPU). Started {report['started']}, took "
        f"{report['duration_s'] / 60:.1f} min.",
        "- Training step: Keras `train_on_batch`, loss mean(sequence_output²) + "
        "mean(pooled_output²), `keras_tupe.optimization.create_optimizer` (AdamW, weight decay "
        "0.01, global clip 1.0); inference: `predict_on_batch` of sequence and pooled outputs.",
        "- Memory (MiB): step Δ = the backend allocator's peak during the warm-up and timed "
        "steps above what stays allocated after the compiling first call (weights, optimizer "
        "state): the step's activations, gradients and temporaries"
        + (f" ({', '.join(sorted(memory_kinds))})" if memory_kinds else "")
        + "; Δ build = the process's whole-life peak RSS (`ru_maxrss`) minus its RSS after the "
        "model and inputs were built (adds the optimizer state, the compiler's memory and what "
        "the allocators keep); abs = the whole-life peak RSS, framework included. Where the "
        "backend keeps no allocator statistics (JAX on a CPU), step Δ is Δ build.",
    ]
    activations = sorted({f"{r['variant']}: {r['activation']}" for r in report["rows"]
                          if r.get("activation") and r["variant"] in ("bert_a", KERAS_HUB_BERT)})
    if activations:
        lines.append("- Feed-forward activation: " + ", ".join(activations)
                     + " (keras-hub's BERT always uses the tanh approximation).")
    params = {r["variant"]: r.get("params") for r in report["rows"] if r.get("params")}
    if "bert_a" in params and KERAS_HUB_BERT in params:
        diff = params[KERAS_HUB_BERT] - params["bert_a"]
        lines.append(f"- Parameters: keras_hub_bert {params[KERAS_HUB_BERT]:,}, bert_a "
                     f"{params['bert_a']:,} (difference {diff:+,}).")
    for note in report["notes"]:
        lines.append(f"- {note}")
    lines += ["", "## Headline", "",
              "| check | seq | precision | value | range (best–worst) or values | ratio of min "
              "| ratio of CPU time | threshold | verdict |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in report["headline"]:
        what = c["name"]
        if c["kind"] == "speed":
            what += ", training step, XLA"
        elif c["kind"] == "gpu_target":
            what += (f", target, {c['size']}, training step, XLA, flash "
                     f"{'on' if c['flash'] else 'off'}")
        elif c["kind"] == "xla_speedup":
            what += f", {c['mode']}"
        else:
            what += f", training step, XLA {'on' if c['xla'] else 'off'}"
        value = _fmt(c["value"], 3) if c["value"] is not None else "–"
        if c["kind"] == "gpu_target" and c["name"].endswith("MFU") and c["value"] is not None:
            value = _fmt(_percent(c["value"]), 1, "%")
        spread = (f"{c['range'][0]:.3f}–{c['range'][1]:.3f}" if c.get("range")
                  else c.get("detail", ""))
        threshold = (f"{'≥' if c.get('direction') == '>=' else '≤'} {c['threshold']}"
                     if c["threshold"] else "")
        verdict = c["verdict"] + (" *" if c.get("note") else "")
        lines.append(f"| {what} | {c['seq_len']} | {c['precision']} | {value} | {spread} | "
                     f"{_fmt(c.get('ratio_of_min'), 3)} | {_fmt(c.get('ratio_of_cpu_time'), 3)} | "
                     f"{threshold} | {verdict} |")
    lines += ["", "Value: the ratio of medians, which the verdict uses. Range: fastest over "
              "slowest step and back. Ratio of min and of CPU time (median process CPU time per "
              "step): less sensitive to other processes on the machine; where they disagree "
              "with the value, the machine was busy."]
    if any(c.get("note") for c in report["headline"]):
        lines += ["", f"\\* The issue's thresholds are for sequences {list(HEADLINE_SEQ_LENS)}; "
                  "this run used others."]
    lines += ["", "## Results", ""]
    keys = sorted({config_key(r) for r in rows},
                  key=lambda k: (PRECISIONS.index(k[3]), k[1] != "train", not k[2], k[4], k[0]))
    order = {name: i for i, name in enumerate(s["variants"])}
    peaks = sorted({f"{r['precision']}: {r['peak_tflops_source']}" for r in rows
                    if r.get("peak_tflops_source")})
    if peaks:
        lines += ["Throughput: tokens/s = batch × sequence / median step; TFLOP/s = model FLOPs "
                  "of the step (`benchmarks.encoders.model_flops_per_token`: 3 × forward for "
                  "training, encoder layers and positional terms, no embeddings) / median step; "
                  "MFU = TFLOP/s / peak. Peak: " + "; ".join(peaks) + ". Device peak MB: the "
                  "backend allocator's whole-life peak (JAX: "
                  "`memory_stats()['peak_bytes_in_use']` on a GPU; – where it keeps none). "
                  "Attention: the implementation set, → the path a step runs, and "
                  "flash_attention asked of dot_product_attention.", ""]
    for key in keys:
        seq_len, mode, xla, precision, flash = key
        lines += [f"### {'training step' if mode == 'train' else 'inference'}, "
                  f"sequence {seq_len}, XLA {'on' if xla else 'off'}, {precision}, "
                  f"flash {'on' if flash else 'off'}",
                  "",
                  "| variant | params | median ms | min–max ms | IQR ms | × bert_a | "
                  "× keras_hub_bert | tokens/s | TFLOP/s | MFU | step Δ MB | Δ build MB | abs MB "
                  "| device peak MB | compile s | CPU busy | attention |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: | ---: | ---: | ---: | ---: | --- |"]
        group = sorted((r for r in rows if config_key(r) == key),
                       key=lambda r: order.get(r["variant"], len(order)))
        for r in group:
            params_text = f"{r['params']:,}" if r.get("params") else "–"
            if r["status"] != "ok":
                lines.append(f"| {r['variant']} | {params_text} | {r['status'].upper()}: "
                             f"{r.get('error', '')[:120].replace('|', '/')} "
                             "| | | | | | | | | | | | | | |")
                continue
            xla_mark = "" if r["xla_effective"] == r["xla"] else " (XLA not applied)"
            lines.append(
                f"| {r['variant']}{xla_mark} | {params_text} | {_fmt(r['median_ms'])} | "
                f"{_fmt(r['min_ms'])}–{_fmt(r['max_ms'])} | {_fmt(r['iqr_ms'])} | "
                f"{_fmt(r['ratio_bert_a'], 3)} | {_fmt(r['ratio_keras_hub_bert'], 3)} | "
                f"{_fmt(r.get('tokens_per_s'), 0)} | {_fmt(r.get('model_tflops_per_s'), 3)} | "
                f"{_fmt(_percent(r.get('mfu')), 1, '%') if r.get('mfu') is not None else 'n/a'} | "
                f"{_fmt(r.get('peak_mb'), 0)} | {_fmt(r.get('peak_build_delta_mb'), 0)} | "
                f"{_fmt(r.get('peak_abs_mb'), 0)} | {_fmt(r.get('allocator_peak_mb'), 0)} | "
                f"{_fmt(r['compile_s'], 1)} | "
                f"{_fmt(_percent(r.get('cpu_utilization')), 0, '%')} | "
                f"{_attention_text(r)} |")
        lines.append("")
    return "\n".join(lines)


def write_report(report, out):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out.with_name(out.name + ".json"), out.with_name(out.name + ".md")
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    md_path.write_text(render_markdown(report) + "\n")
    return json_path, md_path


# === Main ===
def main(argv=None):
    args = parse_args(argv)
    if args.worker_out:
        return worker_main(args)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    start = time.perf_counter()
    machine = machine_info()
    print("Probing the backend ...", file=sys.stderr, flush=True)
    probe_result = probe_backend()
    if tuple(probe_result["preset_variants"]) != VARIANT_NAMES:
        raise SystemExit(
            "benchmarks.encoders.VARIANT_NAMES is out of date with keras_tupe.models.presets: "
            f"{probe_result['preset_variants']}"
        )
    settings, notes, out = resolve_settings(args, probe_result)
    existing = [p for p in (Path(f"{out}.json"), Path(f"{out}.md")) if p.exists()]
    if existing and not args.overwrite:
        raise SystemExit(f"{existing[0]} exists: pass --overwrite to replace it, or another "
                         "--out.")
    # Each finished measurement is appended here at once, so a stopped sweep keeps its rows.
    partial = Path(f"{out}.partial.jsonl")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text("")
    machine["gpus"] = probe_result["gpus"]
    machine["cpu_flags_low_precision"] = probe_result["cpu_low_precision_flags"]
    versions = dict(probe_result["versions"], keras_tupe=git_state())
    variants = settings["variants"]
    if not probe_result["keras_hub"] and KERAS_HUB_BERT in variants:
        variants.remove(KERAS_HUB_BERT)
    jobs = plan_jobs(settings)
    print(f"{len(jobs)} measurements ({len(variants)} variants); results -> {out}.json/.md",
          file=sys.stderr, flush=True)
    results = []
    groups = [[job] for job in jobs]
    if settings["interleave"]:  # one process per configuration (flash off and on) and round
        groups = []
        for job in jobs:
            if groups and (groups[-1][0]["round"],) + config_key(groups[-1][0])[:4] == (
                (job["round"],) + config_key(job)[:4]
            ):
                groups[-1].append(job)
            else:
                groups.append([job])
    for group in groups:
        for result in run_group(group, settings["job_timeout_s"]):
            result["order"] = len(results)
            results.append(result)
            with partial.open("a") as f:
                f.write(json.dumps(result) + "\n")
            elapsed = time.perf_counter() - start
            eta = elapsed / len(results) * (len(jobs) - len(results))
            status = (
                f"{result['median_ms']:.1f} ms (compile {result['compile_s']:.1f} s, "
                f"step Δ {_fmt(result.get('peak_mb'), 0)} MB, "
                f"CPU busy {_fmt(_percent(result.get('cpu_utilization')), 0, '%')})"
                if result["status"] == "ok"
                else f"{result['status'].upper()}: {result.get('error', '')[:160]}")
            print(f"[{len(results)}/{len(jobs)}] {result['variant']:<15} "
                  f"seq {result['seq_len']:<4} {result['mode']:<5} "
                  f"xla={'on ' if result['xla'] else 'off'} {result['precision']}: "
                  f"{status}  [{result['wall_s']:.0f} s, ETA {eta / 60:.0f} min]",
                  file=sys.stderr, flush=True)
    rows = add_throughput(add_ratios(merge_rounds(results)), settings, probe_result["gpus"],
                          settings["peak_tflops"])
    machine["load_average_end"] = ([round(x, 2) for x in os.getloadavg()]
                                   if hasattr(os, "getloadavg") else None)
    report = dict(
        command="python -m benchmarks.encoders " + " ".join(
            shlex.quote(a) for a in (sys.argv[1:] if argv is None else argv)),
        started=started,
        duration_s=round(time.perf_counter() - start, 1),
        machine=machine,
        versions=versions,
        settings=settings,
        notes=notes,
        headline=None,
        rows=rows,
        raw=results,
    )
    report["headline"] = headline(rows, settings)
    json_path, md_path = write_report(report, out)
    partial.unlink()
    print(f"Wrote {json_path} and {md_path}", file=sys.stderr)
    for check in report["headline"]:
        value = "–" if check["value"] is None else f"{check['value']:.3f}"
        print(f"  {check['name']} (seq {check['seq_len']}, {check.get('mode', '')}, "
              f"{check['precision']}): {value} {check['verdict']}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    # training.cli's one-line errors, without the TensorFlow import of `training`'s quiet
    # start (which sets the quiet log level and CUDA devices its workers inherit): the
    # parent process imports no framework.
    sys.modules["tensorflow"] = None  # quiet_tensorflow skips its import
    from training.cli import run

    del sys.modules["tensorflow"]
    sys.exit(run(main))
