"""Benchmarks of keras_tupe: `python -m benchmarks.encoders` (speed and memory), and what a
benchmark shares (`benchmarks.harness`)."""
