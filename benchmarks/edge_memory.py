"""Peak memory at the edges (issue 38): a corpus on one line, many sentences to predict.

    python -m benchmarks.edge_memory                       # this checkout, ~3 minutes here
    python -m benchmarks.edge_memory --repo /tmp/old       # another checkout (the "before")
    python -m benchmarks.edge_memory --only predict --sentences 2000 8000

Each measurement is one fresh process (its peak resident set size, `ru_maxrss` from
`os.wait4`), run with the code of `--repo` (its `training` and `keras_tupe` come first on
the path):

- `vocabulary`: `keras_tupe.data.train_vocabulary` on the text (2,000 tokens);
- `pretrain`: `python -m training.pretrain --preset tupe_r_tiny --steps 5` on the text,
  with a fixed vocabulary (batch 8, sequence 128, no XLA);
- `predict`: `python -m training.predict` with N sentences, on a tiny SST-2-style
  classifier export made once with this checkout: as arguments (what the old code
  accepts: one call for all), and from a file in batches of 64 where `--repo` can.

The text is the first `--megabytes` MB of `--corpus` (enwiki's valid.txt by default) as
it is (one paragraph a line, `lines`) and joined into one line (`one line`), at 1x and
4x that size. Memory that stays flat across the rows is memory bounded by the batch.
Results go to stdout as a Markdown table (`--out FILE` writes it too).
"""

import argparse
import os
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DEFAULT_CORPUS = os.path.join(REPO, "..", "shared", "data", "enwiki", "valid.txt")

VOCABULARY = """
import sys
import training  # noqa: F401  (the checkout's quiet TensorFlow start)
from keras_tupe import data
data.train_vocabulary(sys.argv[1], 2000, sys.argv[2], verbose=False)
"""

EXPORT = """
import sys
import training  # noqa: F401
import keras
from keras_tupe import TupeBackbone, TupeTextClassifier
from keras_tupe.export import export_classifier
vocab = sys.argv[1]
size = sum(1 for _ in open(vocab, encoding="utf-8"))
keras.utils.set_random_seed(0)
model = TupeTextClassifier(TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size), 2)
export_classifier(model, vocab, sys.argv[2], seq_length=128, num_segments=1,
                  label_names=["negative", "positive"])
"""


def peak_rss(command, cwd, log):
    """(exit status, peak RSS in MB, seconds) of `command` run to its end."""
    start = time.perf_counter()
    with open(log, "w") as out:
        process = subprocess.Popen(command, cwd=cwd, stdout=out, stderr=subprocess.STDOUT,
                                   env={**os.environ, "PYTHONPATH": cwd,
                                        "TF_CPP_MIN_LOG_LEVEL": "3"})
        _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss / 1024, time.perf_counter() - start


