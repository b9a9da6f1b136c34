"""GPU stages: prepared here, run in one lent GPU window, every record streamed home
(stages.json; the contract: experiments/stage/README.md).

    .venv/bin/python -m experiments.stage prepare W1 [--tiny] [--encoders DIR]  # here
    <the command prepare printed>                                 # there, carrying .stage/W1
    .venv/bin/python -m experiments.stage collect W1 FILES_AT     # here: the records
"""

import argparse
import os
import sys

from experiments import records
from experiments.config import load_config
from experiments.stage import budget, collect, jobs, prepare, run, specs
from keras_tupe_base.command_line import one_line_errors, quiet_start, run as run_cli


def main(argv=None):
    def _main(argv):
        parser = argparse.ArgumentParser(prog="python -m experiments.stage", description=__doc__,
                                         formatter_class=argparse.RawDescriptionHelpFormatter)
        one_line_errors(parser)
        commands = parser.add_subparsers(dest="command", required=True)
        here, there, back, encoder, together, ahead, grid = (
            commands.add_parser(command) for command in (
                "prepare", "run", "collect", "encoder", "finetune", "compile", "pretrain"))
        # run's own: encoder (one in bfloat16), finetune (a planned window's variant, its
        # encoders as one program), compile (that program, beside the variant's grid),
        # pretrain (a planned window's grid, built beside the calibration)
        grid.add_argument("config", help="the planned window's pre-training config")
        grid.add_argument("variant", help="the variant whose seeds train as one program")
        grid.add_argument("--plan-of", metavar="WORK", required=True,
                          help="train once WORK/logs/plan.json is written, its steps")
        for sub in (together, ahead):
            sub.add_argument("config", help="the planned window's fine-tuning config")
            sub.add_argument("variants", nargs="+", help="one variant's runs (its seeds)")
        together.add_argument("--first-call-of", metavar="WORK", help="only the tasks the "
                              "first call's plan (WORK/logs/plan.json) gives it")
        ahead.add_argument("--plan-of", metavar="WORK", required=True,
                           help="every task of the plan in WORK/logs/plan.json")
        for sub in (here, there, back):
            sub.add_argument("stage")
        for sub in (here, there):
            sub.add_argument("--tiny", action="store_true", help="the tiny rehearsal")
            sub.add_argument("--encoders", help="the encoders folder an earlier call brought home")
        there.add_argument("--out", default=os.environ.get("OUT", "stage_out"))
        there.add_argument("--started", type=float, help="when the command started (epoch s)")
        there.add_argument("--deadline", type=float, help="seconds after --started")
        there.add_argument("--call", type=int, choices=(1, 2), default=1,
                           help="a planned window's call: 2 goes on from the first's")
        back.add_argument("folder", help="what came back")
        back.add_argument("--results-dir", default=specs.RESULTS, help="where the records are "
                          "filed (under records/); a rehearsal's only elsewhere")
        encoder.add_argument("init", help="a run's final preset or checkpoint")
        encoder.add_argument("path")
        args = parser.parse_args(argv)
        if args.command == "prepare":
            print("\n".join(prepare.prepare(args.stage, args.tiny, encoders=args.encoders)))
        elif args.command == "run":
            run.run(args.stage, args.out, args.tiny, args.deadline, args.started,
                encoders=args.encoders, call=args.call)
        elif args.command == "encoder":
            jobs.write_encoder(args.init, args.path)
        elif args.command == "pretrain":
            jobs.pretrain_planned(load_config(args.config), args.variant, args.plan_of,
                             records.command_line(argv if argv is not None else sys.argv[1:],
                                                  "python -m experiments.stage"))
        elif args.command == "compile":
            jobs.compile_together(load_config(args.config), args.variants,
                             budget.read_plan(args.plan_of)["plan"]["tasks"])
        elif args.command == "finetune":
            jobs.finetune_together(load_config(args.config), args.variants, records.command_line(
                argv if argv is not None else sys.argv[1:], "python -m experiments.stage"),
                args.first_call_of and budget.read_plan(args.first_call_of)["plan"][
                    "first_call_tasks"])
        else:
            written = collect.collect(args.stage, args.folder, args.results_dir)
            print(*(f"wrote {path}" for path in written), "next: python -m experiments.run "
                  "report" if written else "nothing new: every record there is here already",
                  sep="\n")
        return 0
    quiet_start()  # before a run imports Keras: TensorFlow quiet, Ctrl-C one line
    return run_cli(_main, argv)
