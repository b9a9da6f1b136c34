"""Converters from the papers' released checkpoints to keras_tupe preset folders."""