def texts(corpus, megabytes, folder):
    """{(shape, scale): path}: the corpus's first `megabytes` MB, as lines and as one line."""
    with open(corpus, "rb") as f:
        head = f.read(int(megabytes * 1e6))
    head = head[: head.rfind(b"\n") + 1]
    paths = {}
    for scale in (1, 4):
        many = head * scale
        paths["lines", scale] = os.path.join(folder, f"lines_{scale}x.txt")
        paths["one line", scale] = os.path.join(folder, f"one_line_{scale}x.txt")
        with open(paths["lines", scale], "wb") as f:
            f.write(many)
        with open(paths["one line", scale], "wb") as f:
            f.write(b" ".join(line for line in many.split(b"\n") if line.strip()) + b"\n")
    return paths


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m benchmarks.edge_memory", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    from training.cli import one_line_errors

    one_line_errors(p)
    p.add_argument("--repo", default=REPO, help="the checkout whose code runs (default: this)")
    p.add_argument("--corpus", default=DEFAULT_CORPUS, help="text to take the sample from")
    p.add_argument("--megabytes", type=float, default=2.0, help="size of the 1x text")
    p.add_argument("--sentences", type=int, nargs="+", default=[1000, 4000],
                   help="numbers of sentences to predict")
    p.add_argument("--only", choices=("vocabulary", "pretrain", "predict"), nargs="+",
                   default=["vocabulary", "pretrain", "predict"])
    p.add_argument("--out", help="also write the table here")
    args = p.parse_args(argv)
    if not os.path.isfile(args.corpus):
        raise SystemExit(f"--corpus {args.corpus} does not exist: pass a text file.")
    repo = os.path.abspath(args.repo)
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        paths = texts(args.corpus, args.megabytes, scratch)
        vocab = os.path.join(scratch, "vocab.txt")
        log = os.path.join(scratch, "log.txt")
        code, _, _ = peak_rss([sys.executable, "-c", VOCABULARY, paths["lines", 1], vocab],
                              REPO, log)
        if code:
            raise SystemExit(f"could not train the vocabulary: {open(log).read()[-2000:]}")

        def measure(what, shape, command):
            code, peak, seconds = peak_rss(command, repo, log)
            status = "ok" if code == 0 else f"exit {code}: {open(log).read()[-300:]!r}"
            rows.append((what, shape, f"{peak:,.0f}", f"{seconds:.0f}", status))
            print(f"{what:<28} {shape:<22} {peak:>8,.0f} MB {seconds:>5.0f}s  {status}",
                  flush=True)

        for (shape, scale), path in sorted(paths.items(), key=lambda item: item[0][::-1]):
            size = f"{shape}, {os.path.getsize(path) / 1e6:.1f} MB"
            if "vocabulary" in args.only:
                measure("vocabulary (2,000 tokens)", size, [
                    sys.executable, "-c", VOCABULARY, path,
                    os.path.join(scratch, f"v_{time.monotonic_ns()}.txt")])
            if "pretrain" in args.only:
                measure("pretrain (5 steps)", size, [
                    sys.executable, "-m", "training.pretrain", "--preset", "tupe_r_tiny",
                    "--corpus", path, "--vocab", vocab, "--steps", "5", "--eval-every", "5",
                    "--batch-size", "8", "--seq-len", "128", "--no-xla", "--verbose", "0",
                    "--out", os.path.join(scratch, f"run_{time.monotonic_ns()}")])
        if "predict" in args.only:
            export = os.path.join(scratch, "classifier")
            code, _, _ = peak_rss([sys.executable, "-c", EXPORT, vocab, export], REPO, log)
            if code:
                raise SystemExit(f"could not export the classifier: {open(log).read()[-2000:]}")
            with open(paths["lines", 1], encoding="utf-8") as f:
                sentences = [line.strip()[:200] for line in f if line.strip()]
            with open(os.path.join(repo, "training", "predict.py")) as f:
                takes_files = "--batch-size" in f.read()
            for count in args.sentences:
                chosen = (sentences * (count // len(sentences) + 1))[:count]
                measure("predict, as arguments", f"{count:,} sentences", [
                    sys.executable, "-m", "training.predict", export, *chosen])
                if takes_files:
                    listed = os.path.join(scratch, f"sentences_{count}.txt")
                    with open(listed, "w", encoding="utf-8") as f:
                        f.write("".join(s + "\n" for s in chosen))
                    measure("predict, --file, batch 64", f"{count:,} sentences", [
                        sys.executable, "-m", "training.predict", export, "--file", listed,
                        "--batch-size", "64"])
    table = [f"Peak RSS, code of {repo}", "",
             "| what | input | peak RSS (MB) | seconds | status |",
             "| --- | --- | ---: | ---: | --- |"]
    table += [f"| {' | '.join(row)} |" for row in rows]
    print("\n".join(table))
    if args.out:
        with open(args.out, "w") as f:
            f.write("\n".join(table) + "\n")
    return 0


if __name__ == "__main__":
    from training.cli import run

    sys.exit(run(main))
