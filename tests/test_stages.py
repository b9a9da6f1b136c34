"""The GPU stages (`experiments/stage.py`): defined, sized, stopped in time, packed and
collected without loss; S1, S2 and S6 rehearsed end to end at tiny size under JAX without
TensorFlow (S3 and S4 are S1 with other seeds)."""

import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time

import pytest

from experiments import records, stage
from experiments.config import StudyError, load_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
NO_TENSORFLOW = os.path.join(REPO, "tests", "no_tensorflow")
DATA = os.path.join(REPO, "..", "shared", "data")


def test_every_stage_names_configs_that_load_and_fit_its_window():
    stages = stage.load_stages()["stages"]
    assert {"S1", "S2", "S3", "S4", "S6"} <= set(stages)
    for name, spec in stages.items():
        assert spec["deadline_seconds"] <= stage.load_stages()["limits"]["call_seconds"]
        pretrain, finetune = stage.stage_configs(spec)
        if pretrain and not spec.get("blocked"):
            stage._check_time(name, spec, pretrain)  # raises when it would not fit
        if finetune:
            assert finetune["pretrain_configs"] == [spec["pretrain"]]


def test_s1_trains_the_plateau_control_and_fine_tunes_what_it_trained():
    pretrain, finetune = stage.stage_configs(stage.stage_spec("S1"))
    long_v2 = load_config("long_v2_jax")
    assert pretrain["settings"] == long_v2["settings"]
    assert pretrain["variants"]["bert_a_pre"] == {"variant": "bert_a",
                                                  "layer_norm_position": "pre"}
    assert finetune["checkpoints"] == [1.0, 0.3, 0.0]
    assert finetune["checkpoint_variants"] == {"0.3": ["tupe_a"], "0.0": ["bert_a"]}
    assert finetune["tasks"] == ["sst2", "stsb", "rte", "cola", "mrpc"]


def test_a_stage_too_long_for_its_window_is_refused_with_the_figure(monkeypatch):
    spec = {**stage.stage_spec("S1"), "variants": ["a", "b", "c", "d", "e"]}
    monkeypatch.setattr(stage, "stage_spec", lambda name: spec)
    with pytest.raises(StudyError, match=r"5 pre-training runs need about \d+ s .* more than "
                                         r"its pretrain_seconds 400"):
        stage.prepare("S1", dest="unused")


def test_a_blocked_stage_is_refused_with_its_reason():
    with pytest.raises(StudyError, match="Stage S5a cannot run on the lent machine yet: the "
                                         "length evaluation"):
        stage.prepare("S5a", dest="unused")


def test_runs_past_the_deadline_are_stopped_and_said_so(tmp_path):
    os.makedirs(tmp_path / "logs")
    sleep = [sys.executable, "-c", "import time; time.sleep(60)"]
    quick = [sys.executable, "-c", "print('done')"]
    start = time.time()
    done = stage._run_all([quick, sleep], ["quick", "slow"], time.time() + 3, str(tmp_path))
    assert time.time() - start < 3 + stage.STOP_GRACE_SECONDS
    by_run = {d["run"]: d for d in done}
    assert by_run["quick"]["exit"] == 0 and not by_run["quick"]["stopped"]
    assert by_run["slow"]["stopped"] and by_run["slow"]["exit"] != 0
    assert (tmp_path / "logs" / "quick.log").read_text().strip() == "done"


