"""Fine-tuning against pre-training throughput, and XLA compilations per run.

    python -m benchmarks.finetune_speed --before b6346cf --out docs/results/finetune_speed

One encoder (`bert_a_<size>`, freshly initialized, seeded) is trained three ways, each in
a fresh process, in one run:

- `pretrain`: `keras_tupe.pretraining.pretrain` on the English Wikipedia text, batch
  32 x 128, as the studies pre-train (masked LM, AdamW, XLA);
- `finetune, 128`: `keras_tupe.finetuning.finetune_glue` on the whole training set of
  a GLUE task (`--task`, MRPC by default), every batch 32 x 128: the same shapes as
  pre-training;
- `finetune, study`: the same with the studies' settings (`pad_to_longest`,
  `pad_each_batch`).

With `--before REV` both fine-tuning rows also run on the library of that git revision
(`git archive REV keras_tupe`, put first on `PYTHONPATH`), interleaved with today's.

Per row: the wall time of the whole call (loading, input pipeline, compilation,
training and, for fine-tuning, the dev evaluation), the training steps, the median
step time after the first step (a Keras callback), tokens/s both ways (the
steady-state `batch x length / median step` and the whole call's), and the XLA
compilations: the HLO modules XLA compiled in that process, counted from
`XLA_FLAGS=--xla_dump_to` (every compilation is dumped once; TensorFlow and JAX alike).

Each row runs in a fresh process (`benchmarks.harness.run_fresh`; "before" through
`harness.library_at`). Results: `OUT.json` (machine, versions, command, rows) and `OUT.md`.
"""

import json
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

from benchmarks import harness

DATA_DIR = harness.REPO_ROOT.parent / "shared" / "data"
MODES = ("pretrain", "finetune_128", "finetune_study")
BATCH, LENGTH = 32, 128


def parse_args(argv=None):
    p = harness.parser("benchmarks.finetune_speed", __doc__)
    p.add_argument("--task", default="mrpc", help="GLUE task (default: mrpc)")
    p.add_argument("--epochs", type=int, default=1, help="fine-tuning epochs (default: 1)")
    p.add_argument("--pretrain-steps", type=int, default=None,
                   help="pre-training steps (default: the fine-tuning run's)")
    p.add_argument("--size", default="mini", choices=("tiny", "mini", "small", "base"))
    p.add_argument("--data-dir", default=str(DATA_DIR),
                   help="folder with glue/ and enwiki/ (default: ../shared/data)")
    p.add_argument("--vocab", default=None,
                   help="WordPiece vocabulary (default: 8,000 words trained on enwiki/train.txt)")
    p.add_argument("--before", default=None, help="git revision to compare fine-tuning with")
    p.add_argument("--modes", nargs="+", choices=MODES, default=list(MODES))
    p.add_argument("--out", default=None, help="write OUT.json and OUT.md")
    args = p.parse_args(argv)
    if args.epochs < 1:
        p.error(f"--epochs must be >= 1. Received: {args.epochs}")
    if args.out and any(os.path.exists(args.out + ext) for ext in (".json", ".md")):
        p.error(f"{args.out}.json or .md exists; choose another --out or remove them")
    return args


# === Worker: one row, in its own process ===
def _timed_fit(step_times):
    """Patches `keras.Model.fit` to time every training step after the first."""
    import keras

    class StepTimes(keras.callbacks.Callback):
        def on_train_batch_begin(self, batch, logs=None):
            self.start = time.perf_counter()

        def on_train_batch_end(self, batch, logs=None):
            step_times.append(time.perf_counter() - self.start)

    fit = keras.Model.fit

    def timed(model, *args, **kwargs):
        kwargs["callbacks"] = list(kwargs.get("callbacks") or []) + [StepTimes()]
        return fit(model, *args, **kwargs)

    keras.Model.fit = timed


