"""What every benchmark here shares: fresh processes, timing statistics, peak memory, provenance.

`run_fresh` runs each measurement in a fresh process, so no model, allocator state or XLA cache
carries into the next, and a crash or an out-of-memory kill is a recorded failure of that
measurement. `machine_info` and `git_state` run in the parent (no framework imported),
`versions` in a worker (imports Keras).
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
from pathlib import Path

from keras_tupe_base.command_line import one_line_errors  # the standard library alone

REPO_ROOT = Path(__file__).resolve().parents[1]
MiB = 1024 * 1024


# === Fresh processes ===
def parser(module, doc):
    """A benchmark's parser: `--help` shows `doc`, errors are one line, and the hidden
    `--worker SPEC --worker-out FILE` of its fresh processes (`run_fresh`)."""
    p = one_line_errors(argparse.ArgumentParser(
        prog=f"python -m {module}", description=doc,
        formatter_class=argparse.RawDescriptionHelpFormatter))
    p.add_argument("--worker", default=None, help=argparse.SUPPRESS)
    p.add_argument("--worker-out", default=None, help=argparse.SUPPRESS)
    return p


def command_line(module, argv=None):
    """The command that ran, to paste into a shell."""
    return f"python -m {module} " + shlex.join(sys.argv[1:] if argv is None else argv)


def run_fresh(module, argv, timeout=None, env=None):
    """Runs `python -m module *argv --worker-out FILE` alone; returns (result, error, wall s).

    `result` is the JSON the worker wrote to FILE, or None; then `error` says why (timeout,
    signal, exit status, the last lines of its stderr). The child runs in an empty folder
    with this checkout first on `PYTHONPATH`. `env` adds variables.
    """
    with tempfile.TemporaryDirectory(prefix="keras_tupe_bench_") as folder:
        out = Path(folder) / "result.json"
        paths = dict.fromkeys([str(REPO_ROOT), os.environ.get("PYTHONPATH")])
        child_env = {"TF_CPP_MIN_LOG_LEVEL": "2", **os.environ, **(env or {}),
                     "PYTHONPATH": os.pathsep.join(filter(None, paths))}
        command = [sys.executable, "-m", module, *argv, "--worker-out", str(out)]
        start = time.perf_counter()
        try:
            process = subprocess.run(command, cwd=folder, env=child_env, capture_output=True,
                                     text=True, timeout=timeout, check=False)
        except subprocess.TimeoutExpired:
            return None, f"timed out after {timeout:.0f} s", time.perf_counter() - start
        wall = time.perf_counter() - start
        if out.exists():
            return json.loads(out.read_text()), None, wall
    code = process.returncode
    reason = (f"killed by signal {-code}" + (" (out of memory?)" if code == -9 else "")
              if code < 0 else f"exit status {code}")
    tail = " | ".join(process.stderr.strip().splitlines()[-3:])
    return None, f"{reason}: {tail}"[:600], wall


def write_worker_result(path, result):
    """The worker's side of `run_fresh`: its result, as JSON, where the parent reads it."""
    Path(path).write_text(json.dumps(result))


# === Timing statistics ===
def quantile(values, q):
    """Linear-interpolation quantile (numpy's default) of a non-empty list."""
    ordered = sorted(values)
    position = (len(ordered) - 1) * q
    low, high = math.floor(position), math.ceil(position)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def timing_stats(times_ms):
    """Median, min, max, quartiles and IQR of step times (ms), and how many there were."""
    q1, q3 = quantile(times_ms, 0.25), quantile(times_ms, 0.75)
    return dict(median_ms=statistics.median(times_ms), min_ms=min(times_ms),
                max_ms=max(times_ms), q1_ms=q1, q3_ms=q3, iqr_ms=q3 - q1,
                repeats=len(times_ms))


def process_cpu_s():
    """User + system CPU seconds of this process so far."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def usable_cpus():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def load_averages():
    """The 1-, 5- and 15-minute load averages (other processes on the cores), or None."""
    return [round(x, 2) for x in os.getloadavg()] if hasattr(os, "getloadavg") else None


def load_average():
    """The 1-minute load average, or None."""
    return (load_averages() or [None])[0]


# === Peak memory ===
def current_rss_mb():
    rss = _proc_field("/proc/self/status", "VmRSS:")
    return None if rss is None else int(rss.split()[0]) / 1024


def maxrss_mb():
    """The process's whole-life peak resident set (`ru_maxrss`), in MiB."""
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

                if torch.cuda.is_available():
                    return cls("torch_cuda_allocator", torch.cuda.memory_allocated,
                               torch.cuda.max_memory_allocated,
                               torch.cuda.reset_peak_memory_stats)
        except Exception:  # noqa: BLE001 (no statistics: the caller falls back to the RSS)
            pass
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


# === Machine and versions ===
def _proc_field(path, prefix):
    """The value of the first line of a /proc file that starts with `prefix`, or None."""
    try:
        with open(path) as f:
            for line in f:
                if line.startswith(prefix):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return None


def machine_info():
    """CPU, cores, memory, platform and load average (no framework imported)."""
    memory = _proc_field("/proc/meminfo", "MemTotal:")
    info = dict(platform=platform.platform(), machine=platform.machine(),
                cpu_model=(_proc_field("/proc/cpuinfo", "model name")
                           if os.path.exists("/proc/cpuinfo") else platform.processor() or None),
                cpu_count=os.cpu_count(), cpu_flags_low_precision=None,
                memory_total_gb=memory and round(int(memory.split()[0]) / 1024 / 1024, 1),
                load_average_start=load_averages())
    if hasattr(os, "sched_getaffinity"):
        info["cpus_usable"] = usable_cpus()
    return info


def low_precision_cpu_flags():
    """The CPU's bfloat16 / float16 matmul instructions, comma-separated ("" if none)."""
    flags = set((_proc_field("/proc/cpuinfo", "flags") or "").split())
    wanted = ("avx512_bf16", "avx512_fp16", "amx_bf16", "amx_fp16", "amx_tile")
    return ", ".join(f for f in wanted if f in flags)


def git_state():
    """This checkout's commit and whether it has uncommitted changes (None: no git)."""
    def git(*command):
        result = subprocess.run(["git", *command], cwd=REPO_ROOT, capture_output=True,
                                text=True, check=False)
        return result.stdout.strip() if result.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    status = git("status", "--porcelain")
    return dict(commit=commit, dirty=None if status is None else bool(status))


def versions():
    """Python, Keras, its backend, NumPy and keras-hub versions (imports Keras)."""
    import keras
    import numpy as np

    backend = keras.backend.backend()
    found = dict(python=platform.python_version(), keras=keras.__version__,
                 backend=backend, numpy=np.__version__)
    if backend in ("tensorflow", "jax", "torch"):
        found[f"{backend}_version"] = __import__(backend).__version__
    if backend == "jax":
        import jaxlib

        found["jaxlib"] = jaxlib.__version__
    try:
        import keras_hub

        found["keras_hub"] = keras_hub.__version__
    except Exception as error:  # noqa: BLE001 (any import failure: record it)
        found["keras_hub"] = f"not importable: {type(error).__name__}: {error}"
    return found
