"""Stage S0's summary: what the card measured (experiments/README.md, "The GPU stages"), as
the `pace` that `experiments.stage.prepare.estimate` reads and S1's plan at that pace."""

import glob
import json
import os
import sys

from experiments import records
from experiments.config import StudyError, load_config
from experiments.stage import prepare, specs


def summarize(work):
    """`logs/calibration.json` from the scratch runs' records and the stage record."""
    folder = os.path.join(work, "calibration")
    stage = records.read_json(os.path.join(work, "logs", "stage.json"), {})
    seconds = {p["run"]: p.get("seconds") for p in stage.get("processes", [])}
    rounds = {}
    for config in map(load_config, sorted(glob.glob(os.path.join(folder, "pace_*.json")))):
        tokens = config["settings"]["batch_size"] * config["settings"]["seq_len"]
        rates = [rows[-1]["tokens_per_second"] / tokens for rows, _ in (
            records.read_metrics(os.path.join(config["runs_dir"], config["study"], name))
            for name in config["variants"]) if rows]
        rounds[len(config["variants"])] = {"steps_per_s_each": rates, "total": sum(rates)}
    best = max((n for n in rounds if rounds[n]["total"]), key=lambda n: rounds[n]["total"])
    tasks = {}
    for path in glob.glob(os.path.join(folder, "results", "records", "finetune_*", "*", "*",
                                       "*", "results.jsonl")):
        if len(records.read_jsonl(path)) < 2:
            continue  # its process did not finish both runs: no pace from it
        cold, warm = records.read_jsonl(path)[:2]  # the second finds the compilation cache
        steps = -(-warm["train_examples"] // records.read_json(path.replace(
            "results.jsonl", "finetune_settings.json"))["settings"]["batch_size"])
        tasks[warm["task"]] = {"steps": steps, "warm_seconds": warm["train_seconds"],
                               "compile_seconds": cold["train_seconds"] - warm["train_seconds"],
                               "process_seconds": seconds.get(f"finetune {warm['task']}")}
    pace = {k: v for k, v in specs.gpu_pace().items() if k not in ("basis", "calibrated")}
    pace.update(pretrain_step_seconds=best / rounds[best]["total"], at_once=best,
                install_seconds=stage.get("install_seconds", 0))
    if tasks:
        pace.update(finetune_step_seconds=max(t["warm_seconds"] / t["steps"]
                                              for t in tasks.values()),
                    finetune_start_seconds=max(t["process_seconds"] - t["warm_seconds"] * 2
                                               for t in tasks.values()))
    spec = specs.stage_spec("S1")  # its plan at this pace; at --tiny, with the tiny configs
    try:
        configs = specs.stage_configs(spec, os.path.exists(os.path.join(work, "pretrain.json")),
                                      work)
        plan = prepare.estimate("S1", spec, {**pace, "basis": "this calibration"}, configs)
    except StudyError as error:
        plan = [str(error)]
    records.write_json(os.path.join(work, "logs", "calibration.json"), {
        "pace": pace, "plan": plan, "pretrain_rounds": rounds, "finetune_tasks": tasks,
        "gradients_exit": next((p["exit"] for p in stage.get("processes", [])
                                if p["run"] == "gradients"), None), "card": stage.get("card")})
    print(json.dumps(pace, indent=2), *plan, sep="\n")


if __name__ == "__main__":
    summarize(sys.argv[1])
