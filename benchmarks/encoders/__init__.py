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

Files, one job each: `cli.py` (flags, settings, the sweep), `plan.py` (the
measurements and their fresh processes), `worker.py` (one measurement, in its
process), `report.py` (rows, ratios, headline, Markdown), `flops.py` (model
FLOPs, throughput, MFU); fresh processes, statistics, memory and provenance
come from `benchmarks.harness`.
"""

from benchmarks.encoders.cli import main, parse_args
from benchmarks.encoders.flops import model_flops_per_token, variant_flops_per_token

__all__ = ["main", "model_flops_per_token", "parse_args", "variant_flops_per_token"]
