"""Run the reproduction studies of issue 7, one command a study (see experiments/README.md).

    python -m experiments.run pretrain --config experiments/configs/pretrain.json
    python -m experiments.run report   --study pretrain
    python -m experiments.run finetune --config experiments/configs/finetune.json
    python -m experiments.run length   --config experiments/configs/length.json
    python -m experiments.run maps     --init runs/study/pretrain/tupe_a --out docs/results/maps/tupe_a.png
    python -m experiments.run maps     --from-npz docs/results/maps/pretrain_tupe_a.npz
    python -m experiments.run compare  --name speed --studies speed_f32_xla speed_bf16_xla
    python -m experiments.run seeds    --name long --studies long long_seed1
    python -m experiments.run estimate pretrain relative length finetune speed_f32_xla:bert_a@300

Every command can be stopped and started again: finished runs are skipped and
an interrupted one continues where it was. Outputs go to the config's
`results_dir` (docs/results) and record the command that regenerates them (for the
fine-tuning and length reports: `report`, which re-reads the runs on disk).
"""

import argparse
import os
import sys
import time

from training.cli import add_common_flags, one_line_errors, run  # importing `training` quiets TensorFlow

CONFIG_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "configs")


def _study_path(name):
    path = os.path.join(CONFIG_DIR, f"{name}.json")
    relative = os.path.relpath(path)
    return relative if not relative.startswith("..") else path


def _resolve_study(name, flag="--studies"):
    """A study's config file: `name` itself when it is a .json path, else configs/NAME.json."""
    from experiments.config import StudyError

    if name.endswith(".json"):
        return name
    path = _study_path(name)
    if not os.path.exists(path):
        studies = sorted(n[:-5] for n in os.listdir(CONFIG_DIR) if n.endswith(".json"))
        alternative = "--config FILE" if flag == "--study" else "a config file (.json)"
        raise StudyError(f"{flag} {name}: there is no {path}. Choose one of "
                         f"{', '.join(studies)}, or pass {alternative}.")
    return path


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    one_line_errors(parser)  # the parser's own errors: one line
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(name, help_text):
        sub = commands.add_parser(name, help=help_text)
        where = sub.add_mutually_exclusive_group(required=True)
        where.add_argument("--config", help="the study's JSON config")
        where.add_argument("--study", help="shorthand for --config experiments/configs/STUDY.json")
        return add_common_flags(sub)

    fresh_help = ("do not skip what the committed reports record (runs of earlier "
                  "workspaces): make every run that is not finished on disk here "
                  "(run_all.sh --all)")
    sub = with_config("pretrain", "pre-train every variant of a study (resumable)")
    sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
    sub.add_argument("--fresh", action="store_true", help=fresh_help)
    sub.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2),
                     help="Keras progress output (2: one line per block of eval_every steps)")
    sub.add_argument("--until-step", type=int,
                     help="stop each run after this step (a multiple of eval_every), "
                          "unfinished and resumable: e.g. 1000 for the 50%% checkpoint that "
                          "finetune_intermediate reads")
    sub = with_config("finetune", "the reduced GLUE protocol on the pre-trained checkpoints")
    sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
    sub.add_argument("--fresh", action="store_true", help=fresh_help)
    sub.add_argument("--checkpoints", nargs="+", type=float,
                     help="only these fractions of the budget (default: the config's)")
    sub = with_config("length", "masked-LM loss at longer sequences (Huang Table 4)")
    sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
    sub.add_argument("--fresh", action="store_true", help=fresh_help)
    sub = commands.add_parser(
        "estimate", help="the time studies take to run again, from their reports' records")
    sub.add_argument("studies", nargs="+", metavar="STUDY[:VARIANT,...][@STEPS]",
                     help="study names (or config files), optionally only some variants and "
                          "a step to stop at, e.g. speed_f32_xla:bert_a@300")
    add_common_flags(sub)
    with_config("report", "collect a study's results into docs/results (no training)")
    sub = commands.add_parser("compare", help="pre-training studies that differ only in their "
                              "overrides, side by side (the speed study, the tuning sweep)")
    sub.add_argument("--name", required=True,
                     help="names the outputs: <results_dir>/NAME_compare.{csv,png,md}")
    sub.add_argument("--studies", nargs="+", required=True,
                     help="study names (experiments/configs/NAME.json) or config files; the "
                          "first is the reference the others are measured against")
    sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
    add_common_flags(sub)
    sub = commands.add_parser("seeds", help="pre-training studies that differ only in their "
                              "seed: mean losses with seed bands, gaps against the seed spread")
    sub.add_argument("--name", required=True,
                     help="names the outputs: <results_dir>/NAME_seeds.{csv,png,md}")
    sub.add_argument("--studies", nargs="+", required=True,
                     help="a study and its seed replicates (names or config files)")
    sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
    add_common_flags(sub)
    sub = commands.add_parser("maps", help="per-head positional maps of one encoder")
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("--init",
                        help="a pre-training run directory or a .keras file (backbone or task)")
    source.add_argument("--from-npz", metavar="NPZ",
                        help="draw again from the arrays an earlier maps run saved (its .npz "
                             "and .json), without the model: e.g. after a plotting change")
    sub.add_argument("--out", help="PNG file to write (required with --init; default with "
                                   "--from-npz: the .npz's name as .png)")
    sub.add_argument("--length", type=int, default=64, help="positions drawn (default 64)")
    add_common_flags(sub)
    return parser.parse_args(argv)


