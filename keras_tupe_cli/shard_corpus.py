"""Packs a corpus into token-id shards for pre-training without TensorFlow.

    keras-tupe-shard-corpus --corpus ../shared/data/enwiki/train.txt \\
        --vocab runs/vocab.txt --seq-len 128 --out shards/enwiki_128

Run it where TensorFlow and tensorflow-text are installed; then train anywhere,
e.g. on a JAX machine without TensorFlow:

    KERAS_BACKEND=jax keras-tupe-pretrain --preset tupe_r_mini \\
        --shards shards/enwiki_128 --seq-len 128 --out runs/tupe_r_mini

The folder holds `shard_00000.npy`, ... (uint16 ids while the vocabulary has at
most 65,536 tokens), `vocab.txt` and `manifest.json`. Without `--vocab`, a
WordPiece vocabulary of `--vocabulary-size` tokens is trained on `--corpus`
(as `keras-tupe-pretrain` does).

`--corpus` may be a pipe, read once, e.g. `--corpus <(zcat train.txt.gz) --vocab vocab.txt`
(`--vocab` is needed then: training a vocabulary would read the corpus a second time).
"""

import contextlib
import dataclasses
import os
import sys
import tempfile

# keras_tupe (with Keras: seconds) is imported inside `main`, after the flags parse and check.
from keras_tupe_base import corpus_files
from keras_tupe_base.output_lock import output_lock
from keras_tupe_base.settings import ShardConfig
from keras_tupe_cli.common import add_settings, command_parser, entry_point, settings_from


def parse_config(argv=None):
    """The command's `ShardConfig`, its paths and values checked; imports no Keras."""
    p = command_parser("keras-tupe-shard-corpus", __doc__)
    flags = add_settings(p, ShardConfig)
    args = p.parse_args(argv)
    check_paths(args)
    return settings_from(args, ShardConfig, flags)


def check_paths(args):
    """The checks of the paths given that need no TensorFlow."""
    for path in args.corpus:
        if is_stream(path) and args.vocab is None:
            raise ValueError(
                f"--corpus {path} is a pipe, which can be read once; without --vocab it would be "
                "read twice (to train a vocabulary, then to pack it). Pass --vocab VOCAB (e.g. "
                "the vocab.txt of a shard folder or of a pre-training run), or give a file.")
    if args.vocab is not None and not os.path.isfile(args.vocab):
        raise FileNotFoundError(f"--vocab {args.vocab} does not exist.")
    out = os.path.normpath(args.out)
    if os.path.exists(out) and not os.path.isdir(out):
        raise NotADirectoryError(f"--out {out} is a file; shards go into a folder.")
    if os.path.isdir(out) and os.listdir(out) and not args.overwrite:
        raise FileExistsError(f"--out {out} is not empty; refusing to write into it. Choose "
                              "another --out, or pass --overwrite to replace it.")


@entry_point({"out": "--out", "overwrite": "--overwrite"})
def main(argv=None):
    config = parse_config(argv)
    out = os.path.normpath(config.out)
    # Held before Keras is imported: a second command on --out is refused at once.
    with output_lock(out, command="shard_corpus"), \
            tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as streams:
        # Pipes open here, in the main thread, where a signal stops the wait for a writer.
        corpus = [streams.enter_context(corpus_files.open_stream(path))
                  if is_stream(path) else path for path in config.corpus]
        config = dataclasses.replace(config, corpus=corpus)
        from keras_tupe import data
        from keras_tupe.data.sharding import shard_corpus

        vocab = config.vocab
        if vocab is None:
            print(f"Training a {config.vocabulary_size}-token WordPiece vocabulary on "
                  f"{config.vocab_lines} lines of {' '.join(config.corpus)} ...", flush=True)
            vocab = data.train_vocabulary(
                config.corpus, config.vocabulary_size, os.path.join(scratch, "vocab.txt"),
                lowercase=config.lowercase, max_lines=config.vocab_lines)
        manifest = shard_corpus(
            config.corpus, vocab, out, config.seq_len,
            sequences_per_shard=config.sequences_per_shard, lowercase=config.lowercase,
            max_lines=config.max_lines, overwrite=config.overwrite)
    print(f"Wrote {manifest['num_sequences']} sequences of {config.seq_len} tokens "
          f"({manifest['num_tokens']} tokens) in {len(manifest['shards'])} shards to {out}.")
    return 0


def is_stream(path):
    """Whether --corpus `path` is a pipe; refuses a device and a path that does not exist."""
    return not path.startswith("tfds:") and corpus_files.corpus_kind(path) == "stream"


if __name__ == "__main__":
    sys.exit(main())