def test_what_comes_back_is_unpacked_and_never_replaces_a_differing_record(tmp_path):
    config = {"results_dir": str(tmp_path / "there"), "study": "stage_x"}
    folder = records.record_dir(config, "bert_a")
    os.makedirs(folder)
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write("step,loss\n200,6.1\n")
    os.makedirs(tmp_path / "work" / "logs")
    (tmp_path / "work" / "logs" / "stage_pretrain.json").write_text('{"stage": "SX"}')
    names = stage.pack([config], str(tmp_path / "work"), str(tmp_path / "out"))
    assert names == [stage.PACK]
    here = str(tmp_path / "here")
    written = stage.collect("SX", str(tmp_path / "out"), results_dir=here)
    assert sorted(os.path.relpath(p, here) for p in written) == [
        "records/stage_x/bert_a/metrics.csv", "records/stages/SX/logs/stage_pretrain.json"]
    assert stage.collect("SX", str(tmp_path / "out"), results_dir=here) == written  # same bytes
    with open(written[0], "w") as f:
        f.write("step,loss\n200,9.9\n")  # a record that differs is never replaced silently
    with pytest.raises(StudyError, match="exists with other content"):
        stage.collect("SX", str(tmp_path / "out"), results_dir=here)
    assert open(written[0]).read() == "step,loss\n200,9.9\n"