def main(argv=None):
    """`training.cli.run`: a study's, a flag's or a path's error is one line, exit 2."""
    return run(_main, argv)


def _main(argv=None):
    argv = list(sys.argv[1:] if argv is None else argv)
    args = parse_args(argv)
    from experiments import config as study_config
    from experiments import records

    command = records.command_line(argv)
    start = time.perf_counter()
    if args.command == "maps":
        from experiments.maps import draw_maps, redraw_maps

        if args.from_npz:
            paths = redraw_maps(args.from_npz, args.out, command=command)
        elif not args.out:
            raise study_config.StudyError("maps --init needs --out (the PNG file to write).")
        else:
            paths = draw_maps(args.init, args.out, length=args.length, command=command)
    elif args.command == "estimate":
        from experiments.estimate import estimate, format_estimate, parse_spec

        specs = [parse_spec(text) for text in args.studies]
        rows = estimate([study_config.load_config(_resolve_study(name, flag="estimate"))
                         for name, _, _ in specs],
                        only=[variants for _, variants, _ in specs],
                        until_steps=[steps for _, _, steps in specs])
        print(format_estimate(rows))
        paths = None
    elif args.command == "compare":
        from experiments.compare import compare

        configs = [study_config.load_config(_resolve_study(name), kind="pretrain")
                   for name in args.studies]
        paths = compare(configs, args.name, command, only=args.variants)
    elif args.command == "seeds":
        from experiments.replicates import replicates

        configs = [study_config.load_config(_resolve_study(name), kind="pretrain")
                   for name in args.studies]
        paths = replicates(configs, args.name, command, only=args.variants)
    else:
        path = args.config or _resolve_study(args.study, flag="--study")
        paths = _run_study(args, study_config.load_config(path), command)
    for name, path in (paths or {}).items():
        print(f"wrote {path}" if name != "status" else f"status: {path}")
    print(f"done in {records.format_seconds(time.perf_counter() - start)}: {command}")
    return 0


def _run_study(args, config, command):
    from experiments import finetune_study, length_study, pretrain_study, records
    from experiments.config import StudyError, study_dir

    kind = config["kind"]
    if args.command == "report":
        module = {"pretrain": pretrain_study, "finetune": finetune_study,
                  "length": length_study}[kind]
        return module.report(config, command)
    if args.command != kind:
        raise StudyError(f"{config['_path']} is a {kind!r} study: run it with "
                         f"`python -m experiments.run {kind} --config {config['_path']}`.")
    if kind == "pretrain":
        start = time.perf_counter()
        status = pretrain_study.run_study(config, command, only=args.variants,
                                          verbose=args.verbose, until_step=args.until_step,
                                          fresh=args.fresh)
        records.append_jsonl(os.path.join(study_dir(config), "commands.jsonl"), {
            "command": command, "finished": records.now(), "status": status,
            "seconds": time.perf_counter() - start})
        print(f"next: python -m experiments.run report --config {config['_path']}")
        return {"status": status}
    # Their reports name the command that regenerates them from the runs on disk, whichever
    # command wrote them, so that a resumed study rewrites nothing.
    if kind == "finetune":
        return finetune_study.run_study(config, command, report_command(args),
                                        only_variants=args.variants,
                                        only_checkpoints=args.checkpoints, fresh=args.fresh)
    return length_study.run_study(config, command, report_command(args),
                                  only_variants=args.variants, fresh=args.fresh)


def report_command(args):
    """`python -m experiments.run report ...` for the study that `args` names."""
    from experiments import records

    where = ["--study", args.study] if args.study else ["--config", args.config]
    return records.command_line(["report", *where])


if __name__ == "__main__":
    sys.exit(main())
