"""WordPiece learners side by side: tensorflow-text's (keras-hub's) and Hugging Face's.

    python -m benchmarks.vocabulary --corpus ../shared/data/enwiki/train.txt
        --valid ../shared/data/enwiki/valid.txt [--size 4000] [--lines 4000]
        [--learners hf tf] [--valid-lines N] [--out DIR]

Each learner learns a `--size`-token vocabulary from the first `--lines` lines of
`--corpus` (all of it with `--lines 0`), in this process, one after the other:
`hf` is `keras_tupe.data.train_vocabulary` (Hugging Face `tokenizers`); `tf` is
`keras_hub.tokenizers.compute_word_piece_vocabulary` called exactly as
`train_vocabulary` once called it (the same reader, NFKC and space separators
as " ", `SPECIAL_TOKENS` reserved), kept here only. Each vocabulary then tokenizes
`--valid` with keras-hub's `WordPieceTokenizer` as `load_tokenizer` makes it:
tokens per word (words as that tokenizer splits them: a tokenizer whose only token
is [UNK] gives one token a word) and the share of words that are [UNK]. Prints a
row as each learner finishes, then the Markdown table with the command, machine and
versions; `--out DIR` also writes `DIR/<learner>.txt` (the vocabularies) and
`DIR/vocabulary.md` (refused if there).
"""

import json
import tempfile
import time
from pathlib import Path

from benchmarks.harness import (
    command_line,
    git_state,
    load_average,
    machine_info,
    parser,
    versions,
)

MODULE = "benchmarks.vocabulary"
LEARNERS = ("hf", "tf")
COLUMNS = ("learner", "lines", "seconds", "tokens learned", "tokens per word", "[UNK] % of words")


def learn_tf(corpus, size, output_file, max_lines):
    """keras-hub's `compute_word_piece_vocabulary`, as `train_vocabulary` once called it."""
    import keras_hub
    import tensorflow as tf
    import tensorflow_text as tf_text

    from keras_tupe.data.corpus import line_batches, line_dataset
    from keras_tupe.data.masking import SPECIAL_TOKENS

    def plain_spaces(lines):  # the `_plain_spaces` of then (lowercase=True)
        return tf.strings.regex_replace(tf_text.normalize_utf8(lines, "NFKC"), r"\p{Z}", " ")

    line_dataset(corpus, max_lines=max_lines)  # its corpus checks, as train_vocabulary's
    lines = line_batches(corpus, max_lines=max_lines).map(plain_spaces)
    vocabulary = keras_hub.tokenizers.compute_word_piece_vocabulary(
        lines, size, lowercase=True, reserved_tokens=SPECIAL_TOKENS)
    with open(output_file, "x", encoding="utf-8") as f:
        f.write("".join(token + "\n" for token in vocabulary))


def learn_hf(corpus, size, output_file, max_lines):
    from keras_tupe import data

    data.train_vocabulary(corpus, size, output_file, max_lines=max_lines, verbose=False)


def token_counts(tokenizer, lines, batch_size=1024):
    """(tokens, [UNK] tokens) of `lines` tokenized by `tokenizer` (int ids)."""
    import numpy as np

    unknown = tokenizer.token_to_id("[UNK]")
    tokens = unknowns = 0
    for start in range(0, len(lines), batch_size):
        ids = np.concatenate(list(tokenizer(lines[start:start + batch_size])))
        tokens += ids.size
        unknowns += int(np.sum(ids == unknown))
    return tokens, unknowns


def evaluate(vocabulary_file, valid_lines, words):
    from keras_tupe import data

    tokens, unknowns = token_counts(data.load_tokenizer(vocabulary_file), valid_lines)
    return tokens / words, 100 * unknowns / words


def markdown(rows):
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        lines.append(f"| {row['learner']} | {row['lines']} | {row['seconds']:.1f} | "
                     f"{row['tokens']:,} | {row['tokens_per_word']:.3f} | "
                     f"{row['unknown_percent']:.3f} |")
    return "\n".join(lines)


def main(argv=None):
    p = parser(MODULE, __doc__)
    p.add_argument("--corpus", required=True, help="the text to learn from")
    p.add_argument("--valid", required=True, help="held-out text to tokenize")
    p.add_argument("--size", type=int, default=4000, help="tokens asked of each learner")
    p.add_argument("--lines", type=int, default=4000, help="lines of --corpus (0: all)")
    p.add_argument("--learners", nargs="+", choices=LEARNERS, default=list(LEARNERS))
    p.add_argument("--valid-lines", type=int, default=0, help="lines of --valid (0: all)")
    p.add_argument("--out", default=None, help="a folder for the vocabularies and the table")
    args = p.parse_args(argv)
    out = Path(args.out) if args.out else None
    if out is not None:
        if (out / "vocabulary.md").exists():
            p.error(f"{out / 'vocabulary.md'} exists; choose another --out")
        out.mkdir(parents=True, exist_ok=True)
    machine, commit = machine_info(), git_state()

    import keras_hub
    import tensorflow_text
    import tokenizers

    from keras_tupe.data.corpus import line_dataset

    max_lines = args.lines or None
    valid = [line.decode("utf-8") for line in line_dataset(
        args.valid, max_lines=args.valid_lines or None).as_numpy_iterator() if line]
    words, _ = token_counts(keras_hub.tokenizers.WordPieceTokenizer(
        vocabulary=["[UNK]"], lowercase=True, oov_token="[UNK]", dtype="int32"), valid)
    print(f"--valid: {len(valid):,} lines, {words:,} words", flush=True)
    learn = {"hf": learn_hf, "tf": learn_tf}
    rows = []
    with tempfile.TemporaryDirectory(prefix="keras_tupe_vocabulary_") as scratch:
        for learner in args.learners:
            vocabulary_file = (out or Path(scratch)) / f"{learner}.txt"
            start = time.perf_counter()
            learn[learner](args.corpus, args.size, vocabulary_file, max_lines)
            seconds = time.perf_counter() - start
            tokens = len(vocabulary_file.read_text(encoding="utf-8").splitlines())
            per_word, unknown = evaluate(vocabulary_file, valid, words)
            rows.append(dict(learner=learner, lines=args.lines or "all", seconds=seconds,
                             tokens=tokens, tokens_per_word=per_word, unknown_percent=unknown,
                             load_average=load_average()))
            print(json.dumps(rows[-1]), flush=True)
    found = dict(versions(), tensorflow_text=tensorflow_text.__version__,
                 tokenizers=tokenizers.__version__)
    report = "\n\n".join([
        f"Vocabularies of {args.size:,} tokens asked (`{command_line(MODULE, argv)}`)",
        markdown(rows),
        "```json\n" + json.dumps(dict(machine=machine, git=commit, versions=found,
                                      valid_lines=len(valid), valid_words=words), indent=1)
        + "\n```"])
    print(report)
    if out is not None:
        with open(out / "vocabulary.md", "x", encoding="utf-8") as f:
            f.write(report + "\n")


if __name__ == "__main__":
    main()