def test_a_machine_without_keras_hub_is_told_which_wheel_to_carry(tmp_path):
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['keras_hub'] = None\n")
    code = ("from experiments import stage\n"
            "try:\n    stage._check_packages('.stage/S1')\n"
            "except Exception as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout
    # jax is named too where it is absent (as in `make test`'s environment).
    assert re.search(r"lacks keras-hub(, jax)?: carry their wheels \(\.stage/S1/wheels/", out), out


def test_s3_and_s4_are_s1_with_seeds_1_and_2_also_at_tiny_size(tmp_path):
    s1 = stage.stage_spec("S1")
    s1_pretrain, s1_finetune = stage.stage_configs(s1)
    s1_tiny = stage.stage_configs(s1, tiny=True, work=str(tmp_path / "S1"))[0]
    assert s1_tiny["settings"]["seed"] == s1_pretrain["settings"]["seed"] == 0
    for name, seed in (("S3", 1), ("S4", 2)):
        spec = stage.stage_spec(name)
        assert {k: v for k, v in spec.items() if k not in ("pretrain", "finetune", "description")
                } == {k: v for k, v in s1.items() if k not in ("pretrain", "finetune",
                                                               "description")}
        pretrain, finetune = stage.stage_configs(spec)
        assert pretrain["settings"] == {**s1_pretrain["settings"], "seed": seed}
        for key in ("size", "vocabulary", "variants", "runs_dir", "results_dir"):
            assert pretrain[key] == s1_pretrain[key], key
        assert finetune["pretrain_configs"] == [pretrain["study"]]
        same = ("study", "pretrain_configs", "description", "_flag", "_path")
        assert {k: v for k, v in finetune.items() if k not in same} == {
            k: v for k, v in s1_finetune.items() if k not in same}
        tiny = stage.stage_configs(spec, tiny=True, work=str(tmp_path / name))[0]
        assert tiny["settings"] == {**s1_tiny["settings"], "seed": seed,
                                    "shards": tiny["settings"]["shards"],
                                    "valid_shards": tiny["settings"]["valid_shards"]}


def _rehearse(name, tmp_path):
    """prepare (here, with TensorFlow), then run in a process where TensorFlow cannot be
    imported (nor in the processes it starts), then collect. Returns the files collected
    and the stage's log."""
    dest = str(tmp_path / "stage")
    lines = stage.prepare(name, tiny=True, dest=dest)
    assert lines[-1].endswith(f"python3 -m experiments.stage run {name} --tiny --out $OUT")
    assert "travels:" in lines[2]
    env = {**os.environ, "PYTHONPATH": NO_TENSORFLOW, "KERAS_BACKEND": "jax"}
    folder = os.path.join(dest, name + "_tiny")
    code = ("import sys; from experiments import stage; "
            f"stage.run({name!r}, {str(tmp_path / 'out')!r}, tiny=True, deadline=1500, "
            f"folder={folder!r})")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    limits = stage.load_stages()["limits"]
    packed = os.listdir(tmp_path / "out")
    assert packed == [stage.PACK]  # what comes back: within its limits
    assert os.path.getsize(tmp_path / "out" / stage.PACK) <= limits["back_file_bytes"]
    written = stage.collect(name, str(tmp_path / "out"), results_dir=str(tmp_path / "back"))
    log = json.load(open(next(p for p in written if p.endswith("stage_pretrain_finetune.json"))))
    assert log["processes"] and all(p["exit"] == 0 for p in log["processes"]), log
    return written, log


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs ../shared/data (the text and GLUE)")
def test_s1_rehearsed_at_tiny_size_under_jax_without_tensorflow(tmp_path):
    """Every pre-training run finishes and every fine-tuning job scores its tasks."""
    written, _ = _rehearse("S1", tmp_path)
    for variant in ("bert_a", "tupe_a", "bert_a_pre"):
        run = json.load(open(tmp_path / "back" / "records" / "stage_s1" / variant /
                             "run_config.json"))
        assert run["status"] == "finished" and run["last_step"] == 10
    results = [p for p in written if p.endswith("results.jsonl")]
    assert len(results) == 5  # three final encoders, TUPE-A at 30%, the initialization
    for path in results:
        rows = records.read_jsonl(path)
        assert {row["task"] for row in rows} == {"sst2", "stsb"}
        for row in rows:
            assert math.isfinite(row["dev"]["validation"]["score"]), row


@pytest.mark.slow
@pytest.mark.jax
def test_s2_rehearsed_at_tiny_size_under_jax_without_tensorflow(tmp_path):
    """The benchmark command runs with the stage's precision, XLA and flash axes at the tiny
    size, and its report comes back: a measured row per model, mode and attention path."""
    written, log = _rehearse("S2", tmp_path)
    assert [p["run"] for p in log["processes"]] == ["benchmark"]
    report = json.load(open(next(p for p in written if p.endswith("logs/benchmark.json"))))
    settings = report["settings"]
    assert (settings["backend"], settings["size"], settings["seq_lens"]) == ("jax", "tiny", [32])
    assert (settings["precisions"], settings["xla"], settings["flash"]) == (
        ["mixed_bfloat16"], [True], [False, True])  # the stage's own, from stages.json
    variants = ["bert_a", "tupe_r", "keras_hub_bert"]
    assert sorted((r["variant"], r["mode"], r["flash"]) for r in report["rows"]) == sorted(
        (v, mode, flash) for v in variants for mode in ("train", "infer")
        for flash in (False, True))
    for row in report["rows"]:
        assert row["status"] == "ok", row.get("error")
        assert row["tokens_per_s"] > 0 and row["precision"] == "mixed_bfloat16"
    assert any(p.endswith("logs/benchmark.md") for p in written)


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs ../shared/data (the text and SQuAD)")
def test_s6_rehearsed_at_tiny_size_under_jax_without_tensorflow(tmp_path):
    """Huang's four encoders pre-train, and each final encoder is scored on SQuAD (the
    offline article split of a few articles) in one run of the protocol."""
    written, _ = _rehearse("S6", tmp_path)
    variants = ("bert_a", "shaw", "huang_m3", "huang_m4")
    for variant in variants:
        run = json.load(open(tmp_path / "back" / "records" / "huang_long" / variant /
                             "run_config.json"))
        assert run["status"] == "finished" and run["last_step"] == 10
    results = sorted(p for p in written if p.endswith("results.jsonl"))
    assert [p.split(os.sep)[-3] for p in results] == sorted(variants)  # the final encoders
    for path in results:
        (row,) = records.read_jsonl(path)  # one rate, one seed
        assert row["task"] == "squad" and 0 < row["eval_questions"] <= (
            stage.TINY_SQUAD_QUESTIONS)  # the held-out article's first paragraph
        assert row["train_features"] >= stage.TINY_SQUAD["max_train_examples"]  # windows
        assert math.isfinite(row["dev"]["eval"]["f1"]), row
