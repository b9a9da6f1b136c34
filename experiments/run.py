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
import sys
import time

from keras_tupe_cli.common import add_common_flags, one_line_errors, run  # quiets TensorFlow

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
    speed = ("steps one call of the compiled train function runs (Keras fit's "
             "steps_per_execution): a speed setting, the same numbers (default 1)")
    sub.add_argument("--steps-per-execution", type=int, default=1, help=speed)
    sub = with_config("finetune", "the reduced GLUE protocol on the pre-trained checkpoints")
    sub.add_argument("--steps-per-execution", type=int, default=1, help=speed)
    sub.add_argument("--checkpoints", nargs="+", type=float,
                     help="only these fractions of the budget (default: the config's)")
    with_config("length", "masked-LM loss at longer sequences (Huang Table 4)")
    with_config("report", "every table and figure from the committed records (no training); "
                "with --study or --config, that study's and the seed and comparison pages "
                "it is part of", required=False)
    sub = commands.add_parser("maps", help="per-head positional maps of one encoder")
    source = sub.add_mutually_exclusive_group(required=True)
    source.add_argument("--init",
                        help="a pre-training run directory or a preset folder")
    source.add_argument("--from-npz", metavar="NPZ",
                        help="draw again from the arrays an earlier maps run saved (its .npz "
                             "and .json), without the model: e.g. after a plotting change")
    sub.add_argument("--out", help="PNG file to write (required with --init; default with "
                                   "--from-npz: the .npz's name as .png)")
    sub.add_argument("--length", type=int, default=64, help="positions drawn (default 64)")
    add_common_flags(sub)
    return parser.parse_args(argv)


def main(argv=None):
    """`keras_tupe_cli.common.run`: a study's, a flag's or a path's error is one line, exit 2."""
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
        from experiments.report import report

        paths = report(args.config or args.study)
    else:
        paths = _run_study(args, study_config.load_config(args.config or args.study,
                                                          kind=args.command), command)
    for path in (paths or {}).values():
        print(f"wrote {path}")
    print(f"done in {records.format_seconds(time.perf_counter() - start)}: {command}")
    return 0


def _run_study(args, config, command):
    from experiments import finetune_study, length_study, pretrain_study
    from experiments.report import report_command

    kind = config["kind"]
    if kind == "pretrain":
        pretrain_study.run_study(config, command, only=args.variants, verbose=args.verbose,
                                 until_step=args.until_step, record_only=args.record_only,
                                 steps_per_execution=args.steps_per_execution)
        print(f"next: {report_command(config)}")
        return None
    if kind == "finetune":
        return finetune_study.run_study(config, command, report_command(config),
                                        only_variants=args.variants,
                                        only_checkpoints=args.checkpoints,
                                        steps_per_execution=args.steps_per_execution)
    return length_study.run_study(config, command, report_command(config),
                                  only_variants=args.variants)


if __name__ == "__main__":
    sys.exit(main())
