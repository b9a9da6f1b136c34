"""Run the reproduction studies, one command a study (see experiments/README.md).

    python -m experiments.run pretrain --study pretrain [--variants A B] [--until-step N]
    python -m experiments.run pretrain --study long_v2_jax --record-only
    python -m experiments.run finetune --study finetune
    python -m experiments.run length   --study length
    python -m experiments.run report   [--study NAME]
    python -m experiments.run maps     --init runs/study/pretrain/tupe_a --out maps/tupe_a.png
    python -m experiments.run maps     --from-npz docs/results/maps/pretrain_tupe_a.npz

Every command can be stopped and started again: finished runs are skipped and an
interrupted one continues where it was. Each run writes its record under
`docs/results/records/` when it finishes or stops; `report` regenerates every table and
figure of `docs/results/` from those records alone.
"""

import argparse
import glob
import os
import sys
import time

from training.cli import add_common_flags, one_line_errors, run  # importing `training` quiets TensorFlow

def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        prog="python -m experiments.run", description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter)
    one_line_errors(parser)  # the parser's own errors: one line
    commands = parser.add_subparsers(dest="command", required=True)

    def with_config(name, help_text, required=True):
        sub = commands.add_parser(name, help=help_text)
        where = sub.add_mutually_exclusive_group(required=required)
        where.add_argument("--config", help="a JSON file holding one study")
        where.add_argument("--study", help="a study of experiments/studies.json, by name")
        if required:
            sub.add_argument("--variants", nargs="+", help="only these variants (default: all)")
        return add_common_flags(sub)

    sub = with_config("pretrain", "pre-train every variant of a study (resumable)")
    sub.add_argument("--verbose", type=int, default=2, choices=(0, 1, 2),
                     help="Keras progress output (2: one line per block of eval_every steps)")
    sub.add_argument("--until-step", type=int,
                     help="stop each run after this step (a multiple of eval_every), "
                          "recorded and resumable: e.g. 1000 for the 50%% checkpoint that "
                          "finetune_intermediate reads")
    sub.add_argument("--record-only", action="store_true",
                     help="train nothing: write the records of the runs in the run folders, "
                          "e.g. runs trained on another machine")
    sub = with_config("finetune", "the reduced GLUE protocol on the pre-trained checkpoints")
    sub.add_argument("--checkpoints", nargs="+", type=float,
                     help="only these fractions of the budget (default: the config's)")
    with_config("length", "masked-LM loss at longer sequences (Huang Table 4)")
    with_config("report", "every table and figure from the committed records (no training); "
                "with --study or --config, that study's and the seed and comparison pages "
                "it is part of", required=False)
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
            paths = redraw_maps(args.from_npz, args.out)
        elif not args.out:
            raise study_config.StudyError("maps --init needs --out (the PNG file to write).")
        else:
            paths = draw_maps(args.init, args.out, length=args.length, command=command)
    elif args.command == "report":
        paths = report(args.config or args.study)
    else:
        paths = _run_study(args, study_config.load_config(args.config or args.study), command)
    for path in (paths or {}).values():
        print(f"wrote {path}")
    print(f"done in {records.format_seconds(time.perf_counter() - start)}: {command}")
    return 0


def _run_study(args, config, command):
    from experiments import finetune_study, length_study, pretrain_study
    from experiments.config import StudyError

    kind = config["kind"]
    if args.command != kind:
        raise StudyError(f"{config['_path']} is a {kind!r} study: run it with "
                         f"`python -m experiments.run {kind} {' '.join(config['_flag'])}`.")
    if kind == "pretrain":
        pretrain_study.run_study(config, command, only=args.variants, verbose=args.verbose,
                                 until_step=args.until_step, record_only=args.record_only)
        print(f"next: {report_command(config)}")
        return None
    if kind == "finetune":
        return finetune_study.run_study(config, command, report_command(config),
                                        only_variants=args.variants,
                                        only_checkpoints=args.checkpoints)
    return length_study.run_study(config, command, report_command(config),
                                  only_variants=args.variants)


def report_command(config):
    """The command that regenerates a study's pages, whichever command wrote them."""
    from experiments import records

    return records.command_line(["report", *config["_flag"]])


def report(reference=None):
    """Writes, from the records alone, the pages of the study `reference` (a name or a
    `.json` file; default: every study of `experiments/studies.json` that has records, and
    the positional maps again from their arrays), and the seed and comparison pages each
    of them is part of."""
    from experiments import compare, finetune_study, length_study, pretrain_study, records
    from experiments import replicates
    from experiments.config import load_config, studies
    from experiments.maps import redraw_maps

    if reference and reference.endswith(".json"):  # a study in a file, among its folder's
        folder = os.path.dirname(reference)
        every = [load_config(p) for p in sorted(glob.glob(os.path.join(folder, "*.json")))]
    else:
        every = [load_config(name) for name in sorted(studies())]
    named = [c for c in every if reference in (c["study"], c["_path"])] if reference else every
    if reference and not named:  # not among them (or nowhere: load_config says so)
        named = [load_config(reference)]

    def recorded(config):  # a fine-tuning study that has only pinned its settings: not yet
        folder = records.record_dir(config)
        return any(glob.glob(os.path.join(folder, "**", name), recursive=True)
                   for name in (pretrain_study.RECORD, "results.jsonl",
                                finetune_study.SUMMARY_FILE))

    modules = {"pretrain": pretrain_study, "finetune": finetune_study, "length": length_study}
    paths = {}
    for config in named:
        if reference or recorded(config):
            pages = modules[config["kind"]].report(config, report_command(config))
            paths.update((f"{config['study']} {kind}", page) for kind, page in pages.items())
    chosen = {c["study"] for c in named}
    command = records.command_line(["report"])
    groups = replicates.seed_groups(every)
    for name, (members, variants) in groups.items():
        if chosen & {c["study"] for c in members} and any(map(recorded, members)):
            pages = replicates.replicates(members, name, command, only=variants)
            paths.update((f"{name} seeds {kind}", page) for kind, page in pages.items())
    for name, bases in replicates.GROUP_COMPARISONS.items():
        members = [c["study"] for base, _ in bases for c in groups.get(base, ([], []))[0]]
        if chosen & set(members) and all(base in groups for base, _ in bases):
            pages = replicates.compare_groups([(label, *groups[base]) for base, label in bases],
                                              name)
            paths.update((f"{name} {kind}", page) for kind, page in pages.items())
    by_name = {c["study"]: c for c in every}
    for name, group in compare.COMPARISONS.items():
        if chosen & set(group) and all(s in by_name for s in group):
            pages = compare.compare([by_name[s] for s in group], name, command)
            paths.update((f"{name} compare {kind}", page) for kind, page in pages.items())
    for results in sorted({c["results_dir"] for c in every}) if not reference else ():
        for npz in sorted(glob.glob(os.path.join(results, "maps", "*.npz"))):
            paths.update((f"{npz} {kind}", page) for kind, page in redraw_maps(npz).items())
    return paths


if __name__ == "__main__":
    sys.exit(main())
