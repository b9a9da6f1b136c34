"""One measurement (or one --interleave group) in its fresh process: build, compile, time.

The parent runs `python -m benchmarks.encoders --worker JOBS --worker-out FILE`
(`plan.run_group`) and `--probe` (`plan.probe_backend`); this module is what
those run. It is the only part of the benchmark that imports a framework.
"""

import json
import statistics
import time
import traceback

from benchmarks import harness
from benchmarks.encoders.flops import row_flops_per_token
from benchmarks.encoders.plan import KERAS_HUB_BERT
from keras_tupe_base.presets import SIZES, VARIANTS

# Pre-training optimizer (TUPE Table 1); the schedule is far from its end.
LEARNING_RATE, TOTAL_STEPS, WARMUP_STEPS = 1e-4, 1_000_000, 10_000
INPUT_NAMES = ("token_ids", "padding_mask", "segment_ids")


# === Backend ===
def gpus(backend):
    """The backend's GPUs: name and compute capability of each."""
    found = []
    if backend == "tensorflow":
        import tensorflow as tf

        for device in tf.config.list_physical_devices("GPU"):
            details = tf.config.experimental.get_device_details(device)
            capability = details.get("compute_capability")
            found.append(dict(name=details.get("device_name", device.name),
                              compute_capability=(".".join(map(str, capability))
                                                  if capability else None)))
    elif backend == "jax":
        import jax

        for device in jax.devices():
            if device.platform == "gpu":
                found.append(dict(name=device.device_kind, compute_capability=getattr(
                    device, "compute_capability", None)))
    elif backend == "torch":
        import torch

        for i in range(torch.cuda.device_count()):
            major, minor = torch.cuda.get_device_capability(i)
            found.append(dict(name=torch.cuda.get_device_name(i),
                              compute_capability=f"{major}.{minor}"))
    return found


def probe():
    """Backend, versions and accelerators, for the parent's defaults and header."""
    import keras

    backend = keras.backend.backend()
    found = gpus(backend)
    fast = []
    if found:
        try:
            capability = float(found[0]["compute_capability"])
        except (TypeError, ValueError):
            capability = 8.0  # unknown: assume a recent GPU
        fast = [p for p, need in (("mixed_bfloat16", 8.0), ("mixed_float16", 7.0))
                if capability >= need]
    versions = harness.versions()  # imports keras_hub, or records why it cannot
    keras_hub_error = versions["keras_hub"].partition("not importable: ")[2] or None
    return dict(backend=backend, gpus=found, fast_mixed_precisions=fast,
                cpu_low_precision_flags=harness.low_precision_cpu_flags(),
                versions=versions, keras_hub=keras_hub_error is None,
                keras_hub_error=keras_hub_error, preset_variants=list(VARIANTS),
                preset_sizes=list(SIZES))


# === The model and its step ===
def attention_choice(variant, flash, mode, dropout, on_gpu):
    """What `--flash` sets and what the attention then runs, for one measurement.

    Returns `attention_implementation` (the keras_tupe setting; keras_hub_bert:
    Keras's `MultiHeadAttention`), `attention_path` (what a step runs) and
    `flash_attention` (what `keras.ops.dot_product_attention` is asked: never
    True on a CPU, where the flash kernels do not exist; "backend" where the
    backend chooses). keras_tupe's "fused" applies where every positional scheme
    of the variant is `fusable` in `keras_tupe.layers.schemes` (a scaled dot
    product plus a bias: not BERT-A^d, Shaw, methods 1-4 or DeBERTa, which run
    "einsum"); both fused paths (keras_tupe's and keras-hub's, i.e. Keras's
    MultiHeadAttention) fall back to einsums while attention dropout is active.
    """
    if variant == KERAS_HUB_BERT:
        implementation = "keras MultiHeadAttention"
        # Keras's MultiHeadAttention calls dot_product_attention whenever its
        # dropout is 0, even in inference (it checks the rate, not `training`).
        fused = dropout == 0
        flash_attention = bool(flash and on_gpu and fused)
        return implementation, "dot_product_attention" if fused else "einsum", flash_attention
    from keras_tupe.layers.schemes import SCHEMES

    fields = VARIANTS[variant]
    applies = all(rows[fields.get(field, "none")].fusable for field, rows in SCHEMES.items())
    implementation = "fused" if flash and applies else "einsum"
    fused = implementation == "fused" and not (mode == "train" and dropout > 0)
    # keras_tupe passes flash_attention=None: the backend picks a flash kernel on a GPU.
    return implementation, "fused" if fused else "einsum", "backend" if fused and on_gpu else False


