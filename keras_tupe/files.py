"""The sha256 of a file: the one digest keras_tupe records and compares (vocabularies,
shards, converted checkpoints, fine-tuning inputs)."""

import hashlib


def file_sha256(path):
    """The sha256 hex digest of the file's bytes, read in 1 MiB blocks (checkpoints are large)."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()
