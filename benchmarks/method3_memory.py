"""Peak memory and time of Huang's method 3: the chunked layer against method 4 and the old einsum.

One forward + backward pass (gradients of every weight of one
`QKRMultiplicativeAttention` layer, loss = mean(output²)) for each of:

- `method3`: the layer as it is (query chunks, custom gradient);
- `method4`: the layer with `method="method4"`, the memory target (≤ 2x);
- `method3_einsum`: method 3 as one `einsum("bqhd,bkhd,qkd->bhqk")` over the
  gathered `(n, n, d_h)` table, the formula the layer used before; its
  `(B, n, h, n, d_h)` product is what the chunked version avoids.

    python -m benchmarks.method3_memory                       # TF eager, graph and XLA
    KERAS_BACKEND=jax python -m benchmarks.method3_memory     # JAX eager and jit (xla)
    python -m benchmarks.method3_memory --seq-len 128 --repeats 1   # quick

At the defaults (batch 8, 4 heads, hidden 256, n 512) `method3_einsum` needs
about 6.5 GB of RAM and tens of seconds a step on a CPU; leave it out with
`--formulas method3 method4` on a small machine.

Method: each (formula, mode) runs twice, each time in a fresh
subprocess: once for memory, once for time. The child imports the backend,
builds the layer and the inputs, and runs the step once (tracing and XLA
compilation), then `--repeats` more steps.

- Memory run: glibc gets a fixed mmap threshold (`MALLOC_MMAP_THRESHOLD_`) and
  TensorFlow's oneDNN kernels are off, so freed buffers go back to the system
  (oneDNN's allocator keeps them) and the resident set follows live memory.
  After the first step the child calls `malloc_trim` and resets the kernel's
  peak-RSS mark (`/proc/self/clear_refs`). `peak Δ` is the peak resident set
  during the later steps minus the resident set before them (compilation
  excluded); `peak Δ life` is `ru_maxrss` minus the resident set after imports,
  layer and inputs (the first step and its compilation included). With JAX on
  an accelerator, `memory_stats()["peak_bytes_in_use"]` replaces `peak Δ`.
- Time run: the default environment (oneDNN on); the first step (with
  compilation) and the median of the later ones.
"""

import argparse
import ctypes
import json
import os
import platform
import resource
import shlex
import subprocess
import sys
import time

# === Defaults ===
BATCH_SIZE = 8
NUM_HEADS = 4
HIDDEN_DIM = 256
SEQ_LEN = 512
MAX_RELATIVE_DISTANCE = 512
REPEATS = 3
FORMULAS = ("method3", "method4", "method3_einsum")
# eager: op by op; graph: tf.function without XLA (TensorFlow only; what Keras
# uses on a CPU-only machine); xla: tf.function(jit_compile=True) or jax.jit.
MODES = {"tensorflow": ("eager", "graph", "xla"), "jax": ("eager", "xla")}
CHILD_TIMEOUT_S = 1800


def parse_args(argv=None):
    parser = argparse.ArgumentParser(prog="python -m benchmarks.method3_memory",
                                     description=__doc__.splitlines()[0])
    from training.cli import one_line_errors

    one_line_errors(parser)  # the parser's own errors: one line
    parser.add_argument("--batch-size", type=int, default=BATCH_SIZE)
    parser.add_argument("--num-heads", type=int, default=NUM_HEADS)
    parser.add_argument("--hidden-dim", type=int, default=HIDDEN_DIM)
    parser.add_argument("--seq-len", type=int, default=SEQ_LEN)
    parser.add_argument("--max-relative-distance", type=int, default=MAX_RELATIVE_DISTANCE)
    parser.add_argument("--repeats", type=int, default=REPEATS, help="timed steps after the first")
    parser.add_argument("--formulas", nargs="+", default=list(FORMULAS), choices=FORMULAS)
    parser.add_argument(
        "--modes", nargs="+", choices=("eager", "graph", "xla"),
        help="how the step runs (default: every mode of the backend)",
    )
    parser.add_argument("--output", help="also write the Markdown table to this file")
    parser.add_argument("--child", help=argparse.SUPPRESS)  # JSON config of one measurement
    return parser.parse_args(argv)


# --- Child: one measurement ------------------------------------------------------------------


