"""A token-id shard folder's description (`manifest.json`) and its checks: what a command
reads before Keras (`--shards`' sequence length, a folder that is not one), and what
`keras_tupe.data.shards`, which writes and reads the shards themselves, builds on."""

import json
import os

from keras_tupe_base.files import file_sha256

FORMAT_VERSION = 1
MANIFEST = "manifest.json"
VOCABULARY = "vocab.txt"


class ShardError(ValueError):
    """A shard folder that is missing, incomplete or made for other settings."""


def read_manifest(directory, flag="--shards"):
    """Checks a shard folder and returns its manifest (a dict).

    Every problem raises one `ShardError` naming `flag` (the command-line flag
    that gave the folder), the file, what is wrong and what to do.
    """
    hint = "Make it with `keras-tupe-shard-corpus --out DIR ...`."
    if not os.path.exists(directory):
        raise ShardError(f"{flag} {directory} does not exist. {hint}")
    if not os.path.isdir(directory):
        raise ShardError(f"{flag} {directory} is not a folder. {hint}")
    path = os.path.join(directory, MANIFEST)
    if not os.path.isfile(path):
        raise ShardError(f"{flag} {directory} has no {MANIFEST}, so it is not a shard folder "
                         f"(or its writing did not finish). {hint}")
    try:
        with open(path) as f:
            manifest = json.load(f)
    except json.JSONDecodeError as error:
        raise ShardError(f"{flag}: {path} is not valid JSON ({error}). {hint}") from error
    if manifest.get("format_version") != FORMAT_VERSION:
        raise ShardError(
            f"{flag}: {path} has format_version={manifest.get('format_version')!r}; this "
            f"keras_tupe reads format {FORMAT_VERSION}. Re-make the shards with this version.")
    vocabulary = os.path.join(directory, VOCABULARY)
    if not os.path.isfile(vocabulary) or file_sha256(vocabulary) != manifest["vocabulary_sha256"]:
        raise ShardError(
            f"{flag}: {vocabulary} is missing or is not the vocabulary the shards were made "
            f"with (sha256 {manifest['vocabulary_sha256']} in {MANIFEST}). Re-make the shards.")
    for entry in manifest["shards"]:
        shard = os.path.join(directory, entry["file"])
        if not os.path.isfile(shard):
            raise ShardError(f"{flag}: {shard}, listed in {MANIFEST}, is missing. Re-make "
                             "the shards.")
    return manifest
