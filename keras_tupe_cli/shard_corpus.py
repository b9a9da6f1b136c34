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
import os
import sys
import tempfile

# keras_tupe (with Keras: seconds) is imported inside the functions, after the flags parse.
from keras_tupe_cli.common import command_parser, entry_point, fill_defaults, plumbing
from keras_tupe_cli.pretrain import pretrain_defaults

DEFAULT_SEQUENCES_PER_SHARD = 100_000
# The flags whose defaults, left out (None), are keras-tupe-pretrain's (`PretrainConfig`).
PRETRAIN_FLAGS = ("vocabulary_size", "vocab_lines", "seq_len")


def parse_flags(argv=None):
    """The flags as given and their paths checked; imports no Keras (a fraction of a second)."""
    p = command_parser("keras-tupe-shard-corpus", __doc__)
    p.add_argument("--corpus", required=True, nargs="+",
                   help="text files, directories of .txt files, or tfds:NAME[:SPLIT]")
    p.add_argument("--out", required=True, help="shard folder to create")
    p.add_argument("--overwrite", action="store_true", help="replace a non-empty --out")
    p.add_argument("--vocab", help="WordPiece vocabulary file; trained on --corpus if absent")
    # Defaults left out (None) are keras-tupe-pretrain's (`PretrainConfig`), filled in after
    # parsing: a usage error comes before TensorFlow's import.
    p.add_argument("--vocabulary-size", type=int, help="default: 30522")
    p.add_argument("--vocab-lines", type=int,
                   help="corpus lines used to train the vocabulary (default: 200000)")
    p.add_argument("--cased", dest="lowercase", action="store_false", help="keep case")
    p.add_argument("--seq-len", type=int, help="default: 512")
    p.add_argument("--sequences-per-shard", type=int, default=DEFAULT_SEQUENCES_PER_SHARD)
    p.add_argument("--max-lines", type=int, help="read at most this many corpus lines")
    args = p.parse_args(argv)
    check_paths(args)
    return args


def parse_args(argv=None):
    """The flags, with keras-tupe-pretrain's defaults for those left out (imports Keras)."""
    return fill_defaults(parse_flags(argv), pretrain_defaults(), PRETRAIN_FLAGS)


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
    args = parse_flags(argv)
    out = os.path.normpath(args.out)
    # Held before Keras is imported: a second command on --out is refused at once.
    with plumbing("output_lock").output_lock(out, command="shard_corpus"), \
            tempfile.TemporaryDirectory() as scratch, contextlib.ExitStack() as streams:
        # Pipes open here, in the main thread, where a signal stops the wait for a writer.
        corpus_files = plumbing("corpus_files")
        args.corpus = [streams.enter_context(corpus_files.open_stream(path))
                       if is_stream(path) else path for path in args.corpus]
        args = fill_defaults(args, pretrain_defaults(), PRETRAIN_FLAGS)
        from keras_tupe import data
        from keras_tupe.data.sharding import shard_corpus

        vocab = args.vocab
        if vocab is None:
            print(f"Training a {args.vocabulary_size}-token WordPiece vocabulary on "
                  f"{args.vocab_lines} lines of {' '.join(args.corpus)} ...", flush=True)
            vocab = data.train_vocabulary(
                args.corpus, args.vocabulary_size, os.path.join(scratch, "vocab.txt"),
                lowercase=args.lowercase, max_lines=args.vocab_lines)
        manifest = shard_corpus(
            args.corpus, vocab, out, args.seq_len,
            sequences_per_shard=args.sequences_per_shard, lowercase=args.lowercase,
            max_lines=args.max_lines, overwrite=args.overwrite)
    print(f"Wrote {manifest['num_sequences']} sequences of {args.seq_len} tokens "
          f"({manifest['num_tokens']} tokens) in {len(manifest['shards'])} shards to {out}.")
    return 0


def is_stream(path):
    """Whether --corpus `path` is a pipe; refuses a device and a path that does not exist."""
    return not path.startswith("tfds:") and plumbing("corpus_files").corpus_kind(path) == "stream"


if __name__ == "__main__":
    sys.exit(main())