def _rss_mib(field):
    """`VmRSS` or `VmHWM` of this process, in MiB."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _release_and_reset_peak():
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except OSError:
        pass
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")  # Resets VmHWM to the current RSS.


def _one_einsum_layer_class():
    """The layer with method 3 as the single einsum it used before the chunked version."""
    import math

    from keras import ops

    from keras_tupe.layers import QKRMultiplicativeAttention
    from keras_tupe.layers.qkr_multiplicative_attention import clipped_relative_positions

    class OneEinsumMethod3(QKRMultiplicativeAttention):
        def attention_logits(self, query, key):
            k = self.max_relative_distance
            relative = clipped_relative_positions(ops.shape(query)[1], ops.shape(key)[1], k)
            query = query * (1.0 / math.sqrt(self.head_dim))
            embeddings = ops.take(self.relative_embeddings, relative + k, axis=0)  # (n, n, d_h)
            logits = ops.einsum("bqhd,bkhd,qkd->bhqk", query, key, embeddings)  # (B, h, n, n)
            return ops.cast(logits, "float32")

    return OneEinsumMethod3


def _step_function(layer, mode):
    """`step(inputs)` → (loss, gradients of the trainable weights), as backend tensors."""
    import keras
    from keras import ops

    backend = keras.backend.backend()
    if backend == "tensorflow":
        import tensorflow as tf

        def step(inputs):
            with tf.GradientTape() as tape:
                loss = ops.mean(ops.square(layer(inputs)))
            return loss, tape.gradient(loss, layer.trainable_variables)

        return step if mode == "eager" else tf.function(step, jit_compile=mode == "xla")
    if backend == "jax":
        import jax

        trainable = [v.value for v in layer.trainable_variables]
        others = [v.value for v in layer.non_trainable_variables]

        def loss_fn(trainable, inputs):
            outputs, _ = layer.stateless_call(trainable, others, inputs)
            return ops.mean(ops.square(outputs))

        grad_fn = jax.value_and_grad(loss_fn)
        if mode == "graph":
            raise ValueError("JAX has no graph mode apart from jit: use eager or xla.")
        grad_fn = jax.jit(grad_fn) if mode == "xla" else grad_fn
        return lambda inputs: grad_fn(trainable, inputs)
    raise ValueError(f"Unsupported backend for this benchmark. Received: {backend}")


def _block(values):
    from keras import ops

    return [ops.convert_to_numpy(v) for v in values]


def run_child(config):
    import keras
    import numpy as np

    from keras_tupe.layers import QKRMultiplicativeAttention

    keras.utils.set_random_seed(0)
    formula = config["formula"]
    if formula == "method3_einsum":
        layer = _one_einsum_layer_class()(
            config["num_heads"], method="method3",
            max_relative_distance=config["max_relative_distance"],
        )
    else:
        layer = QKRMultiplicativeAttention(
            config["num_heads"], method=formula,
            max_relative_distance=config["max_relative_distance"],
        )
    shape = (config["batch_size"], config["seq_len"], config["hidden_dim"])
    inputs = keras.ops.convert_to_tensor(np.random.default_rng(0).normal(size=shape), "float32")
    layer.build(shape)
    step = _step_function(layer, config["mode"])
    baseline = _rss_mib("VmRSS")  # After imports, the layer and the inputs.

    start = time.perf_counter()
    loss, gradients = step(inputs)
    _block([loss, *gradients])
    first_s = time.perf_counter() - start

    _release_and_reset_peak()
    before_steps = _rss_mib("VmRSS")
    times = []
    for _ in range(config["repeats"]):
        start = time.perf_counter()
        loss, gradients = step(inputs)
        _block([loss, *gradients])
        times.append(time.perf_counter() - start)
    result = {
        "peak_delta_mib": _rss_mib("VmHWM") - before_steps,
        "peak_life_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024 - baseline,
        "first_s": first_s,
        "step_s": sorted(times)[len(times) // 2] if times else None,
        "loss": float(keras.ops.convert_to_numpy(loss)),
    }
    if keras.backend.backend() == "jax":
        import jax

        stats = jax.devices()[0].memory_stats()
        if stats and "peak_bytes_in_use" in stats:
            result["device_peak_mib"] = stats["peak_bytes_in_use"] / 2**20
    print("RESULT " + json.dumps(result), flush=True)


# --- Parent: the sweep ---------------------------------------------------------------------


def _measure(config, purpose):
    """Runs one child; `purpose` is "memory" (allocator set up to show the peak) or "time"."""
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"}
    if purpose == "memory":
        # A fixed threshold: every large buffer is mmapped, so freeing it returns it.
        env.update({"MALLOC_MMAP_THRESHOLD_": "131072", "TF_ENABLE_ONEDNN_OPTS": "0"})
        config = {**config, "repeats": 1}
    command = [sys.executable, "-m", "benchmarks.method3_memory", "--child", json.dumps(config)]
    try:
        done = subprocess.run(
            command, check=False, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S,
            env=env,
        )
    except subprocess.TimeoutExpired:
        return {"error": f"{purpose} run: timeout after {CHILD_TIMEOUT_S} s"}
    for line in done.stdout.splitlines():
        if line.startswith("RESULT "):
            return json.loads(line[len("RESULT "):])
    tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
    return {"error": f"{purpose} run: exit {done.returncode}: {tail[0][:120]}"}


def _versions(backend):
    from importlib.metadata import version

    names = ["keras", "tensorflow"] + (["jax", "jaxlib"] if backend == "jax" else [])
    return ", ".join(f"{name} {version(name)}" for name in names)


def main(argv=None):
    args = parse_args(argv)
    if args.child:
        run_child(json.loads(args.child))
        return
    backend = os.environ.get("KERAS_BACKEND", "tensorflow")
    head_dim = args.hidden_dim // args.num_heads
    command = [f"KERAS_BACKEND={backend}", "python", "-m", "benchmarks.method3_memory"]
    command += sys.argv[1:]
    lines = [
        f"# Method 3 memory ({backend})",
        "",
        f"Command: `{shlex.join(command)}`  ",
        (
            f"Machine: {platform.node()}, {platform.processor() or platform.machine()}, "
            f"{os.cpu_count()} CPUs; {_versions(backend)}  "
        ),
        (
            f"One `QKRMultiplicativeAttention`: batch {args.batch_size}, {args.num_heads} "
            f"heads, hidden {args.hidden_dim} (d_h {head_dim}), n {args.seq_len}, "
            f"k {args.max_relative_distance}; forward + backward, float32."
        ),
        "",
        (
            "| formula | mode | peak Δ (MiB) | ÷ method4 | peak Δ life (MiB) "
            "| first step (s) | step (s, median) |"
        ),
        "|---|---|---:|---:|---:|---:|---:|",
    ]
    print("\n".join(lines), flush=True)
    for mode in args.modes or MODES.get(backend, ("eager", "xla")):
        method4_peak = None
        # method4 first: the others are reported as a multiple of it.
        formulas = sorted(args.formulas, key=lambda formula: formula != "method4")
        for formula in formulas:
            config = {
                "formula": formula, "mode": mode, "batch_size": args.batch_size,
                "num_heads": args.num_heads, "hidden_dim": args.hidden_dim,
                "seq_len": args.seq_len, "max_relative_distance": args.max_relative_distance,
                "repeats": args.repeats,
            }
            memory, timing = _measure(config, "memory"), _measure(config, "time")
            cells = [formula, mode]
            if "error" in memory:
                cells += [memory["error"], "", ""]
            else:
                peak = memory.get("device_peak_mib", memory["peak_delta_mib"])
                if formula == "method4":
                    method4_peak = peak
                ratio = f"{peak / method4_peak:.2f}" if method4_peak else ""
                cells += [f"{peak:,.0f}", ratio, f"{memory['peak_life_mib']:,.0f}"]
            if "error" in timing:
                cells += [timing["error"], ""]
            else:
                step = "" if timing["step_s"] is None else f"{timing['step_s']:.3f}"
                cells += [f"{timing['first_s']:.2f}", step]
            lines.append("| " + " | ".join(cells) + " |")
            print(lines[-1], flush=True)
    if args.output:
        with open(args.output, "w") as output:
            output.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    from training.cli import run  # importing `training` quiets TensorFlow's start

    sys.exit(run(main))
