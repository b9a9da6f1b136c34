"""Stage S0: what the card does, measured first, so that the stages plan from it.

Pre-training steps/s at 1, 3 and 6 processes at once (scratch runs of the stage's study
for a few blocks, sharing one compilation cache), fine-tuning steps/s and compile time
per task (two seeds a task from the first run's step-0 checkpoint: the first compiles, the
second finds the cache), that the gradients of the positional terms are equal between the
fused and the einsum attention (`tests/test_fused_gradients.py`), and the headline rows of
the GPU benchmark. `experiments.stage.calibration_jobs` runs them; `summarize` turns what
came back into `calibration.json`: the `pace` that `experiments.stage.estimate` reads, and
the plan it gives.
"""

import glob
import json
import os
import sys

from experiments import records
from experiments.config import StudyError, load_config
from experiments.stage import estimate, gpu_pace, stage_configs, stage_spec


def summarize(work):
    """`logs/calibration.json` from the scratch runs' records and the stage record."""
    folder = os.path.join(work, "calibration")
    stage = records.read_json(os.path.join(work, "logs", "stage.json"), {})
    seconds = {p["run"]: p.get("seconds") for p in stage.get("processes", [])}
    rounds = {}
    for path in sorted(glob.glob(os.path.join(folder, "pace_*.json"))):
        config = load_config(path)
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
        cold, warm = records.read_jsonl(path)[:2]
        steps = -(-warm["train_examples"] // records.read_json(path.replace(
            "results.jsonl", "finetune_settings.json"))["settings"]["batch_size"])
        tasks[warm["task"]] = {"steps": steps, "warm_seconds": warm["train_seconds"],
                               "compile_seconds": cold["train_seconds"] - warm["train_seconds"],
                               "process_seconds": seconds.get(f"finetune {warm['task']}")}
    report = records.read_json(os.path.join(work, "logs", "benchmark", "benchmark.json"), {})
    pace = {k: v for k, v in gpu_pace().items() if k not in ("basis", "calibrated")}
    pace.update(pretrain_step_seconds=best / rounds[best]["total"], at_once=best,
                install_seconds=stage.get("install_seconds", 0))
    if tasks:
        pace.update(finetune_step_seconds=max(t["warm_seconds"] / t["steps"]
                                              for t in tasks.values()),
                    finetune_start_seconds=max(t["process_seconds"] - t["warm_seconds"] * 2
                                               for t in tasks.values()))
    if report.get("rows"):  # training rows; an inference row at the estimate's ratio
        row = seconds["benchmark"] / len(report["rows"])
        pace["benchmark_row_seconds"] = {"train": row, "infer": row * 25 / 60}
    spec = stage_spec("S1")  # its plan at this pace; at --tiny, with the tiny configs
    tiny = os.path.exists(os.path.join(work, "pretrain.json"))
    try:
        plan = estimate("S1", spec, {**pace, "basis": "this calibration"},
                        stage_configs(spec, tiny, work))
    except StudyError as error:
        plan = [str(error)]
    records.write_json(os.path.join(work, "logs", "calibration.json"), {
        "pace": pace, "plan": plan, "pretrain_rounds": rounds, "finetune_tasks": tasks,
        "gradients_exit": next((p["exit"] for p in stage.get("processes", [])
                                if p["run"] == "gradients"), None),
        "benchmark_rows": report.get("rows", []), "card": stage.get("card")})
    print(json.dumps(pace, indent=2), *plan, sep="\n")


if __name__ == "__main__":
    summarize(sys.argv[1])
