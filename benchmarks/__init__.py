"""Benchmarks of keras_tupe: `python -m benchmarks.encoders` (speed and memory),
`python -m benchmarks.finetune_speed`, and what they share (`benchmarks.harness`)."""
