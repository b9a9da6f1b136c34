"""Benchmarks of keras_tupe: `python -m benchmarks.encoders` (speed and memory)."""
