"""Sequences per second of the NumPy shard loader alone (`keras_tupe.data.shards`).

    python -m benchmarks.shard_loader                          # seq 128 and 512, batch 256
    python -m benchmarks.shard_loader --shards DIR             # an existing shard folder
    python -m benchmarks.shard_loader --out docs/results/shard_loader.json
    python -m benchmarks.shard_loader --tf-corpus ../shared/data/enwiki/train.txt \
        --tf-vocab VOCAB                                       # and today's tf.data path

What is timed: `MaskedLMShards(...)[i]` for consecutive batches `i` of a shuffled
infinite stream, i.e. the gather of `B` random sequences from memory-mapped
shards plus the vectorized masking, in one thread, as `fit` calls it. No model,
no device transfer. Each repeat times `--batches` batches after two warm-up
batches; the table gives the median over `--repeats` with min-max. The seek
column is the time of batch 1,000,000's first call (a resumed run's first batch).

`--tf-corpus` also times today's tf.data path, `keras_tupe.data.mlm_dataset`
(tokenize, pack, shuffle, mask one sequence a call, batch), the same way (its
iterator's `next`), for a comparison on the same machine at the same time.

Without `--shards`, synthetic shards are written to a temporary folder:
`--sequences` sequences of uniform random ids in [5, 30522) (a BERT-sized
vocabulary, uint16), [CLS] first and a [SEP] where a token falls on a 1/60
chance (about one document end a paragraph, as in packed Wikipedia), so that
the masking has the same work as with real text: the loader's cost does not
depend on which ids they are.
"""

import argparse
import itertools
import json
import os
import platform
import statistics
import sys
import tempfile
import time

import numpy as np

VOCABULARY_SIZE = 30522
SEP_RATE = 1 / 60


def synthetic_shards(directory, sequence_length, num_sequences, seed=0):
    """A shard folder of random packed sequences (see the module docstring)."""
    from keras_tupe.data import shards
    from keras_tupe.data.masking import CLS_ID, SEP_ID, SPECIAL_TOKENS

    vocabulary = os.path.join(directory, "vocabulary_source.txt")
    with open(vocabulary, "w") as f:
        f.write("".join(f"{token}\n" for token in SPECIAL_TOKENS))
        f.write("".join(f"t{i}\n" for i in range(len(SPECIAL_TOKENS), VOCABULARY_SIZE)))
    rng = np.random.default_rng(seed)

    def batches():
        for start in range(0, num_sequences, 8192):
            n = min(8192, num_sequences - start)
            ids = rng.integers(len(SPECIAL_TOKENS), VOCABULARY_SIZE, (n, sequence_length))
            ids[rng.random(ids.shape) < SEP_RATE] = SEP_ID
            ids[:, 0] = CLS_ID
            yield ids

    out = os.path.join(directory, f"shards_{sequence_length}")
    shards.write_shard_folder(out, batches(), vocabulary, True, sequence_length, 100_000,
                              command="benchmarks.shard_loader (synthetic)")
    return out


def time_loader(directory, batch_size, batches, repeats, threads):
    """Seconds per repeat of `batches` batches, and the first call of a far batch."""
    from keras_tupe.data.shards import MaskedLMShards

    loader = MaskedLMShards(directory, batch_size, seed=0, threads=threads)
    loader[0], loader[1]  # warm-up: page in the permutation and the first pages
    times, index = [], 2
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            loader[index]
            index += 1
        times.append(time.perf_counter() - start)
    seeked = MaskedLMShards(directory, batch_size, seed=0, start_batch=1_000_000, threads=0)
    start = time.perf_counter()
    seeked[0]
    return times, time.perf_counter() - start


def time_tf_pipeline(corpus, vocab, sequence_length, batch_size, batches, repeats):
    """Seconds per repeat of `batches` batches of `mlm_dataset` (needs TensorFlow)."""
    from keras_tupe import data

    tokenizer = data.load_tokenizer(vocab)
    iterator = iter(data.mlm_dataset(corpus, tokenizer, sequence_length, batch_size))
    next(iterator), next(iterator)  # warm-up: tracing, the shuffle buffer's first fill
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        for _ in range(batches):
            next(iterator)
        times.append(time.perf_counter() - start)
    return times


