"""Encoder speed and memory: every preset beside keras-hub's BERT of the same size.

The training step (forward + backward + AdamW update) and inference of every `keras_tupe`
variant and of `keras_hub.models.BertBackbone` with the sizes of `bert_a_<size>`, at each
sequence length, with and without XLA, in each precision, with peak memory:

    python -m benchmarks.encoders                  # CPU: --size mini, seq 128 and 512
    python -m benchmarks.encoders --quick          # smoke test (tiny, seq 32 64, 2 repeats)
    KERAS_BACKEND=jax python -m benchmarks.encoders --size base   # e.g. on a GPU

Method:
- Each (variant, sequence length, mode, XLA, precision) runs in a fresh subprocess (no
  model, allocator state or XLA cache leaks into the next; a crash or out-of-memory is that
  row's result), configurations the outer loop and variants the inner one, so compared
  models run next to each other in time (`--rounds`, `--interleave`: see their flags).
- The step is Keras's `train_on_batch` (AdamW with the pre-training settings of
  `keras_tupe.optimization.create_optimizer`) or `predict_on_batch`, jit-compiled or not,
  on fixed random inputs converted to backend tensors once. The first call (tracing +
  compilation) is reported apart as the compile time, `--warmup` more are discarded, then
  each of `--repeats` calls is timed to its host result: medians, min-max and the IQR.
- The training head touches every output position, so no layer can be pruned:
  loss = mean(sequence_output²) + mean(pooled_output²).
- Peak memory ("step Δ"): the backend allocator's peak during the warm-up and timed steps
  above what stays allocated after the first call (weights, optimizer state): the step's
  activations, gradients and temporaries. TensorFlow keeps these statistics on the CPU too
  (a CPU's peak RSS cannot say this: allocators keep freed memory, and XLA's compiler peaks
  in the first call). Also reported: the whole-life peak RSS (`ru_maxrss`) and that minus
  the RSS after the build, the step figure where the backend keeps no statistics (JAX, CPU).
- Throughput: tokens/s = batch x sequence / median step; model TFLOP/s from
  `keras_tupe_base.flops.model_flops_per_token`; MFU against `--peak-tflops` or the dense
  bfloat16 peak of a known GPU (`PEAK_BF16_TFLOPS`). `--flash` sets the keras_tupe models'
  `attention_implementation` ("fused" / "einsum"); each row records it, the path the step
  ran and the `flash_attention` asked (never on a CPU).

Results: `OUT.json` (machine, versions, command, every measurement) and `OUT.md` (headline
against the issue's thresholds, then a table per configuration). The parent process never
imports a deep-learning framework; `benchmarks/README.md` maps the files.
"""

from benchmarks.encoders.cli import main, parse_args

__all__ = ["main", "parse_args"]