def build_encoder(variant, size, vocabulary_size=None, activation=None,
                  attention_implementation=None, dropout=None):
    """(backbone, a function mapping the benchmark's inputs to the backbone's, activation).

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

    config = TupeBackbone.from_preset(f"bert_a_{size}", **overrides).get_config()
    backbone = keras_hub.models.BertBackbone(**{key: config[key] for key in (
        "vocabulary_size", "num_layers", "num_heads", "hidden_dim", "intermediate_dim",
        "dropout", "max_sequence_length", "num_segments")})
    return backbone, keras_hub_inputs, "gelu_approximate"


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
            dtype="float32", name="score")
        model = keras.Model(inputs, square_mean([sequence, pooled]))
        optimizer = create_optimizer(model, LEARNING_RATE, TOTAL_STEPS, WARMUP_STEPS)
        # The model's output is already the per-example loss.
        model.compile(optimizer=optimizer, loss=lambda y_true, y_pred: y_pred,
                      jit_compile=job["xla"])
        y = ops.convert_to_tensor(np.zeros((batch,), "float32"))

        def step():
            return model.train_on_batch(x, y)
    else:
        model = keras.Model(inputs, {"sequence_output": sequence, "pooled_output": pooled})
        model.compile(jit_compile=job["xla"])

        def step():
            return model.predict_on_batch(x)
    return model, step, backbone.count_params(), activation


# === Measuring ===
def _failure(job, error):
    lines = traceback.format_exc().strip().splitlines()
    kind = "out_of_memory" if "ResourceExhausted" in type(error).__name__ or (
        "out of memory" in str(error).lower()) else "failed"
    return dict(job, status=kind, error=f"{type(error).__name__}: {str(error)[:400]}",
                traceback=lines[-12:])


def _new_result(job, backend, **fields):
    """The result of `job` before it runs: its model FLOPs, the machine's load, no times."""
    flops = row_flops_per_token(job["variant"], job["size"], job["seq_len"], job["batch_size"],
                                training=job["mode"] == "train")
    return dict(job, status="ok", backend=backend, model_flops_per_token=flops,
                load_average_start=harness.load_average(), cpu_ms=[], **fields)


def _timed(step, result):
    """Times one call; returns wall ms and appends the call's CPU ms to `result`."""
    cpu = harness.process_cpu_s()
    start = time.perf_counter()
    step()  # returns host values (loss or outputs as NumPy): the step has finished
    elapsed = time.perf_counter() - start
    result["cpu_ms"].append((harness.process_cpu_s() - cpu) * 1000)
    return elapsed * 1000


def _finish_timing(result, times):
    result["times_ms"] = times
    result.update(harness.timing_stats(times))
    # Busy fraction of the usable cores during the timed steps: lower than the
    # same model's usual value means other processes took the CPU.
    result["cpu_median_ms"] = statistics.median(result["cpu_ms"])
    result["cpu_utilization"] = sum(result["cpu_ms"]) / (sum(times) * harness.usable_cpus())
    result["load_average_end"] = harness.load_average()


def _build_and_compile(job, result, memory=True):
    """Builds the job's model and runs its first (tracing, compiling) step; returns the step."""
    model, step, params, activation = build_benchmark_model(job)
    result.update(params=params, activation=activation)
    if memory:
        result["rss_after_build_mb"] = harness.current_rss_mb()
    start = time.perf_counter()
    step()  # trace + compile + first run (builds the optimizer state too)
    result["compile_s"] = time.perf_counter() - start
    result["xla_effective"] = bool(model.jit_compile)
    return step


def _set_attention(job):
    """Fills the job's attention fields (see `attention_choice`) and Keras's flash flag."""
    import keras

    dropout = 0.1 if job.get("dropout") is None else job["dropout"]  # the presets' dropout
    implementation, path, flash_attention = attention_choice(
        job["variant"], job.get("flash", False), job["mode"], dropout,
        bool(gpus(keras.backend.backend())))
    job.update(attention_implementation=implementation, attention_path=path,
               flash_attention=flash_attention)
    if flash_attention is True:
        keras.config.enable_flash_attention()
    else:
        keras.config.disable_flash_attention()
    return job


def worker(jobs):
    """The jobs of one process: one measurement, or (--interleave) the variants of one
    configuration, their steps alternating.

    Every model is built and compiled first; then each warm-up and timed repeat
    runs one step of every model, the order rotated by one each repeat, so a
    change in the machine's load hits all of them alike. A job alone also gets
    its memory figures (models sharing the process get none). A failure is
    recorded for its job; the others go on.
    """
    import keras

    keras.config.set_dtype_policy(jobs[0]["precision"])
    backend = keras.backend.backend()
    alone = len(jobs) == 1
    allocator = alone and harness.AllocatorMemory.for_backend(backend)
    memory = {} if alone else dict(memory_kind="not measured (--interleave)", peak_mb=None)
    results, steps = [], []
    for job in jobs:
        keras.utils.set_random_seed(0)
        try:
            job = _set_attention(dict(job))
            result = _new_result(job, backend, **memory)
            step = _build_and_compile(job, result, memory=alone)
        except Exception as error:  # noqa: BLE001 (recorded, the others go on)
            result, step = _failure(job, error), None
        results.append(result)
        steps.append(step)
    if allocator and steps[0]:
        results[0]["allocated_after_compile_mb"] = allocator.mark()
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
        _finish_timing(results[i], times[i])
    if alone and live:
        _add_memory(results[0], allocator)
    return results


def _add_memory(result, allocator):
    """The memory figures of a job alone: see "Peak memory" in the package's docstring."""
    result["peak_abs_mb"] = harness.maxrss_mb()
    base = result["rss_after_build_mb"]
    result["peak_build_delta_mb"] = None if base is None else result["peak_abs_mb"] - base
    if allocator:
        result["memory_kind"] = allocator.kind
        result["peak_mb"] = allocator.peak_above_mark_mb()
        result["allocator_peak_mb"] = allocator.peak_mb()
    else:  # no allocator statistics (e.g. JAX on a CPU): the RSS figure
        result["memory_kind"] = "process_rss"
        result["peak_mb"] = result["peak_build_delta_mb"]


def worker_main(args):
    result = probe() if args.probe else worker(json.loads(args.worker))
    harness.write_worker_result(args.worker_out, result)
    return 0
