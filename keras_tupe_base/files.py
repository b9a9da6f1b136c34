"""The sha256 of a file: the one digest keras_tupe records and compares (vocabularies,
shards, converted checkpoints, fine-tuning inputs); and the one reader of a JSON file that
may not exist yet."""

import hashlib
import json
import os


def read_json(path):
    """The JSON value in `path`, or `{}` where there is no such file."""
    if not os.path.isfile(path):
        return {}
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def file_sha256(path, opener=open):
    """The sha256 hex digest of the file's bytes, read in 1 MiB blocks (checkpoints are large);
    `opener`: e.g. `lzma.open`, for the bytes a compressed file holds."""
    digest = hashlib.sha256()
    with opener(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def tree_sha256(path):
    """`file_sha256` of a file; of a folder (a preset), the sha256 of its files' relative
    names and digests, in name order: a fingerprint of every byte a loader may read."""
    if not os.path.isdir(path):
        return file_sha256(path)
    digest = hashlib.sha256()
    for folder, _, names in sorted(os.walk(path)):  # every folder, in path order
        for name in sorted(names):
            full = os.path.join(folder, name)
            digest.update(f"{os.path.relpath(full, path)}\0{file_sha256(full)}\n".encode())
    return digest.hexdigest()


def check_unique_tokens(vocabulary_file, tokens):
    """Refuses a vocabulary whose `tokens` (its lines, in order) repeat one, naming the file
    and both lines: a token's line is its id. Pure Python (no TensorFlow)."""
    first_line = {}
    for number, token in enumerate(tokens, 1):
        if token in first_line:
            shown = repr(token) if token else "'' (a blank line)"
            raise ValueError(
                f"Vocabulary file {vocabulary_file} has the token {shown} twice, on lines "
                f"{first_line[token]} and {number}: a token's line is its id, so each token "
                f"may appear once. Remove line {number} (and any other repeat)."
            )
        first_line[token] = number


def vocabulary_tokens(vocabulary_file):
    """The tokens of a vocabulary file, one a line, as keras-hub reads them (trailing
    whitespace stripped); a file that is not UTF-8 is refused naming the byte."""
    try:
        with open(vocabulary_file, encoding="utf-8") as f:
            tokens = [line.rstrip() for line in f]
    except UnicodeDecodeError as error:
        raise ValueError(
            f"Vocabulary file {vocabulary_file} is not UTF-8 text (byte {error.start} is "
            f"0x{error.object[error.start]:02x}): a vocabulary is UTF-8, one token a line."
        ) from None
    return tokens
