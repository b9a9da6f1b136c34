"""The command line: flags, the settings they resolve to on this machine, and the sweep."""

import argparse
import json
import sys
import time
from pathlib import Path

from benchmarks import harness
from benchmarks.encoders import flops, plan, report
from benchmarks.encoders.plan import KERAS_HUB_BERT
from benchmarks.encoders.report import PRECISIONS
from benchmarks.encoders.worker import worker_main

# === Defaults ===
DEFAULT_SIZE = {"cpu": "mini", "gpu": "base"}
DEFAULT_BATCH_SIZE = {"cpu": 8, "gpu": 32}
DEFAULT_SEQ_LENS = (128, 512)
DEFAULT_REPEATS = 10
DEFAULT_WARMUP = 2
DEFAULT_JOB_TIMEOUT_S = 1800
QUICK = dict(size="tiny", seq_lens=(32, 64), repeats=2, warmup=1)
MODES = ("train", "infer")
FLASH = {"off": [False], "on": [True], "both": [False, True]}


# === Flags and settings ===
def parse_args(argv=None):
    parser = harness.parser("benchmarks.encoders", sys.modules["benchmarks.encoders"].__doc__)
    add = parser.add_argument
    add("--size", help="preset size, a key of keras_tupe_base.presets.SIZES (default: mini on "
                       "CPU, base on GPU)")
    add("--variants", nargs="+", metavar="VARIANT",
        help=f"models to measure: keys of keras_tupe_base.presets.VARIANTS and {KERAS_HUB_BERT} "
             "(default: all of them)")
    add("--seq-lens", nargs="+", type=int,
        help=f"sequence lengths (default: {list(DEFAULT_SEQ_LENS)})")
    add("--batch-size", type=int, help="batch size (default: 8 on CPU, 32 on GPU)")
    add("--xla", choices=("both", "on", "off"), default="both",
        help="jit_compile=True, False, or both (default: both)")
    add("--precisions", nargs="+", choices=PRECISIONS,
        help="dtype policies; bfloat16 keeps the weights in bfloat16 too (default: float32, plus "
             "mixed_bfloat16 and mixed_float16 where a GPU supports them)")
    add("--flash", choices=tuple(FLASH), default="off",
        help="the keras_tupe models' attention_implementation: 'fused' "
             "(keras.ops.dot_product_attention, a flash kernel where the backend has one) for on, "
             "'einsum' for off, or both (default: off); keras_hub_bert: "
             "keras.config.enable_flash_attention() on a GPU")
    add("--dropout", type=float,
        help="dropout of every model (default: the preset's 0.1); the fused attention has no "
             "attention dropout, so a training step with dropout > 0 takes the einsum path "
             "whatever --flash says")
    add("--peak-tflops", type=float,
        help="peak TFLOP/s for the MFU column of every row (default: the dense bfloat16 peak of a "
             "known GPU for mixed_bfloat16 rows, else n/a)")
    add("--modes", nargs="+", choices=MODES, default=list(MODES),
        help="train: forward + backward + AdamW update; infer: forward (default: both)")
    add("--repeats", type=int,
        help=f"timed steps per measurement, after warm-up (default: {DEFAULT_REPEATS})")
    add("--warmup", type=int,
        help=f"untimed steps after the compiling first call (default: {DEFAULT_WARMUP})")
    add("--rounds", type=int, default=1,
        help="repeat the whole sweep this many times (variant order rotated), splitting --repeats "
             "between rounds and pooling the timings (default: 1)")
    add("--vocabulary-size", type=int, help="vocabulary of every model (default: the preset's)")
    add("--activation",
        help="feed-forward activation of the keras_tupe models (default: the preset's exact "
             "'gelu'; keras-hub's BERT always uses the tanh 'gelu_approximate')")
    add("--out", help="output path without extension "
                      "(default: docs/results/benchmarks_<backend>_<size>)")
    add("--overwrite", action="store_true",
        help="replace an existing report at --out (refused otherwise)")
    add("--job-timeout", type=float, default=DEFAULT_JOB_TIMEOUT_S,
        help="seconds before one measurement is killed and recorded as failed "
             f"(default: {DEFAULT_JOB_TIMEOUT_S})")
    add("--interleave", action="store_true",
        help="time the variants of each configuration in one process, their steps alternating "
             "(robust to a busy machine; no memory figures)")
    add("--quick", action="store_true",
        help="smoke test: --size tiny --seq-lens 32 64 --repeats 2 --warmup 1 (explicit flags "
             "still win)")
    add("--probe", action="store_true", help=argparse.SUPPRESS)  # a worker's
    args = parser.parse_args(argv)
    for name, low in (("batch_size", 1), ("repeats", 1), ("rounds", 1), ("vocabulary_size", 1),
                      ("warmup", 0)):
        value = getattr(args, name)
        if value is not None and value < low:
            parser.error(f"--{name.replace('_', '-')} must be >= {low}. Received: {value}")
    if args.dropout is not None and not 0 <= args.dropout < 1:
        parser.error(f"--dropout must be in [0, 1). Received: {args.dropout}")
    if args.peak_tflops is not None and args.peak_tflops <= 0:
        parser.error(f"--peak-tflops must be > 0. Received: {args.peak_tflops}")
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
        precisions = ["float32", *probe["fast_mixed_precisions"]]
        if device == "cpu" and probe["cpu_low_precision_flags"]:
            notes.append("Mixed precision skipped by default: no GPU was found. This CPU does "
                         "have low-precision instructions "
                         f"({probe['cpu_low_precision_flags']}), which TensorFlow's oneDNN "
                         "kernels (not XLA's) can use for bfloat16 matmuls; measure them with "
                         "--precisions float32 mixed_bfloat16.")
        elif device == "cpu":
            notes.append("Mixed precision skipped: no GPU was found, and the CPU has no "
                         "bfloat16/float16 matmul instructions (no avx512_bf16, avx512_fp16 or "
                         "AMX), so it would not be faster than float32. Force it with "
                         "--precisions.")
        elif len(precisions) < 3:
            skipped = sorted({"mixed_bfloat16", "mixed_float16"} - set(precisions))
            notes.append(f"Skipped {skipped}: the GPU's compute capability "
                         f"({probe['gpus'][0].get('compute_capability')}) has no fast "
                         "matmul for them (float16 needs 7.0, bfloat16 8.0).")
    # The presets' names come from keras_tupe_base.presets, through the probe: the
    # parent imports no framework, and keras_tupe imports Keras.
    known = probe["preset_variants"] + [KERAS_HUB_BERT]
    unknown = [name for name in args.variants or () if name not in known]
    if unknown:
        raise ValueError(f"--variants takes {known}. Received: {unknown}")
    size = args.size or quick.get("size", DEFAULT_SIZE[device])
    if size not in probe["preset_sizes"]:
        raise ValueError(f"--size takes {probe['preset_sizes']}. Received: {size!r}")
    repeats = args.repeats or quick.get("repeats", DEFAULT_REPEATS)
    settings = dict(
        backend=probe["backend"],
        device=device,
        size=size,
        variants=list(dict.fromkeys(args.variants or known)),
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
        settings["variants"].remove(KERAS_HUB_BERT)
    if settings["backend"] == "jax" and False in settings["xla"]:
        notes.append("On JAX, XLA off (`jit_compile=False`) runs the step op by op, eagerly.")
    if settings["backend"] == "torch":
        notes.append("On the torch backend `jit_compile=True` means torch.compile, not XLA.")
    out = args.out or str(harness.REPO_ROOT / "docs" / "results"
                          / f"benchmarks_{settings['backend']}_{settings['size']}")
    return settings, notes, out


# === The sweep ===
def run_sweep(jobs, settings, partial):
    """Runs the jobs, group by group, each group in a fresh process; prints each result and
    appends it to `partial` at once, so a stopped sweep keeps the rows it finished."""
    start = time.perf_counter()
    results = []
    for group in plan.group_jobs(jobs, settings["interleave"]):
        for result in plan.run_group(group, settings["job_timeout_s"]):
            result["order"] = len(results)
            results.append(result)
            with partial.open("a") as f:
                f.write(json.dumps(result) + "\n")
            elapsed = time.perf_counter() - start
            eta = elapsed / len(results) * (len(jobs) - len(results))
            status = (
                f"{result['median_ms']:.1f} ms (compile {result['compile_s']:.1f} s, "
                f"step Δ {report.fmt(result.get('peak_mb'), 0)} MB, "
                f"CPU busy {report.fmt(report.percent(result.get('cpu_utilization')), 0, '%')})"
                if result["status"] == "ok"
                else f"{result['status'].upper()}: {result.get('error', '')[:160]}")
            print(f"[{len(results)}/{len(jobs)}] {result['variant']:<15} "
                  f"seq {result['seq_len']:<4} {result['mode']:<5} "
                  f"xla={'on ' if result['xla'] else 'off'} {result['precision']}: "
                  f"{status}  [{result['wall_s']:.0f} s, ETA {eta / 60:.0f} min]",
                  file=sys.stderr, flush=True)
    return results


def main(argv=None):
    args = parse_args(argv)
    if args.worker_out:
        return worker_main(args)
    started = time.strftime("%Y-%m-%d %H:%M:%S %Z")
    start = time.perf_counter()
    machine = harness.machine_info()
    print("Probing the backend ...", file=sys.stderr, flush=True)
    probe_result = plan.probe_backend()
    settings, notes, out = resolve_settings(args, probe_result)
    existing = [p for p in (Path(f"{out}.json"), Path(f"{out}.md")) if p.exists()]
    if existing and not args.overwrite:
        raise SystemExit(f"{existing[0]} exists: pass --overwrite to replace it, or another "
                         "--out.")
    # Each finished measurement is appended here at once, so a stopped sweep keeps its rows.
    partial = Path(f"{out}.partial.jsonl")
    partial.parent.mkdir(parents=True, exist_ok=True)
    partial.write_text("")
    machine.update(gpus=probe_result["gpus"],
                   cpu_flags_low_precision=probe_result["cpu_low_precision_flags"])
    versions = dict(probe_result["versions"], keras_tupe=harness.git_state())
    jobs = plan.plan_jobs(settings)
    print(f"{len(jobs)} measurements ({len(settings['variants'])} variants); results -> "
          f"{out}.json/.md", file=sys.stderr, flush=True)
    results = run_sweep(jobs, settings, partial)
    rows = flops.add_throughput(report.add_ratios(report.merge_rounds(results)),
                                probe_result["gpus"], settings["peak_tflops"])
    machine["load_average_end"] = harness.load_averages()
    summary = dict(
        command=harness.command_line("benchmarks.encoders", argv),
        started=started, duration_s=round(time.perf_counter() - start, 1), machine=machine,
        versions=versions, settings=settings, notes=notes,
        headline=report.headline(rows, settings), rows=rows, raw=results)
    json_path, md_path = report.write_report(summary, out)
    partial.unlink()
    print(f"Wrote {json_path} and {md_path}", file=sys.stderr)
    for check in summary["headline"]:
        value = "–" if check["value"] is None else f"{check['value']:.3f}"
        print(f"  {check['name']} (seq {check['seq_len']}, {check.get('mode', '')}, "
              f"{check['precision']}): {value} {check['verdict']}", file=sys.stderr)
    return 0
