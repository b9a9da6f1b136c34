"""Stage S0: what the card does, measured first, so that the stages plan from it.

Pre-training steps/s at 1, 3 and 6 processes at once (scratch runs of the stage's study
for a few blocks, sharing one compilation cache), fine-tuning steps/s and compile time
per task (two seeds a task from the first run's step-0 checkpoint: the first compiles, the
second finds the cache), that the gradients of the positional terms are equal between the
fused and the einsum attention (`tests/test_fused_gradients.py`), and the headline rows of
the GPU benchmark. `summarize` turns what came back into `calibration.json`: the `pace`
that `experiments.stage.estimate` reads, and the plan it gives.
"""

import glob
import json
import os
import sys

from experiments import records
from experiments.config import StudyError, load_config


def calibration_jobs(spec, tiny, work, pretrain, then):
    """The S0 processes, `(label, command, ready)`: the pre-training rounds one after the
    other, then fine-tuning (from the first round's step-0 checkpoint) and the gradient
    test, then the benchmark alone, then the summary."""
    from experiments.stage import TINY, load_stages

    folder = os.path.join(work, "calibration")
    ended = {}
    jobs, previous, paces = [], [], []
    for n in spec["processes"]:
        config = _write(folder, f"pace_{n}.json", {
            **_raw(pretrain), "study": f"pace_{n}", "variants": {
                f"p{i}": {"variant": "bert_a"} for i in range(n)}})
        until = spec["blocks"] * pretrain["settings"]["eval_every"]
        labels = [f"pace {n} p{i}" for i in range(n)]
        jobs += [(label, _run("pretrain", config, "--variants", f"p{i}", "--until-step",
                              str(until)), lambda after=tuple(previous): _all(ended, after))
                 for i, label in enumerate(labels)]
        previous = labels
        paces += labels  # timed alone: what follows waits for every round
    for task in then["tasks"]:
        examples = TINY["examples"] if tiny else 2000
        config = _write(folder, f"finetune_{task}.json", {
            **_raw(then), "study": f"finetune_{task}", "pretrain_configs": ["pace_1.json"],
            "variants": ["p0"], "checkpoints": [0.0], "checkpoint_variants": {"0.0": ["p0"]},
            "tasks": [task], "learning_rates": then["learning_rates"][:1], "seeds": [0, 1],
            "selection_seed": None, "edge_learning_rates": [],
            "task_settings": {task: {"max_train_examples": examples}},
            "settings": {**then["settings"], "epochs": 1, "pad_each_batch": False}})
        jobs.append((f"finetune {task}", _run("finetune", config),
                     lambda: _all(ended, paces)))
    jobs.append(("gradients", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/test_fused_gradients.py"], lambda: _all(ended, paces)))
    if spec.get("benchmark"):  # alone, after the rest
        others = [label for label, _, _ in jobs]
        command = load_stages()["benchmark"] + spec["benchmark"].split()
        jobs.append(("benchmark", [sys.executable, "-m", *command, "--out",
                                   os.path.join(work, "logs", "benchmark"), "--overwrite",
                                   *(TINY["benchmark"] if tiny else [])],
                     lambda: _all(ended, others)))
    others = [label for label, _, _ in jobs]
    jobs.append(("summary", [sys.executable, "-m", "experiments.calibrate", work],
                 lambda: _all(ended, others)))
    return jobs, ended, os.path.join(folder, "results")


def _raw(config):
    return {k: v for k, v in config.items() if not k.startswith("_") and k not in (
        "base", "references", "seed", "overrides", "ceiling")}


def _write(folder, name, raw):
    os.makedirs(folder, exist_ok=True)
    raw.update(runs_dir=os.path.join(folder, "runs"), results_dir=os.path.join(folder, "results"))
    path = os.path.join(folder, name)
    records.write_json(path, raw)
    return load_config(path)


def _run(command, config, *extra):
    return [sys.executable, "-m", "experiments.run", command, *config["_flag"], *extra]


def _all(ended, labels):
    return all(ended.get(label) for label in labels)


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
    from experiments.stage import estimate, gpu_pace, stage_configs, stage_spec

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
