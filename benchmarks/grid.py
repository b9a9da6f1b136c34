"""A grid of K runs in one program against the same runs one `fit` at a time (JAX).

    python -m benchmarks.grid [--sizes tiny mini] [--members 1 4 16] [--batch-size 32]
        [--seq-len 128] [--steps 4] [--out docs/results/benchmarks_grid_cpu]

Each measurement runs in a fresh process (`harness.run_fresh`): a classifier of the
size's preset (2 classes, random token ids, dropout on) trained `--steps` steps twice,
the first call holding the compile. `grid`: `keras_tupe.grid.GridTrainer` with K members
at K rates, one program (`steps_per_dispatch = --steps`). `fit`: one run, Keras's `fit`
with XLA (`jit_compile=True`, `steps_per_execution` 1), as a GLUE run trains today.
K separate runs cost K x (the compile + the steps at that run's pace): each run of today's
protocol builds and compiles its model again. Prints and writes a Markdown table and the
JSON of every measurement, with the machine and versions.
"""

import json
import time
from pathlib import Path

from benchmarks.harness import (
    command_line,
    git_state,
    load_average,
    machine_info,
    maxrss_mb,
    parser,
    run_fresh,
    versions,
    write_worker_result,
)

MODULE = "benchmarks.grid"


def worker(spec):
    import keras
    import numpy as np

    from keras_tupe.grid import GridTrainer, Schedule
    from keras_tupe.models import TupeBackbone, TupeTextClassifier
    from keras_tupe.optimization import create_optimizer

    k, batch, length, steps = spec["members"], spec["batch_size"], spec["seq_len"], spec["steps"]
    vocabulary = 1024 if spec["size"] == "tiny" else 30522
    rng = np.random.default_rng(0)
    count = batch * steps
    x = {"token_ids": rng.integers(5, vocabulary, (count, length)).astype(np.int32),
         "padding_mask": np.ones((count, length), bool),
         "segment_ids": np.zeros((count, length), np.int32)}
    y = rng.integers(0, 2, count).astype(np.int32)

    def build(seed):
        backbone = TupeBackbone.from_preset(f"{spec['variant']}_{spec['size']}",
                                            vocabulary_size=vocabulary)
        return TupeTextClassifier(backbone, num_classes=2)

    times = []
    if spec["mode"] == "grid":
        trainer = GridTrainer(build, range(k), [1e-4 * (1 + i) for i in range(k)],
                              Schedule(2 * steps, 1), steps_per_dispatch=steps)
        rows = np.stack([rng.permutation(count).reshape(steps, batch) for _ in range(k)], 1)
        for _ in range(2):
            start = time.perf_counter()
            trainer.fit((x, y), rows)
            times.append(time.perf_counter() - start)
    else:
        keras.utils.set_random_seed(0)
        model = build(0)
        model.compile(optimizer=create_optimizer(model, 1e-4, total_steps=2 * steps,
                                                 warmup_steps=1), jit_compile=True)
        for _ in range(2):
            start = time.perf_counter()
            model.fit(x, y, batch_size=batch, epochs=1, shuffle=False, verbose=0)
            times.append(time.perf_counter() - start)
    member_steps = k * steps if spec["mode"] == "grid" else steps
    return {**spec, "first_call_s": times[0], "second_call_s": times[1],
            "compile_s": max(times[0] - times[1], 0.0),
            "member_steps_per_s": member_steps / times[1], "peak_rss_mb": maxrss_mb(),
            "versions": versions()}


def main(argv=None):
    p = parser(MODULE, __doc__)
    p.add_argument("--sizes", nargs="+", default=["tiny", "mini"])
    p.add_argument("--members", nargs="+", type=int, default=[1, 4, 16])
    p.add_argument("--variant", default="tupe_a")
    p.add_argument("--batch-size", type=int, default=32)
    p.add_argument("--seq-len", type=int, default=128)
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--out", default=None, help="writes OUT.md and OUT.json")
    args = p.parse_args(argv)
    if args.worker:
        write_worker_result(args.worker_out, worker(json.loads(args.worker)))
        return 0
    results = []
    base = dict(variant=args.variant, batch_size=args.batch_size, seq_len=args.seq_len,
                steps=args.steps)
    for size in args.sizes:
        for mode, members in [("fit", 1)] + [("grid", k) for k in args.members]:
            spec = dict(base, size=size, mode=mode, members=members)
            result, error, wall = run_fresh(MODULE, ["--worker", json.dumps(spec)],
                                            env={"KERAS_BACKEND": "jax"})
            results.append(result or dict(spec, error=error))
            print(json.dumps(results[-1]), flush=True)
    table = markdown(results, args)
    print(table)
    if args.out:
        info = dict(command=command_line(MODULE, argv), machine=machine_info(),
                    load_average_end=load_average(), git=git_state(),
                    results=results)
        Path(args.out + ".json").write_text(json.dumps(info, indent=1) + "\n")
        Path(args.out + ".md").write_text(table)
    return 0


def markdown(results, args):
    lines = [f"`{args.variant}`, batch {args.batch_size} x {args.seq_len} tokens, float32, "
             f"{args.steps} steps timed after a first call of {args.steps} that compiles.", "",
             "| size | K | grid: member-steps/s | K fit runs: member-steps/s | grid / runs "
             "| grid compile s | a run's compile s | K runs' compiles s | grid peak RSS MiB |",
             "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |"]
    for size in args.sizes:
        fit = next((r for r in results if r["size"] == size and r["mode"] == "fit"), {})
        for grid in (r for r in results if r["size"] == size and r["mode"] == "grid"):
            if "error" in grid or "error" in fit:
                lines.append(f"| {size} | {grid['members']} | {grid.get('error') or fit.get('error')} "
                             "| | | | | | |")
                continue
            k = grid["members"]
            steady = fit["member_steps_per_s"]
            lines.append(
                f"| {size} | {k} | {grid['member_steps_per_s']:.2f} | {steady:.2f} "
                f"| {grid['member_steps_per_s'] / steady:.2f} | {grid['compile_s']:.1f} "
                f"| {fit['compile_s']:.1f} | {k * fit['compile_s']:.1f} "
                f"| {grid['peak_rss_mb']:.0f} |")
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