def worker(spec):
    step_times = []
    _timed_fit(step_times)
    start = time.perf_counter()
    if spec["mode"] == "pretrain":
        from keras_tupe.pretraining import PretrainConfig, pretrain

        pretrain(PretrainConfig(
            preset=f"bert_a_{spec['size']}", corpus=[spec["corpus"]], vocab=spec["vocab"],
            out=spec["scratch"], steps=spec["steps"], eval_every=spec["steps"],
            batch_size=BATCH, seq_len=LENGTH, seed=0, verbose=0, save_steps=[]))
        steps = spec["steps"]
    else:
        from keras_tupe.finetuning import FinetuneConfig, finetune_glue

        study = spec["mode"] == "finetune_study"
        result = finetune_glue(FinetuneConfig(
            task=spec["task"], init=spec["init"], vocab=spec["vocab"],
            data_dir=spec["glue_dir"], epochs=spec["epochs"], batch_size=BATCH, seq_len=LENGTH,
            learning_rate=1e-4, pad_to_longest=study, pad_each_batch=study))
        steps = spec["epochs"] * -(-result["train_examples"] // BATCH)
    wall = time.perf_counter() - start
    median = harness.timing_stats([1000 * t for t in step_times[1:]])["median_ms"] / 1000
    return {"wall_seconds": wall, "steps": steps, "timed_steps": len(step_times),
            "first_step_seconds": step_times[0], "median_step_seconds": median,
            "steady_tokens_per_second": BATCH * LENGTH / median,
            "whole_call_tokens_per_second": steps * BATCH * LENGTH / wall,
            "versions": harness.versions()}


# === Parent ===
def _run_row(spec, library, work):
    """One row in a fresh process with `library` (None: this checkout); XLA's dumps counted."""
    dump = tempfile.mkdtemp(dir=work, prefix="xla_")
    spec = {**spec, "scratch": tempfile.mkdtemp(dir=work, prefix="run_") + "/run"}
    env = {"XLA_FLAGS": f"--xla_dump_to={dump}", "TF_CPP_MIN_LOG_LEVEL": "3"}
    row, error, _ = harness.run_fresh("benchmarks.finetune_speed",
                                      ["--worker", json.dumps(spec)], env=env, library=library)
    if row is None:
        raise SystemExit(f"{spec['mode']} ({spec['library']}) failed: {error}")
    row["xla_compilations"] = sum(name.endswith(".before_optimizations.txt")
                                  for name in os.listdir(dump))
    shutil.rmtree(dump)
    return {**{k: spec[k] for k in ("mode", "library")}, **row}


def _prepare(args, work):
    """The vocabulary, and a saved freshly initialized encoder to fine-tune."""
    from keras_tupe import data
    from keras_tupe.models import TupeBackbone

    vocab = args.vocab and os.path.abspath(args.vocab)
    if vocab is None:
        corpus = os.path.join(work, "corpus.txt")
        with open(os.path.join(args.data_dir, "enwiki", "train.txt")) as f, \
                open(corpus, "w") as out:
            out.writelines(line for _, line in zip(range(20000), f))
        vocab = data.train_vocabulary(corpus, 8000, os.path.join(work, "vocab.txt"))
    import keras

    keras.utils.set_random_seed(0)
    size = data.load_tokenizer(vocab).vocabulary_size()
    init = os.path.join(work, "encoder.keras")
    TupeBackbone.from_preset(f"bert_a_{args.size}", vocabulary_size=size).save(init)
    return vocab, init


def _table(rows):
    lines = ["| row | library | wall s | steps | first step s | median step s | tokens/s, "
             "steady (B x L / median) | tokens/s, whole call | XLA compilations |",
             "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for r in rows:
        shaped = r["mode"] != "finetune_study"  # the study's batches are shorter than 128
        steady = f"{r['steady_tokens_per_second']:,.0f}" if shaped else "–"
        whole = f"{r['whole_call_tokens_per_second']:,.0f}" if shaped else "–"
        lines.append(f"| {r['mode']} | {r['library']} | {r['wall_seconds']:,.1f} | {r['steps']} | "
                     f"{r['first_step_seconds']:.1f} | {r['median_step_seconds']:.3f} | {steady} | "
                     f"{whole} | {r['xla_compilations']} |")
    return "\n".join(lines)


def _ratios(rows):
    by = {(r["mode"], r["library"]): r for r in rows}
    pre = by.get(("pretrain", "today"))
    out = []
    for library in ("today", "before"):
        ft = by.get(("finetune_128", library))
        if pre and ft:
            out.append(f"- fine-tuning / pre-training tokens/s at 32 x 128, library {library}: "
                       f"steady {ft['steady_tokens_per_second'] / pre['steady_tokens_per_second']:.2f}, "
                       f"whole call {ft['whole_call_tokens_per_second'] / pre['whole_call_tokens_per_second']:.2f}")
    for mode in ("finetune_128", "finetune_study"):
        new, old = by.get((mode, "today")), by.get((mode, "before"))
        if new and old:
            out.append(f"- {mode}: wall time today / before {new['wall_seconds'] / old['wall_seconds']:.2f} "
                       f"({old['wall_seconds']:,.0f} s → {new['wall_seconds']:,.0f} s), XLA "
                       f"compilations {old['xla_compilations']} → {new['xla_compilations']}")
    return "\n".join(out)


def main(argv=None):
    args = parse_args(argv)
    if args.worker:
        harness.write_worker_result(args.worker_out, worker(json.loads(args.worker)))
        return 0
    work = tempfile.mkdtemp(prefix="finetune_speed_")
    started = time.time()
    try:
        vocab, init = _prepare(args, work)
        from keras_tupe.data import glue

        examples = len(glue.load_glue(args.task, "train", os.path.join(args.data_dir, "glue")).labels)
        steps = args.pretrain_steps or args.epochs * -(-examples // BATCH)
        args.data_dir = os.path.abspath(args.data_dir)
        base = dict(size=args.size, vocab=vocab, init=init, task=args.task, epochs=args.epochs,
                    glue_dir=os.path.join(args.data_dir, "glue"), steps=steps,
                    corpus=os.path.join(args.data_dir, "enwiki", "train.txt"))
        libraries = [("today", None)]
        if args.before:
            libraries.append(("before", harness.library_at(args.before,
                                                           tempfile.mkdtemp(dir=work))))
        rows = []
        for mode in args.modes:
            for name, library in (libraries[:1] if mode == "pretrain" else libraries):
                print(f"{mode} ({name}) ...", flush=True)
                rows.append(_run_row({**base, "mode": mode, "library": name}, library, work))
                print(f"  {json.dumps(rows[-1])}", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    command = harness.command_line("benchmarks.finetune_speed", argv)
    machine, git = harness.machine_info(), harness.git_state()
    versions = [row.pop("versions") for row in rows][0]  # the same in every row
    report = "\n".join([
        f"# Fine-tuning against pre-training throughput ({args.size}, {args.task})", "",
        f"Command: `{command}`", "",
        f"- Machine: {machine.get('cpu_model')}, {machine.get('cpus_usable')} usable cores; "
        f"{machine['platform']}; "
        + ", ".join(f"{name} {value}" for name, value in versions.items()) + "; keras_tupe "
        f"{git['commit']}{' (dirty)' if git['dirty'] else ''}"
        f"{f'; before = {args.before}' if args.before else ''}.",
        f"- Started {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime(started))}, took "
        f"{(time.time() - started) / 60:.1f} min. Each row in a fresh process, one after another.",
        f"- Batch {BATCH}; pre-training {steps} steps of {LENGTH} tokens; fine-tuning "
        f"{args.epochs} epoch(s) of {args.task} ({examples:,} examples); `finetune_study` pads "
        "as the studies do (`pad_to_longest`, `pad_each_batch`), so its tokens/s are not "
        "comparable and left out.", "",
        _table(rows), "", _ratios(rows), ""])
    print(report)
    if args.out:
        os.makedirs(os.path.dirname(args.out) or ".", exist_ok=True)
        Path(args.out + ".json").write_text(json.dumps({
            "command": command, "machine": machine, "versions": versions, "keras_tupe": git,
            "rows": rows}, indent=2))
        Path(args.out + ".md").write_text(report)
    return 0


if __name__ == "__main__":
    import training  # noqa: F401  (first: keras_tupe defers its models, TensorFlow starts quietly)
    from keras_tupe.cli.common import run

    sys.exit(run(main))