def machine():
    import keras

    return {
        "python": platform.python_version(), "numpy": np.__version__,
        "keras": keras.__version__, "backend": keras.backend.backend(),
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {platform.platform()}",
        "processor": _processor_name(),
        "load_average_1min": os.getloadavg()[0],  # other processes on the cores
    }


def _processor_name():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.shard_loader", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    from training.cli import one_line_errors

    one_line_errors(p)  # the parser's own errors: one line
    p.add_argument("--shards", help="an existing shard folder (default: synthetic ones)")
    p.add_argument("--seq-len", type=int, nargs="+", default=[128, 512],
                   help="sequence lengths of the synthetic shards")
    p.add_argument("--sequences", type=int, default=200_000,
                   help="sequences of each synthetic shard folder")
    p.add_argument("--batch-size", type=int, default=256)
    p.add_argument("--batches", type=int, default=20, help="batches timed per repeat")
    p.add_argument("--repeats", type=int, default=7)
    p.add_argument("--threads", type=int, nargs="+", default=[0, None],
                   help="MaskedLMShards(threads=...) to time; 0: in the calling thread only")
    p.add_argument("--tf-corpus", help="also time mlm_dataset on this corpus")
    p.add_argument("--tf-vocab", help="the WordPiece vocabulary for --tf-corpus")
    p.add_argument("--out", help="also write the results as JSON here")
    args = p.parse_args(argv)

    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        if args.shards:
            from keras_tupe.data.shards import read_manifest

            folders = [(read_manifest(args.shards)["sequence_length"], args.shards)]
        else:
            folders = [(n, synthetic_shards(scratch, n, args.sequences)) for n in args.seq_len]
        for (sequence_length, folder), threads in itertools.product(folders, args.threads):
            times, seek = time_loader(folder, args.batch_size, args.batches, args.repeats,
                                      threads)
            rates = sorted(args.batches * args.batch_size / t for t in times)
            if threads is None:
                threads = f"default ({min(4, os.cpu_count() or 1)})"
            rows.append({"loader": "MaskedLMShards", "seq_len": sequence_length,
                         "batch_size": args.batch_size, "threads": threads,
                         "sequences_per_s_median": statistics.median(rates),
                         "sequences_per_s_min": rates[0], "sequences_per_s_max": rates[-1],
                         "ms_per_batch_median": 1000 * statistics.median(times) / args.batches,
                         "seek_first_batch_ms": 1000 * seek})
    if args.tf_corpus:
        for sequence_length, _ in folders:
            times = time_tf_pipeline(args.tf_corpus, args.tf_vocab, sequence_length,
                                     args.batch_size, args.batches, args.repeats)
            rates = sorted(args.batches * args.batch_size / t for t in times)
            rows.append({"loader": "mlm_dataset (tf.data)", "seq_len": sequence_length,
                         "batch_size": args.batch_size, "threads": "tf.data",
                         "sequences_per_s_median": statistics.median(rates),
                         "sequences_per_s_min": rates[0], "sequences_per_s_max": rates[-1],
                         "ms_per_batch_median": 1000 * statistics.median(times) / args.batches,
                         "seek_first_batch_ms": None})
    print("| loader | seq | batch | threads | sequences/s (median, min-max) | ms / batch | seek: first "
          "batch |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for r in rows:
        seek = r["seek_first_batch_ms"]
        print(f"| {r['loader']} | {r['seq_len']} | {r['batch_size']} | {r['threads']} | "
              f"{r['sequences_per_s_median']:,.0f} "
              f"({r['sequences_per_s_min']:,.0f}-{r['sequences_per_s_max']:,.0f}) | "
              f"{r['ms_per_batch_median']:.1f} | {'-' if seek is None else f'{seek:.1f} ms'} |")
    report = {"command": " ".join(["python -m benchmarks.shard_loader", *(argv or sys.argv[1:])]),
              "versions": machine(), "settings": vars(args), "rows": rows}
    print(json.dumps(report["versions"]))
    if args.out:
        with open(args.out, "w") as f:
            json.dump(report, f, indent=2)
    return 0


if __name__ == "__main__":
    from training.cli import run  # importing `training` quiets TensorFlow's start

    sys.exit(run(main))
