"""The study runner of `experiments/`: tiny studies end to end on real text.

One module-scoped fixture pre-trains two tiny studies (2 + 1 variants, 4 steps) on a few
hundred lines of enwiki; the tests then record, report, resume, evaluate at longer
lengths, fine-tune and draw maps from those runs. Tests that change runs or records work
on a copy (`_copy_study`).
"""

import copy
import csv
import hashlib
import json
import os
import re
import shutil
from pathlib import Path

import numpy as np
import pytest

from experiments import config as study_config
from experiments import floors, length_study, plans, records
from experiments import report as report_module
from experiments import report_finetuning, report_pretraining
from experiments import run as run_module
from experiments.run import main
from experiments.stage.specs import load_stages
from keras_tupe import data
from keras_tupe.data import glue

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI = DATA_DIR / "enwiki"
GLUE = DATA_DIR / "glue"
# Under `--dist loadgroup` (Makefile): one worker pre-trains the study (three runs) that the
# tests share, not each worker that runs one of them.
pytestmark = pytest.mark.xdist_group("test_experiments")


def _head(source, target, lines):
    with open(source, encoding="utf-8") as f:
        text = [next(f) for _ in range(lines)]
    target.write_text("".join(text), encoding="utf-8")
    return str(target)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("study")
    train = _head(ENWIKI / "train.txt", root / "train.txt", 400)
    valid = _head(ENWIKI / "valid.txt", root / "valid.txt", 300)
    runs, results = str(root / "runs"), str(root / "results")
    configs = root / "configs"
    configs.mkdir()
    pretrain = {
        "study": "pretrain", "kind": "pretrain", "runs_dir": runs, "results_dir": results,
        "size": "tiny",
        "vocabulary": {"file": f"{runs}/vocab.txt", "corpus": [train], "vocabulary_size": 300,
                       "lines": 400, "lowercase": True},
        "settings": {"corpus": [train], "valid_corpus": [valid], "steps": 4, "batch_size": 8,
                     "seq_len": 32, "learning_rate": 1e-3, "warmup_ratio": 0.25,
                     "eval_every": 2, "valid_batches": 2, "save_steps": [0, 2], "seed": 0,
                     "shuffle_buffer": 64, "xla": False},
        "variants": {"bert_a": {}, "tupe_r": {}},
    }
    relative = {"study": "relative", "extends": "pretrain.json",
                "variants": {"huang_m4_k8": {"variant": "huang_m4", "max_relative_distance": 8}}}
    length = {"study": "length", "kind": "length", "runs_dir": runs, "results_dir": results,
              "pretrain_configs": ["pretrain.json", "relative.json"], "lengths": [32, 256],
              "valid_corpus": [valid], "tokens_per_batch": 256, "batches": 2, "seed": 1}
    finetune = {"study": "finetune", "kind": "finetune", "runs_dir": runs,
                "results_dir": results, "pretrain_configs": ["pretrain.json"],
                "variants": ["bert_a"], "checkpoints": [0.5, 1.0], "tasks": ["rte"],
                "data_dir": str(GLUE), "learning_rates": [1e-4], "seeds": [0],
                "settings": {"epochs": 1, "batch_size": 8, "seq_len": 32,
                             "max_train_examples": 16, "xla": False}}
    paths = {}
    for name, content in [("pretrain", pretrain), ("relative", relative), ("length", length),
                          ("finetune", finetune)]:
        paths[name] = str(configs / f"{name}.json")
        Path(paths[name]).write_text(json.dumps(content, indent=2))
    for name in ("pretrain", "relative"):
        assert main(["pretrain", "--config", paths[name], "--verbose", "0"]) == 0
    # The floors the fine-tuning tables read, as `python -m experiments.floors` makes them.
    floors.record_floors([{"results_dir": results, "tasks": ["mrpc", "rte"],
                           "data_dir": str(GLUE)}])
    return {"root": root, "runs": Path(runs), "results": Path(results), "configs": paths}


def _copy_study(study, target):
    """The fixture's study copied to `target`: its runs, records and results there (the
    corpus, which the runs record, where it was)."""
    root = str(study["root"])
    shutil.copytree(root, target)
    configs = {}
    for name, path in study["configs"].items():
        copied = Path(str(path).replace(root, str(target)))
        text = copied.read_text()
        for folder in ("runs", "results"):
            text = text.replace(f"{root}/{folder}", f"{target}/{folder}")
        copied.write_text(text)
        configs[name] = str(copied)
    return {"root": target, "runs": target / "runs", "results": target / "results",
            "configs": configs}


def _studies_file(copy):
    """The copy's studies in one file of studies by name, as `experiments/studies.json`
    holds the shipped ones (a `.json` reference becomes the study's name)."""
    studies = {}
    for name, path in copy["configs"].items():
        text = Path(path).read_text()
        for other in copy["configs"]:
            text = text.replace(f'"{other}.json"', f'"{other}"')
        studies[name] = json.loads(text)
    path = Path(copy["root"]) / "studies.json"
    path.write_text(json.dumps(studies, indent=2))
    return str(path)


def _table_row(table, name):
    line = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.split("|")[1:-1]]


def read_val_loss(folder):
    with open(Path(folder) / "metrics.csv") as f:
        return {int(r["step"]): float(r["val_loss"]) for r in csv.DictReader(f)}


def _record(results, study, variant):
    return Path(results) / "records" / study / variant


# === Pre-training: identical runs, each recorded ===

def test_every_variant_trained_with_the_same_settings_and_recorded(study):
    runs, results = study["runs"], study["results"]
    vocabulary = json.loads((runs / "vocab.json").read_text())
    configs = {}
    for study_name, variant in (("pretrain", "bert_a"), ("pretrain", "tupe_r"),
                                ("relative", "huang_m4_k8")):
        run, record = runs / study_name / variant, _record(results, study_name, variant)
        assert (run / "vocab.txt").read_bytes() == (runs / "vocab.txt").read_bytes()
        assert (record / "metrics.csv").read_text() == (run / "metrics.csv").read_text()
        saved = json.loads((record / "run_config.json").read_text())
        assert saved["config"] == json.loads((run / "run_config.json").read_text())["config"]
        assert (saved["status"], saved["last_step"]) == ("finished", 4)
        assert saved["wall_seconds"] == records.read_metrics(run)[1] > 0
        assert saved["vocabulary"] == vocabulary
        assert saved["vocabulary_sha256"] == vocabulary["sha256"]
        configs[variant] = saved["config"]
    presets = {name: c.pop("preset") for name, c in configs.items()}
    assert presets == {"bert_a": "bert_a_tiny", "tupe_r": "tupe_r_tiny",
                       "huang_m4_k8": "huang_m4_tiny"}
    # A variant's structural change is its run's `backbone_overrides` on the library preset.
    assert configs["huang_m4_k8"].pop("backbone_overrides") == {"max_relative_distance": 8}
    for c in configs.values():
        c.pop("out")
    assert len({json.dumps(c, sort_keys=True) for c in configs.values()}) == 1
    backbone = json.loads((_record(results, "relative", "huang_m4_k8") / "run_config.json")
                          .read_text())["backbone_config"]
    assert backbone["max_relative_distance"] == 8 and backbone["relative_position"] == "method4"
    from keras_tupe_base.presets import PRESETS

    assert "huang_m4_k8_tiny" not in PRESETS  # nothing patches the library's presets


def test_a_finished_run_is_skipped_and_a_recorded_one_without_its_folder_too(study, tmp_path,
                                                                          capsys):
    copy = _copy_study(study, tmp_path / "copy")
    mlm = copy["runs"] / "pretrain" / "bert_a" / "preset" / "task.weights.h5"
    before = mlm.stat().st_mtime_ns
    shutil.rmtree(copy["runs"] / "pretrain" / "tupe_r")
    assert main(["pretrain", "--config", copy["configs"]["pretrain"], "--verbose", "0"]) == 0
    out = capsys.readouterr().out
    assert "bert_a: finished, skipped" in out and "bert_a: finished, recorded in" in out
    assert re.search(r"tupe_r: recorded in .*records/pretrain/tupe_r/run_config\.json, its "
                     r"run folder is not here: skipped", out)
    assert not (copy["runs"] / "pretrain" / "tupe_r").exists()
    assert mlm.stat().st_mtime_ns == before

def test_record_only_records_runs_trained_elsewhere_and_trains_nothing(study, tmp_path, capsys):
    # A run brought back from another machine (a GPU stage, experiments/stage/) with its log and
    # settings but not its models; its encoder config beside it as backbone_config.json.
    copy = _copy_study(study, tmp_path / "copy")
    run = copy["runs"] / "pretrain" / "bert_a"
    (run / "backbone_config.json").write_bytes((run / "preset" / "config.json").read_bytes())
    shutil.rmtree(run / "preset")
    shutil.rmtree(copy["runs"] / "pretrain" / "tupe_r")
    assert main(["pretrain", "--config", copy["configs"]["pretrain"], "--record-only"]) == 0
    out = capsys.readouterr().out
    assert ("[pretrain] bert_a: trained all its steps; the final model is not in its run "
            "folder, recorded") in out
    assert "[pretrain] tupe_r: no run folder" in out
    assert not (copy["runs"] / "pretrain" / "tupe_r").exists()  # nothing trained
    record = json.loads((_record(copy["results"], "pretrain", "bert_a")
                         / "run_config.json").read_text())
    original = json.loads((_record(study["results"], "pretrain", "bert_a")
                           / "run_config.json").read_text())
    assert record["status"] != original["status"] == "finished"
    assert record["backbone_config"] == original["backbone_config"] is not None
    assert record["last_step"] == 4


def test_the_full_report_passes_over_a_finetuning_study_that_has_only_pinned_its_settings(
        study, tmp_path, monkeypatch):
    copy = _copy_study(study, tmp_path / "copy")
    monkeypatch.setattr(study_config, "STUDIES_FILE", _studies_file(copy))
    pinned = _record(copy["results"], "finetune", "pretrain") / "bert_a" / "step_0000004"
    pinned.mkdir(parents=True)
    (pinned / run_module.SETTINGS_FILE).write_text("{}")  # a study started, no result yet
    pages = report_module.report()
    assert "pretrain table" in pages and not any(key.startswith("finetune ") for key in pages)
    (pinned / "results.jsonl").write_text("")  # a results file: the study is reported (and
    with pytest.raises(study_config.StudyError, match="No fine-tuning result yet"):  # empty)
        report_module.report()
    (pinned / "results.jsonl").unlink()  # the oldest studies' summary file is no record
    (pinned / "summary.json").write_text("{}")
    pages = report_module.report()
    assert "pretrain table" in pages and not any(key.startswith("finetune ") for key in pages)


def test_the_frozen_studies_keep_their_committed_pages():
    """`finetune` and `finetune_intermediate` ran before each fine-tuning run was recorded:
    the report writes no page of theirs, and refuses to when named (so does the runner)."""
    configs = {name: study_config.load_config(name) for name in study_config.studies()}
    assert sorted(name for name, c in configs.items() if c.get("frozen")) == [
        "finetune", "finetune_intermediate"]
    for name in ("finetune", "finetune_intermediate"):
        with pytest.raises(study_config.StudyError, match="frozen as committed"):
            report_module.report(name)
        assert main(["finetune", "--study", name]) == 2


def test_seed_groups_in_one_figure_must_share_budget_model_and_vocabulary(tmp_path):
    every = [study_config.load_config(name) for name in sorted(study_config.studies())]
    groups = report_pretraining.seed_groups([c for c in every if c["kind"] == "pretrain"])
    (old_label, new_label), = [[label for _, label in c["groups"]] for c in every
                               if c["kind"] == "compare_seeds"]
    old, new = (copy.deepcopy(groups["long"]), copy.deepcopy(groups["long_v2_jax"]))
    pages = report_pretraining.group_figure([(old_label, *old), (new_label, *new)], "x", tmp_path)
    assert Path(pages["png"]) == tmp_path / "x.png" and (tmp_path / "x.png").stat().st_size
    longer = copy.deepcopy(new)
    for config in longer[0]:
        config["settings"]["steps"] = 32_000
    with pytest.raises(study_config.StudyError, match=r"differ in \['steps'\]"):
        report_pretraining.group_figure([(old_label, *old), (new_label, *longer)], "x",
                                        tmp_path)


def test_the_table_columns_add_each_saved_checkpoint_that_an_evaluation_falls_on():
    long = {"settings": {"steps": 16000, "eval_every": 200, "save_steps": [0, 4800, 8000]}}
    assert list(report_pretraining.fraction_steps(long).items()) == [
        (0.25, 4000), (0.3, 4800), (0.5, 8000), (1.0, 16000)]
    # A checkpoint between evaluations has no validation loss of its own: no column.
    off_grid = {"settings": {"steps": 2000, "eval_every": 100, "save_steps": [650, 1000]}}
    assert list(report_pretraining.fraction_steps(off_grid).items()) == [
        (0.25, 500), (0.5, 1000), (1.0, 2000)]


def test_report_is_a_pure_function_of_the_records(study, tmp_path, monkeypatch):
    copy = _copy_study(study, tmp_path / "copy")
    results = copy["results"]
    monkeypatch.setattr(study_config, "STUDIES_FILE", _studies_file(copy))
    assert main(["report"]) == 0
    pages = {p: p.read_bytes() for p in results.iterdir() if p.is_file()}
    assert {p.name for p in pages} >= {f"{s}_{k}" for s in ("pretrain", "relative") for k in (
        "loss.csv", "val_loss.png", "pairs.csv", "table.md", "config.json")}
    rows = records.read_csv_rows(results / "pretrain_loss.csv")
    loss = {(r["variant"], int(r["step"])): float(r["val_loss"]) for r in rows}
    for variant in ("bert_a", "tupe_r"):
        logged = read_val_loss(_record(results, "pretrain", variant))
        assert {s: loss[variant, s] for s in (2, 4)} == pytest.approx(logged, abs=1e-5)
    [pair] = records.read_csv_rows(results / "pretrain_pairs.csv")
    diffs = [loss["bert_a", step] - loss["tupe_r", step] for step in (2, 4)]
    assert (pair["a"], pair["b"], pair["evaluations"]) == ("bert_a", "tupe_r", "2")
    assert int(pair["a_lower"]) == sum(d < 0 for d in diffs)
    assert [float(pair[k]) for k in ("diff_min", "diff_max", "diff_final")] == pytest.approx(
        [min(diffs), max(diffs), diffs[1]], abs=2e-5)
    table = (results / "pretrain_table.md").read_text()
    assert "25% (step 2) | 50% (step 2) | 100% (step 4)" in table
    assert re.search(r"\| tupe_r \| tupe_r_tiny \| \d+\.\d{3} \| \d+\.\d{3} \| \d+\.\d{3} \| "
                     r"\d+\.\d{3} \| [^|]+ \| [\d,]+ \| finished \|", table)
    summary = json.loads((results / "relative_config.json").read_text())
    assert summary["runs"]["huang_m4_k8"]["structural_overrides"] == {"max_relative_distance": 8}
    # Without runs/: the same pages, byte for byte (PNGs included).
    shutil.rmtree(copy["runs"])
    for page in pages:
        page.unlink()
    assert main(["report"]) == 0
    assert {p: p.read_bytes() for p in results.iterdir() if p.is_file()} == pages


def test_report_refuses_records_whose_settings_differ(study, tmp_path, capsys):
    copy = _copy_study(study, tmp_path / "copy")
    path = _record(copy["results"], "pretrain", "tupe_r") / "run_config.json"
    tampered = json.loads(path.read_text())
    tampered["config"]["learning_rate"] = 2e-3
    tampered["vocabulary_sha256"] = "0" * 64
    assert tampered["initialization"] == "independent"  # written by keras_tupe.pretraining
    tampered["initialization"] = "shared"  # a run from before the initialization fix
    path.write_text(json.dumps(tampered))
    assert main(["report", "--config", copy["configs"]["pretrain"]]) == 2
    err = capsys.readouterr().err
    assert "not trained identically" in err
    assert re.search(r"tupe_r: learning_rate is 0\.002 in .*tupe_r/run_config\.json, the "
                     r"config says 0\.001", err)
    assert "tupe_r and bert_a differ in learning_rate: 0.002 vs 0.001" in err
    assert "tupe_r: vocabulary sha256 000000" in err
    assert "tupe_r and bert_a differ in initialization: 'shared' vs 'independent'" in err
    assert not (copy["results"] / "pretrain_table.md").exists()


@pytest.mark.parametrize("changes,message", [
    ({"variants": {"tupe_r": {"learning_rate": 1e-4}}}, r"no per-variant tuning"),
    ({"variants": {"bert_x": {}}}, r"'bert_x' is not a preset variant"),
    ({"variants": {"huang_m4": {"max_relative_distance": 8}}}, r"needs a name of its own"),
    ({"size": "huge"}, r"`size` must be one of"),
    ({"settings": {"steps": 4}}, r"missing \['batch_size', 'seq_len'"),
    ({"settings": {"steps": 4, "batch_size": 8, "seq_len": 32, "learning_rate": 1e-3,
                   "seed": 0}}, r"exactly one of `corpus` \(text\) and `shards`"),
    ({"settings": {"corpus": ["x"], "shards": "s", "steps": 4, "batch_size": 8, "seq_len": 32,
                   "learning_rate": 1e-3, "seed": 0}}, r"exactly one of `corpus`"),
    ({"settings": {"corpus": ["x"], "steps": 4, "batch_size": 8, "seq_len": 32,
                   "learning_rate": 1e-3, "seed": 0, "out": "x"}}, r"per-run settings \['out'\]"),
    ({"kind": "other"}, r"`kind` must be one of"),
    ({"study": "Bad-Name"}, r"`study` must be lowercase"),
    ({"seed": 3}, r"`seed` is not a pre-training study's key: a replicate `extends`"),
    ({"references": ["pretrain.json"]}, r"`references` maps another"),
])
def test_a_bad_pretraining_config_is_refused_naming_the_field(study, tmp_path, changes,
                                                              message):
    config = json.loads(Path(study["configs"]["pretrain"]).read_text())
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**config, **changes}))
    with pytest.raises(study_config.StudyError, match=message):
        study_config.load_config(str(path))


@pytest.mark.parametrize("content,message", [
    ({"base": "configs/pretrain.json"}, r"`base` is not a study key: write `extends`"),
    ({"extends": "configs/pretrain.json", "overrides": {"learning_rate": 3e-3}},
     r"`overrides` is not a study key: write `settings`, key by key"),
    ({"extends": "configs/pretrain.json", "seed": 7}, r"a replicate `extends` the study it "
                                                      r"repeats and sets `settings.seed`"),
    ({"extends": "child.json"}, r"`extends` goes round: \S*child.json -> \S*child.json\."),
])
def test_a_replicate_extends_the_study_it_repeats_and_sets_its_seed(study, content, message):
    folder = Path(study["configs"]["pretrain"]).parent
    path = folder.parent / "child.json"  # beside, not in, the configs folder `report` reads
    path.write_text(json.dumps({"study": "child", "variants": {"tupe_r": {}}, **content}))
    with pytest.raises(study_config.StudyError, match=message):
        study_config.load_config(str(path))
    path.write_text(json.dumps({"study": "child", "extends": "configs/pretrain.json",
                                "settings": {"seed": 7, "learning_rate": 3e-3,
                                             "precision": "mixed_bfloat16"},
                                "variants": {"tupe_r": {}}}))
    base, child = (study_config.load_config(p) for p in (study["configs"]["pretrain"], path))
    assert child["settings"] == {**base["settings"], "seed": 7, "learning_rate": 3e-3,
                                 "precision": "mixed_bfloat16"}
    run = study_config.pretrain_config(child, study_config.variants(child)[0]).resume_key()
    original = study_config.pretrain_config(base, study_config.variants(base)[1]).resume_key()
    assert {**run, "seed": 0, "learning_rate": 1e-3, "precision": "float32",
            "out": original["out"]} == original


# === Stopping and resuming ===

@pytest.mark.slow
def test_a_run_stopped_at_until_step_is_recorded_and_resumes_to_the_uninterrupted_weights(
        study, tmp_path, capsys):
    import keras
    import keras_hub

    copy = _copy_study(study, tmp_path / "copy")
    config, run = copy["configs"]["pretrain"], copy["runs"] / "pretrain" / "tupe_r"
    record = _record(copy["results"], "pretrain", "tupe_r")
    shutil.rmtree(run)
    shutil.rmtree(record)
    assert main(["pretrain", "--config", config, "--variants", "tupe_r", "--until-step", "3",
                 "--verbose", "0"]) == 2
    assert re.search(r"until_step must be a positive multiple of eval_every \(2\) and at most "
                     r"steps \(4\)\. Received: 3", capsys.readouterr().err)
    assert not record.exists()  # stopped before its first backup: no run, no record
    assert main(["pretrain", "--config", config, "--variants", "tupe_r", "--until-step", "2",
                 "--verbose", "0"]) == 0
    saved = json.loads((record / "run_config.json").read_text())
    assert (saved["status"], saved["last_step"]) == ("stopped at step 2", 2)
    assert list(read_val_loss(record)) == [2] and saved["backbone_config"] is None
    # The 50% checkpoint is there, the backup kept: the next call resumes after step 2.
    assert (run / "checkpoints" / "step_0000002" / "task.weights.h5").exists()
    assert json.loads((run / "backup" / "training_metadata.json").read_text())["step"] == 2
    # Removed, the initialization is not saved again by the resumed run.
    shutil.rmtree(run / "checkpoints" / "step_0000000")
    assert main(["pretrain", "--config", config, "--variants", "tupe_r", "--verbose", "0"]) == 0
    original = study["runs"] / "pretrain" / "tupe_r"
    assert read_val_loss(run) == read_val_loss(original) == read_val_loss(record)
    resumed = keras_hub.models.MaskedLM.from_preset(str(run / "preset"))
    uninterrupted = keras_hub.models.MaskedLM.from_preset(str(original / "preset"))
    for a, b in zip(resumed.weights, uninterrupted.weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a),
                                      keras.ops.convert_to_numpy(b), err_msg=a.path)
    assert not (run / "checkpoints" / "step_0000000").exists()
    assert json.loads((record / "run_config.json").read_text())["status"] == "finished"


@pytest.mark.parametrize("signal_name,code", [("SIGINT", 130), ("SIGTERM", 143)])
def test_ctrl_c_or_sigterm_during_a_run_leaves_its_record(study, tmp_path, monkeypatch,
                                                          signal_name, code):
    import signal

    import keras_tupe.pretraining

    copy = _copy_study(study, tmp_path / "copy")
    run, record = copy["runs"] / "pretrain" / "tupe_r", _record(copy["results"], "pretrain",
                                                                "tupe_r")
    shutil.rmtree(record)
    shutil.rmtree(run / "preset")  # unfinished, logged to step 2
    lines = (run / "metrics.csv").read_text().splitlines(True)
    (run / "metrics.csv").write_text("".join(line for line in lines if not line.startswith("4,")))

    def stopped(config, until_step=None):  # the signal arrives while it trains
        os.kill(os.getpid(), getattr(signal, signal_name))

    monkeypatch.setattr(keras_tupe.pretraining, "pretrain", stopped)
    # Ctrl-C as in a fresh process: Python's own SIGINT handler, SIGINT not blocked (a test
    # run earlier in this pytest worker can leave either changed: seen once under xdist,
    # where the signal then never arrived and the run ended normally).
    handler = signal.signal(signal.SIGINT, signal.default_int_handler)
    mask = signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
    try:
        assert main(["pretrain", "--config", copy["configs"]["pretrain"], "--variants", "tupe_r",
                     "--verbose", "0"]) == code
    finally:
        signal.pthread_sigmask(signal.SIG_SETMASK, mask)
        signal.signal(signal.SIGINT, handler)
    saved = json.loads((record / "run_config.json").read_text())
    assert (saved["status"], saved["last_step"]) == ("stopped at step 2", 2)
    assert (record / "metrics.csv").read_text() == (run / "metrics.csv").read_text()


def test_wall_time_sums_the_processes_of_a_resumed_run(tmp_path):
    (tmp_path / "metrics.csv").write_text(
        "step,loss,accuracy,val_loss,val_accuracy,learning_rate,tokens_per_second,elapsed_seconds\n"
        "100,7,0.1,6.9,0.1,1e-4,4000,100\n"
        "200,6.5,0.1,6.6,0.1,1e-4,4000,210\n"
        "200,6.5,0.1,6.5,0.1,1e-4,4000,50\n"   # killed before the backup: step 200 again
        "300,6.4,0.1,6.4,0.1,1e-4,4000,160\n")
    rows, wall = records.read_metrics(str(tmp_path))
    assert [r["step"] for r in rows] == [100, 200, 300] and rows[1]["val_loss"] == 6.5
    assert wall == 210 + 160


# === Pages over several studies: references, seeds, comparisons ===

@pytest.mark.slow
def test_references_seed_bands_and_comparisons(study, tmp_path):
    copy = _copy_study(study, tmp_path / "copy")
    folder, results = Path(copy["configs"]["pretrain"]).parent, copy["results"]
    replicate = folder / "seed1.json"
    replicate.write_text(json.dumps({"study": "seed1", "extends": "pretrain.json",
                                     "settings": {"seed": 1},
                                     "references": {"pretrain.json": ["tupe_r", "bert_a"]},
                                     "variants": {"bert_a": {}, "tupe_r": {}}}))
    assert main(["pretrain", "--config", str(replicate), "--verbose", "0"]) == 0
    assert main(["report", "--config", str(replicate)]) == 0
    loss = {(v, seed): read_val_loss(_record(results, name, v))
            for v in ("bert_a", "tupe_r") for seed, name in ((0, "pretrain"), (1, "seed1"))}
    table = (results / "seed1_table.md").read_text()
    reference = _table_row(table, "*tupe_r (pretrain, seed 0)*")
    assert reference[2:5] == [f"{loss['tupe_r', 0][s]:.3f}" for s in (2, 2, 4)]
    assert reference[-1] == "reference: finished"
    # The seed bands of `pretrain` (the study seed1 names) over the variants seed1 names.
    rows = {(r["variant"], int(r["step"])): r
            for r in records.read_csv_rows(results / "pretrain_seeds.csv")}
    assert set(rows) == {(v, s) for v in ("bert_a", "tupe_r") for s in (2, 4)}
    for (v, step), row in rows.items():
        values = [loss[v, 0][step], loss[v, 1][step]]
        assert [float(row[k]) for k in ("mean", "lowest", "highest")] == pytest.approx(
            [np.mean(values), min(values), max(values)], abs=2e-5)
    seeds = (results / "pretrain_seeds.md").read_text()
    gaps = [loss["bert_a", s][4] - loss["tupe_r", s][4] for s in (0, 1)]
    assert (f"| bert_a − tupe_r | 4 | {np.mean(gaps):+.3f} | {gaps[0]:+.3f}, {gaps[1]:+.3f} |"
            in seeds)
    early = [loss["bert_a", s][2] - loss["tupe_r", s][4] for s in (0, 1)]
    assert (f"| bert_a at 50% − tupe_r at 100% | 2 vs 4 | {np.mean(early):+.3f} | "
            f"{early[0]:+.3f}, {early[1]:+.3f} |" in seeds)
    # Studies that differ only in the seed compare too; the first is the reference.
    configs = [study_config.load_config(str(folder / f"{s}.json")) for s in ("pretrain", "seed1")]
    report_pretraining.compare_pages(configs, "lr", "cmd")
    rows = records.read_csv_rows(results / "lr_compare.csv")
    assert [(r["study"], r["variant"], r["step"]) for r in rows] == [
        (s, v, step) for s in ("pretrain", "seed1") for v in ("bert_a", "tupe_r")
        for step in ("2", "4")]
    base_rows = records.read_metrics(_record(results, "pretrain", "bert_a"))[0]
    seed_rows, seed_wall = records.read_metrics(_record(results, "seed1", "bert_a"))
    diffs = [loss["bert_a", 1][s] - loss["bert_a", 0][s] for s in (2, 4)]
    speed = records.median_tokens_per_second(seed_rows)
    ratio = speed / records.median_tokens_per_second(base_rows)
    row = next(line for line in (results / "lr_compare.md").read_text().splitlines()
               if line.startswith("| bert_a | seed1 |"))
    assert [c.strip() for c in row.split("|")[1:-1]] == [
        "bert_a", "seed1", "base settings", "4", f"{speed:,.0f}", f"{ratio:.2f}x",
        f"{loss['bert_a', 1][4]:.3f} (step 4)", f"{max(diffs, key=abs):+.3f} (2 evaluations)",
        f"{min(diffs):+.3f} to {max(diffs):+.3f} ({np.mean(diffs):+.3f}; steps 2–4, "
        "2 evaluations)", records.format_seconds(seed_wall)]
    other = {**json.loads(Path(copy["configs"]["pretrain"]).read_text()), "study": "other"}
    other["settings"] = {**other["settings"], "steps": 6}
    (tmp_path / "other.json").write_text(json.dumps(other))
    with pytest.raises(study_config.StudyError, match=r"differ in \['steps'\]: only studies"):
        report_pretraining.compare_pages(
            [configs[0], study_config.load_config(str(tmp_path / "other.json"))], "x", "c")
    # Runs of the old initialization are not drawn beside the new ones.
    for variant in ("bert_a", "tupe_r"):
        path = _record(results, "pretrain", variant) / "run_config.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "initialization": "shared"}))
    # The table names the initialization where the runs differ in it.
    report_pretraining.compare_pages(configs, "lr", "cmd")
    table = (results / "lr_compare.md").read_text()
    assert "| bert_a | pretrain | base settings; initialization=shared | 4 |" in table
    assert "| bert_a | seed1 | base settings; initialization=independent | 4 |" in table
    with pytest.raises(study_config.StudyError, match=r"reference study pretrain\.json started "
                                                      r"its weights \['shared'\], this study "
                                                      r"\['independent'\]"):
        report_pretraining.read_references(configs[1])


def test_a_reference_must_exist_and_be_another_study(study):
    relative = json.loads(Path(study["configs"]["relative"]).read_text())
    path = Path(study["configs"]["relative"]).with_name("refs.json")
    for references, message in [
            ({"pretrain.json": ["bert_r"]}, r"has no variant\(s\) \['bert_r'\]\. Its variants: "
                                            r"\['bert_a', 'tupe_r'\]"),
            ({"refs.json": ["huang_m4_k8"]}, r"names its own study")]:
        path.write_text(json.dumps({**relative, "study": "refs", "references": references}))
        try:
            with pytest.raises(study_config.StudyError, match=message):
                report_pretraining.read_references(study_config.load_config(str(path)))
        finally:
            path.unlink()


# === Length generalization ===

@pytest.mark.slow
def test_length_study_numbers_for_relative_models_and_na_for_short_absolute_tables(study,
                                                                                 tmp_path):
    copy = _copy_study(study, tmp_path / "copy")
    assert main(["length", "--config", copy["configs"]["length"]]) == 0
    jsonl = copy["results"] / "records" / "length" / "results.jsonl"
    rows = {(r["variant"], r["length"]): r for r in records.read_jsonl(str(jsonl))}
    assert len(rows) == 8
    # The context-free reference: an add-one unigram of the vocabulary's 400 training lines,
    # counted here line by line, scored on the same masked batches.
    config = study_config.load_config(copy["configs"]["length"])
    job = plans.length_plan(config)[0]
    tokenizer = data.load_tokenizer(job["vocab"], lowercase=True)
    counts = np.ones(tokenizer.vocabulary_size())
    for line in (copy["root"] / "train.txt").read_text(encoding="utf-8").splitlines():
        for token_id in np.asarray(tokenizer(line)).ravel():
            counts[token_id] += 1
    for token in ("[CLS]", "[SEP]", "[PAD]"):
        counts[tokenizer.token_to_id(token)] = 1
    log_p = np.log(counts / counts.sum())
    for length in (32, 256):
        batches = length_study.Batches(config).get(job, length)
        expected = (sum(-(log_p[y] * w).sum() for _, y, w in batches)
                    / sum(w.sum() for _, _, w in batches))
        assert rows[("unigram", length)]["loss"] == pytest.approx(expected, rel=1e-9)
    # tiny presets: 128 absolute positions; the relative model has no table to outgrow.
    relative = rows[("huang_m4_k8", 256)]
    assert np.isfinite(relative["loss"]) and "distances beyond k=8 clipped" in relative["note"]
    for variant in ("bert_a", "tupe_r"):
        assert rows[(variant, 256)]["loss"] is None
        assert "absolute position table has 128 rows" in rows[(variant, 256)]["note"]
    # At the pre-training length, tokens_per_batch / 32 = the pre-training batch and seed 1 =
    # its validation seed: the very batches of the logged validation loss; with every mask
    # slot used (16 sequences x 5 here), Keras's loss (sum / slots) is the weighted mean.
    assert rows[("bert_a", 32)]["masked_tokens"] == 2 * 8 * 5
    logged, _ = records.read_metrics(str(copy["runs"] / "pretrain" / "bert_a"))
    assert rows[("bert_a", 32)]["loss"] == pytest.approx(logged[-1]["val_loss"], rel=1e-5)
    table = (copy["results"] / "length_table.md").read_text()
    assert re.search(r"\| pretrain/bert_a \| bert_a_tiny \| 4 \| \d+\.\d{3} \| n/a \|", table)
    assert re.search(r"\| baseline/unigram \| \(no model\) \| 0 \| \d+\.\d{3} \| \d+\.\d{3} \| – \|",
                     table)
    # Each encoder's pre-training step time: tokens a step over its record's median tokens/s.
    settings = json.loads(Path(copy["configs"]["pretrain"]).read_text())["settings"]
    metrics = copy["results"] / "records" / "pretrain" / "bert_a" / "metrics.csv"
    speeds = {row["step"]: float(row["tokens_per_second"])
              for row in records.read_csv_rows(str(metrics)) if row["tokens_per_second"]}
    step_time = settings["batch_size"] * settings["seq_len"] / np.median(list(speeds.values()))
    assert f"| n/a | {step_time:.2f} | 256: " in table.split("| pretrain/bert_a |")[1]
    # Resumable from the record alone: without runs/, nothing is asked for or evaluated.
    shutil.rmtree(copy["runs"])
    assert main(["length", "--config", copy["configs"]["length"]]) == 0
    assert len(records.read_jsonl(str(jsonl))) == 8
    assert (copy["results"] / "length_table.md").read_text() == table
    # A model the record lacks must be on disk.
    jsonl.write_text("".join(line for line in jsonl.read_text().splitlines(True)
                             if '"tupe_r"' not in line))
    with pytest.raises(study_config.StudyError, match=r"(?s)Not pre-trained yet.*tupe_r/preset"):
        run_module.run_length(config, "c", "r")


# === Fine-tuning ===

@pytest.mark.slow
def test_finetune_study_records_its_runs_and_pins_its_settings(study, tmp_path, capsys):
    copy = _copy_study(study, tmp_path / "copy")
    config = copy["configs"]["finetune"]
    # Without the floors record: `finetune`, which reads the data, writes RTE's.
    (copy["results"] / "records" / floors.FLOORS_RECORD).unlink()
    assert main(["finetune", "--config", config]) == 0
    written = json.loads((copy["results"] / "records" / floors.FLOORS_RECORD).read_text())
    assert list(written["tasks"]) == ["rte"]
    jobs = copy["results"] / "records" / "finetune" / "pretrain" / "bert_a"
    for step in ("step_0000002", "step_0000004"):
        [row] = records.read_jsonl(str(jobs / step / "results.jsonl"))
        assert row["wall_seconds"] >= row["train_seconds"] > 0
        pinned = json.loads((jobs / step / "finetune_settings.json").read_text())
        assert pinned["settings"]["max_train_examples"] == 16 and pinned["init_sha256"]
    table = (copy["results"] / "finetune_table.md").read_text()
    assert re.search(r"\| pretrain/bert_a \| 2 \| \d+\.\d\d \| \*\*\d+\.\d\d\*\* \| 1/1 \|", table)
    assert f"Regenerate: `python -m experiments.run report --config {config}`" in table
    # The floor row: RTE's dev majority label's share (a constant answer), and the average.
    labels = glue.load_glue("rte", "validation", str(GLUE)).labels
    share = 100 * max(np.mean(labels == 0), np.mean(labels == 1))
    assert f"| *majority class* | – | {share:.2f} | {share:.2f} | – | – |" in table
    # Done, from the records: no checkpoint is needed again, nothing changes.
    shutil.rmtree(copy["runs"])
    assert main(["finetune", "--config", config]) == 0
    assert (copy["results"] / "finetune_table.md").read_text() == table
    # Other settings, with the results of the first in the records: refused, nothing mixed.
    changed = json.loads(Path(config).read_text())
    changed["settings"]["max_train_examples"] = 8
    Path(config).write_text(json.dumps({**changed, "seeds": [0, 1]}))
    assert main(["finetune", "--config", config]) == 2
    assert "Not pre-trained yet" in capsys.readouterr().err  # the checkpoint is asked first
    shutil.copytree(study["runs"] / "pretrain" / "bert_a", copy["runs"] / "pretrain" / "bert_a",
                    dirs_exist_ok=True)
    assert main(["finetune", "--config", config]) == 2
    assert "holds results fine-tuned with other settings" in capsys.readouterr().err


def _job(results, name, step=4):
    return Path(results) / "records" / name / "pretrain" / "bert_a" / f"step_{step:07d}"


def _finetune_config(study, name, **changes):
    config = {**json.loads(Path(study["configs"]["finetune"]).read_text()), "study": name,
              "checkpoints": [1.0], "learning_rates": [1e-4, 5e-5], "seeds": [0, 1], **changes}
    path = Path(study["configs"]["finetune"]).parent / f"{name}.json"
    path.write_text(json.dumps(config))
    return path


def _result(task, rate, seed, score, **extra):
    return {"task": task, "learning_rate": rate, "seed": seed,
            "dev": {"validation": {"accuracy": score, "score": score}}, **extra}


def test_the_table_is_the_median_at_the_best_rate_of_complete_grids(study, tmp_path):
    copy = _copy_study(study, tmp_path / "copy")
    path, job = _finetune_config(copy, "grid"), _job(copy["results"], "grid")
    job.mkdir(parents=True)
    # The best rate has all its seeds, the other one of two: its median may still win.
    for row in (_result("rte", 1e-4, 0, 0.6), _result("rte", 1e-4, 1, 0.6),
                _result("rte", 5e-5, 0, 0.5)):
        records.append_jsonl(str(job / "results.jsonl"), row)
    assert main(["report", "--config", str(path)]) == 0
    table = (copy["results"] / "grid_table.md").read_text()
    assert "| pretrain/bert_a | 4 | 60.00↑* | – | 3/4 |" in table  # ↑: the grid's highest
    # The first three runs are from before runs recorded their time; the last one has it.
    records.append_jsonl(str(job / "results.jsonl"),
                         _result("rte", 5e-5, 1, 0.8, wall_seconds=90.0))
    # A run of a grid point the config does not hold: neither scored nor timed.
    records.append_jsonl(str(job / "results.jsonl"),
                         _result("rte", 3e-4, 0, 0.9, wall_seconds=60.0))
    assert main(["report", "--config", str(path)]) == 0
    table = (copy["results"] / "grid_table.md").read_text()
    # 5e-5: the median of 0.5 and 0.8 wins now, at the grid's lowest rate.
    assert "| pretrain/bert_a | 4 | 65.00↓ | **65.00** | 4/4 | 1.5 min (1 of 4 runs) |" in table
    assert "| pretrain/bert_a | 4 | 50.0–80.0 |" in table  # the seed range at 5e-5
    [row] = records.read_csv_rows(copy["results"] / "grid_glue.csv")
    assert (row["best_learning_rate"], row["complete"]) == ("5e-05", "True")
    assert json.loads(row["medians_by_learning_rate"]) == pytest.approx(
        {"5e-05": 65.0, "0.0001": 60.0})
    # The summary a job kept before each run was recorded (`finetune`, frozen) is not read.
    summary = report_finetuning.job_summary(study_config.load_config(str(path)),
                                            records.read_jsonl(str(job / "results.jsonl")))
    (job / "results.jsonl").unlink()
    records.write_json(str(job / "summary.json"), summary)
    with pytest.raises(study_config.StudyError, match="No fine-tuning result yet"):
        report_module.report(str(path))


def test_a_selection_study_reports_the_chosen_rate_and_the_ceiling(study, tmp_path,
                                                                          capsys):
    copy = _copy_study(study, tmp_path / "copy")
    ceiling = {"name": "BERT-Mini", "scores": {"mrpc": {"f1": 81.1, "accuracy": 71.8}}}
    path = _finetune_config(copy, "chosen", tasks=["mrpc"], learning_rates=[1e-4, 3e-4],
                            seeds=[0, 1, 2], selection_seed=0, edge_learning_rates=[1e-3],
                            ceiling=ceiling)
    job = _job(copy["results"], "chosen")

    def add(rate, seed, accuracy, f1, **extra):
        row = _result("mrpc", rate, seed, accuracy, **extra)
        row["dev"]["validation"]["f1"] = f1
        records.append_jsonl(str(job / "results.jsonl"), row)

    add(1e-4, 0, 0.70, 0.80, wall_seconds=10.0, epochs=1, train_examples=16)
    add(3e-4, 0, 0.75, 0.82)
    # Seed 0 is best at the grid's top: 1e-3 is tried next, so the choice is not final.
    assert main(["report", "--config", str(path)]) == 0
    table = (copy["results"] / "chosen_table.md").read_text()
    assert "| pretrain/bert_a | 4 | 75.00* | 82.00* | – | 2/4 |" in table
    assert "chosen with seed 0 alone among [0.0001, 0.0003] (widened by the nearest" in table
    add(1e-3, 0, 0.72, 0.81)
    add(3e-4, 1, 0.65, 0.79)
    add(3e-4, 2, 0.80, 0.84)
    add(1e-4, 1, 0.99, 0.99)  # not a run this protocol asks for: neither scored nor counted
    assert main(["report", "--config", str(path)]) == 0
    table = (copy["results"] / "chosen_table.md").read_text()
    # The median of the three seeds at 3e-4, inside the widened grid: no edge mark; F1 too.
    assert "| encoder | step | MRPC | MRPC F1 | average | runs | time |" in table
    assert "| pretrain/bert_a | 4 | 75.00 | 82.00 | **75.00** | 5/5 |" in table
    # The floor of a constant answer: "paraphrase" always, accuracy p and F1 2p / (1 + p).
    labels = glue.load_glue("mrpc", "validation", str(GLUE)).labels
    positive = np.mean(labels == 1)
    assert positive > 0.5
    assert (f"| *majority class* | – | {100 * positive:.2f} | "
            f"{100 * 2 * positive / (1 + positive):.2f} | {100 * positive:.2f} | – | – |") in table
    assert "| *ceiling* | – | 71.8 | 81.1 | 71.80 | – | – |" in table
    assert "*Ceiling*: BERT-Mini: its published scores" in table


def test_a_bad_selection_or_ceiling_is_refused_naming_the_field(tmp_path):
    spec = {"study": "x", "kind": "finetune", "runs_dir": "runs", "results_dir": "results",
            "pretrain_configs": ["long_v2"],
            "checkpoints": [1.0], "tasks": ["mrpc", "sst2"], "learning_rates": [1e-4, 3e-4],
            "seeds": [0, 1], "settings": {"epochs": 1}}
    for changes, message in [
            ({"selection_seed": 2}, r"`selection_seed` 2 is not one of `seeds` 0 1"),
            ({"selection_seed": 0, "edge_learning_rates": [3e-4]},
             r"`edge_learning_rates` 0.0003: each must be a positive rate"),
            ({"ceiling": {"name": "BERT-Mini", "scores": {"rte": 57.9}}},
             r"`ceiling` scores task 'rte', which is not one of the tasks \['mrpc', 'sst2'\]"),
            ({"ceiling": {"name": "BERT-Mini", "scores": {"mrpc": {"pearson": 1}}}},
             r"`ceiling` mrpc: metrics \['pearson'\] are not metrics of mrpc. Valid: "
             r"\['accuracy', 'f1'\]"),
            ({"ceiling": {"scores": {"mrpc": 81.1}}}, "`ceiling` must be"),
            ({"ceiling": {"name": "x", "scores": {"sst2": "85.9"}}},
             r"`ceiling` sst2: a score \(x100\) or \{metric: value\}")]:
        path = tmp_path / "x.json"
        path.write_text(json.dumps({**spec, **changes}))
        with pytest.raises(study_config.StudyError, match=message):
            study_config.load_config(str(path))


def _glue_unreadable(*args, **kwargs):
    raise AssertionError("read the GLUE data")


def test_the_majority_class_floor_is_the_best_constant_answer_on_dev(tmp_path, monkeypatch):
    config = {"tasks": ["cola", "mrpc", "stsb"], "data_dir": str(GLUE),
              "results_dir": str(tmp_path)}
    [path] = floors.record_floors([config])
    assert path == str(tmp_path / "records" / floors.FLOORS_RECORD)
    labels = glue.load_glue("mrpc", "validation", str(GLUE)).labels
    positive = np.mean(labels == 1)
    record = json.loads(Path(path).read_text())
    assert record["command"] == "python -m experiments.floors"
    assert record["tasks"]["mrpc"]["dev_labels"] == {"validation": np.bincount(labels).tolist()}
    # From here on the GLUE data cannot be read: the floors come from the record alone.
    monkeypatch.setattr(glue, "load_glue", _glue_unreadable)
    scores = floors.majority_class(config)
    assert 50 < scores["mrpc"] == 100 * max(positive, 1 - positive)
    # A constant answer has Matthews correlation 0, and no correlation at all for STS-B.
    assert scores["cola"] == 0.0 and scores["stsb"] is None
    # MRPC's F1 of always answering "paraphrase": 2p / (1 + p).
    assert floors.majority_class(config, "mrpc", "f1") == pytest.approx(
        100 * 2 * positive / (1 + positive))
    assert floors.record_floors([config], missing_only=True) == [path]  # nothing read
    with pytest.raises(study_config.StudyError,
                       match=r"holds no majority-class floor of rte: .*python -m experiments"):
        floors.majority_class({**config, "tasks": ["rte"]})


def test_a_finetune_table_is_made_from_the_records_without_the_glue_data(tmp_path,
                                                                         monkeypatch):
    """The committed `glue_full` table again, in a folder where the configs' `data_dir`
    (`../shared/data/glue`) does not exist and the GLUE loader refuses: its floor row comes
    from the committed floors record."""
    committed = REPO / "docs" / "results"
    results = tmp_path / "checkout" / "docs" / "results"
    shutil.copytree(committed / "records" / "glue_full", results / "records" / "glue_full")
    shutil.copy(committed / "records" / floors.FLOORS_RECORD, results / "records")
    config = study_config.load_config("glue_full")
    monkeypatch.chdir(tmp_path / "checkout")
    assert not os.path.exists(config["data_dir"])
    monkeypatch.setattr(glue, "load_glue", _glue_unreadable)
    report_finetuning.finetune_pages({**config, "results_dir": str(results)},
                                     report_module.report_command(config))
    for page in ("glue_full_table.md", "glue_full_glue.csv"):
        assert (results / page).read_bytes() == (committed / page).read_bytes()
    both = [json.loads((folder / "glue_full_config.json").read_text())["majority_class"]
            for folder in (results, committed)]
    assert both[0] == both[1] and both[0]["mrpc"] > 50


def test_finetune_report_judges_variants_against_the_pretraining_seed_spread(study, tmp_path):
    copy = _copy_study(study, tmp_path / "copy")
    folder = Path(copy["configs"]["pretrain"]).parent
    (folder / "seedrep.json").write_text(json.dumps({
        "study": "seedrep", "extends": "pretrain.json", "settings": {"seed": 1},
        "variants": {"bert_a": {}, "tupe_r": {}}}))
    path = _finetune_config(copy, "spread", pretrain_configs=["pretrain.json", "seedrep.json"],
                            variants=["bert_a", "tupe_r"], tasks=["rte", "mrpc"],
                            learning_rates=[1e-4], seeds=[0])
    scores = {("pretrain", "bert_a"): (0.50, 0.60), ("seedrep", "bert_a"): (0.54, 0.70),
              ("pretrain", "tupe_r"): (0.60, 0.63), ("seedrep", "tupe_r"): (0.62, 0.69)}
    for (pretrain, variant), by_task in scores.items():
        out = copy["results"] / "records" / "spread" / pretrain / variant / "step_0000004"
        for task, score in zip(("rte", "mrpc"), by_task):
            records.append_jsonl(str(out / "results.jsonl"), _result(task, 1e-4, 0, score))
    assert main(["report", "--config", str(path)]) == 0
    table = (copy["results"] / "spread_table.md").read_text()
    assert ("| bert_a | 4 | 0, 1 | 50.00–54.00 (52.00) | 60.00–70.00 (65.00) | "
            "55.00–62.00 (58.50) |") in table
    # RTE: -10 and -8, beyond both ranges (4, 2); MRPC: the signs differ; the average:
    # -6.5 and -3.5, within bert_a's range of 7.
    assert "| bert_a − tupe_r | 4 | -9.00 ! | -1.00 | -5.00 |" in table


def test_checkpoint_variants_fine_tune_a_checkpoint_of_only_the_encoders_named(tmp_path):
    spec = {"study": "x", "kind": "finetune", "runs_dir": str(tmp_path / "runs"),
            "results_dir": str(tmp_path / "results"), "pretrain_configs": ["long", "long_seed1"],
            "variants": ["bert_a", "tupe_a"], "checkpoints": [1.0, 0.3, 0.0],
            "checkpoint_variants": {"0.3": ["tupe_a"], "0.0": ["long/bert_a"]},
            "tasks": ["rte"], "data_dir": str(GLUE), "learning_rates": [1e-4], "seeds": [0],
            "settings": {"epochs": 1}}

    def load(**changes):
        path = tmp_path / "x.json"
        path.write_text(json.dumps({**spec, **changes}))
        return study_config.load_config(str(path))

    jobs = plans.finetune_plan(load())
    assert sorted((j["pretrain_study"], j["variant"], j["step"]) for j in jobs) == sorted([
        ("long", "bert_a", 16000), ("long", "tupe_a", 16000), ("long_seed1", "bert_a", 16000),
        ("long_seed1", "tupe_a", 16000), ("long", "tupe_a", 4800),
        ("long_seed1", "tupe_a", 4800), ("long", "bert_a", 0)])
    assert {j["init"] for j in jobs if j["step"] == 0} == {
        "runs/study/long/bert_a/checkpoints/step_0000000"}
    assert {j["out"] for j in jobs if j["step"] == 0} == {
        str(tmp_path / "results" / "records" / "x" / "long" / "bert_a" / "step_0000000")}
    for changes, message in [
            ({"checkpoint_variants": {"0.5": ["tupe_a"]}}, r"checkpoint '0.5', which is not one"),
            ({"checkpoint_variants": {"0.3": []}}, "maps a checkpoint fraction"),
            ({"checkpoints": [1.5]}, r"fractions of the pre-training budget in \[0, 1\]"),
            ({"tasks": ["squad", "rte"]}, r"must be \[\"squad\"\]"),
            ({"settings": {"pad_to_longest": True, "nope": 1}},
             r"unknown fine-tuning settings \['nope'\]"),
            ({"task_settings": {"cola": {"epochs": 1}}}, r"'cola' is not one of the tasks")]:
        with pytest.raises(study_config.StudyError, match=message):
            load(**changes)
    for name in ("bert_r", "long/bert_x", "pretrain/bert_a"):
        with pytest.raises(study_config.StudyError,
                           match=rf"no variant '{name}'.*Valid: \['bert_a', 'long/bert_a'"):
            plans.finetune_plan(load(checkpoint_variants={"0.0": [name]}))
    with pytest.raises(study_config.StudyError, match=r"no checkpoint at 0.25 of the budget "
                                                      r"\(step 4000\)"):
        plans.finetune_plan(load(checkpoints=[0.25], checkpoint_variants={}))


@pytest.mark.slow
def test_squad_study_fine_tunes_every_seed_on_one_article_split(study, tmp_path):
    from keras_tupe.data import squad

    copy = _copy_study(study, tmp_path / "copy")
    dev = json.loads((DATA_DIR / "squad" / "dev-v1.1.json").read_text())
    small = {"version": dev["version"],
             "data": [{**a, "paragraphs": a["paragraphs"][:2]} for a in dev["data"][:5]]}
    squad_file = copy["root"] / "squad_small.json"
    squad_file.write_text(json.dumps(small))
    path = _finetune_config(copy, "squad", tasks=["squad"], squad_file=str(squad_file),
                            learning_rates=[1e-4], data_dir=None, settings={
                                "epochs": 1, "batch_size": 8, "seq_len": 64, "doc_stride": 32,
                                "max_query_length": 16, "eval_fraction": 0.4,
                                "split_seed": 0, "xla": False})
    assert main(["finetune", "--config", str(path)]) == 0
    rows = records.read_jsonl(str(_job(copy["results"], "squad") / "results.jsonl"))
    assert [(r["task"], r["learning_rate"], r["seed"]) for r in rows] == [
        ("squad", 1e-4, 0), ("squad", 1e-4, 1)]
    # Both seeds evaluate on the split of split_seed 0, not on a split of their own.
    _, held_out = squad.split_articles(small["data"], eval_fraction=0.4, seed=0)
    questions = sum(len(p["qas"]) for a in held_out for p in a["paragraphs"])
    assert [r["eval_questions"] for r in rows] == [questions, questions]
    f1 = [r["dev"]["eval"]["f1"] for r in rows]
    exact = [r["dev"]["eval"]["exact_match"] for r in rows]
    table = (copy["results"] / "squad_table.md").read_text()
    assert "| encoder | step | SQuAD F1 (EM) | average | runs | time |" in table
    assert (f"| pretrain/bert_a | 4 | {np.median(f1):.2f} ({np.median(exact):.2f}) | "
            f"**{np.median(f1):.2f}** | 2/2 |") in table
    assert "majority class" not in table and "article split" in table


# === Positional maps ===

def test_maps_draw_and_redraw_from_their_arrays_and_refuse_bert_a(study, tmp_path, capsys):
    import matplotlib.image

    out = tmp_path / "maps" / "tupe_r.png"
    run = study["runs"] / "pretrain" / "tupe_r"
    assert main(["maps", "--init", str(run), "--out", str(out), "--length", "16"]) == 0
    arrays = np.load(tmp_path / "maps" / "tupe_r.npz")
    assert arrays["positional_bias"].shape == (4, 16, 16) and arrays["t5_bias"].shape == (32, 4)
    info = json.loads((tmp_path / "maps" / "tupe_r.json").read_text())
    bias = arrays["positional_bias"].astype(np.float64)
    for head, summary in enumerate(info["summary"]):
        for offset in (-2, 0, 1):
            rows = range(max(1, 1 - offset), 16 - max(0, offset))  # [CLS] row and column aside
            expected = np.mean([bias[head, i, i + offset] for i in rows])
            assert summary["mean_by_offset"][str(offset)] == pytest.approx(expected, abs=1e-6)
        assert summary["cls_column_mean"] == pytest.approx(bias[head, 1:, 0].mean(), abs=1e-6)
    # Drawn again from the arrays, without the model: pixel for pixel the same figures.
    before = {p.name: p.read_bytes() for p in (tmp_path / "maps").iterdir()}
    assert main(["maps", "--from-npz", str(out.with_suffix(".npz")),
                 "--out", str(tmp_path / "again.png")]) == 0
    for drawn, redrawn in ((out, tmp_path / "again.png"),
                           (tmp_path / "maps" / "tupe_r_t5_buckets.png",
                            tmp_path / "again_t5_buckets.png")):
        np.testing.assert_array_equal(matplotlib.image.imread(redrawn),
                                      matplotlib.image.imread(drawn))
    assert {p.name: p.read_bytes() for p in (tmp_path / "maps").iterdir()} == before
    capsys.readouterr()
    for argv, message in [
            (["--init", str(study["runs"] / "pretrain" / "bert_a"), "--out",
              str(tmp_path / "b.png")], "no content-free positional term"),
            (["--from-npz", str(tmp_path / "none.npz")], "not a maps .npz file"),
            (["--init", str(run)], "maps --init needs --out")]:
        assert main(["maps", *argv]) == 2
        assert message in capsys.readouterr().err
    assert not (tmp_path / "b.png").exists()


# === The shipped configs and the committed records ===

def test_the_shipped_study_configs_load_and_share_their_settings():
    configs = {name: study_config.load_config(name) for name in study_config.studies()}
    pretrain = configs["pretrain"]
    for name in ("relative", "clip_sweep", "pretrain_seed1"):
        assert configs[name]["vocabulary"] == pretrain["vocabulary"], name
        expected = {**pretrain["settings"], **({"seed": 1} if name == "pretrain_seed1" else {})}
        assert configs[name]["settings"] == expected, name
    for key in ("tasks", "data_dir", "learning_rates", "seeds", "settings", "pretrain_configs"):
        assert configs["finetune"][key] == configs["finetune_intermediate"][key], key
    # The relative methods' GLUE study fine-tunes as glue_full does; both choose each rate
    # with one seed, as SQuAD's study does with the same grid.
    for key in ("tasks", "data_dir", "learning_rates", "seeds", "selection_seed",
                "edge_learning_rates", "settings", "task_settings", "ceiling"):
        assert configs["glue_relative"][key] == configs["glue_full"][key], key
    for key in ("learning_rates", "seeds", "selection_seed", "edge_learning_rates"):
        assert configs["squad_relative"][key] == configs["glue_full"][key], key
    # The sweep: one grid for every variant, plus the point that brackets the best rate.
    sweep = [c for name, c in configs.items() if name.startswith("sweep_lr")]
    base = configs["sweep_lr5e4_wu05"]
    grid = {(c["settings"]["learning_rate"], c["settings"]["warmup_ratio"]) for c in sweep}
    assert grid == {(lr, wu) for lr in (2e-4, 5e-4, 1e-3) for wu in (0.05, 0.2)} | {(2e-3, 0.2)}
    for config in sweep:
        assert list(config["variants"]) == ["bert_a", "tupe_a", "bert_r", "tupe_r"]
        assert {**config["settings"], "learning_rate": 0, "warmup_ratio": 0} == {
            **base["settings"], "learning_rate": 0, "warmup_ratio": 0}, config["study"]
    # The sweep again on the corrected initialization: TUPE-A at the old sweep's best point and
    # its two neighbours in learning rate, everything else the old sweep's.
    sweep_v2 = [c for name, c in configs.items() if name.startswith("sweep_v2_")]
    assert {c["settings"]["learning_rate"] for c in sweep_v2} == {5e-4, 1e-3, 2e-3}
    for config in sweep_v2:
        assert list(config["variants"]) == ["tupe_a"]
        assert {**config["settings"], "learning_rate": 0} == {
            **base["settings"], "learning_rate": 0, "warmup_ratio": 0.2}, config["study"]
    # The long runs: >= 65M tokens at the sweep's best point of both BERT-A and TUPE-A,
    # checkpoints at 0, 30% and 50%; each replicate differs only in the seed.
    long = configs["long"]["settings"]
    assert long["steps"] * long["batch_size"] * long["seq_len"] >= 65_000_000
    assert long["save_steps"] == [0, int(0.3 * long["steps"]), long["steps"] // 2]
    for variant in ("bert_a", "tupe_a"):
        final = {}  # grid point -> the variant's final validation loss, from the records
        for config in sweep:
            for run in report_pretraining.read_runs(config):
                if run["variant"].name == variant and run["status"] == "finished":
                    point = (config["settings"]["learning_rate"],
                             config["settings"]["warmup_ratio"])
                    final[point] = run["rows"][-1]["val_loss"]
        assert len(final) >= 6 and min(final, key=final.get) == (
            long["learning_rate"], long["warmup_ratio"]), variant
    # On the corrected initialization TUPE-A's long runs keep that rate only while no finished
    # neighbour of sweep_v2 ends lower (each neighbour's record is checked as it lands).
    long_v2 = configs["long_v2"]["settings"]
    assert long_v2 == long  # the same runs, only the initialization differs
    final_v2 = {c["settings"]["learning_rate"]: run["rows"][-1]["val_loss"] for c in sweep_v2
                for run in report_pretraining.read_runs(c) if run["status"] == "finished"}
    if final_v2:
        assert min(final_v2, key=final_v2.get) == long_v2["learning_rate"], final_v2
    # Issue 37's comparison: every encoding but the fairseq-fork and tie/d ablations,
    # trained alike on the sweep's data and vocabulary, then scored up to 1024.
    encodings = configs["encodings"]
    assert set(encodings["variants"]) == {
        "bert_a", "bert_r", "tupe_a", "tupe_r", "shaw", "huang_m1", "huang_m2", "huang_m3",
        "huang_m4", "rope", "alibi", "deberta"}
    assert encodings["vocabulary"] == base["vocabulary"]
    assert encodings["settings"]["seq_len"] == 128 and configs["encodings_length"]["lengths"] == [
        128, 256, 512, 1024]
    assert configs["encodings_length"]["pretrain_configs"] == ["encodings"]
    # The long runs again on the GPU (JAX): the same settings, from token-id shards of the
    # same text with the same vocabulary; seeds 1 and 2 replicate them.
    jax_settings = dict(configs["long_v2_jax"]["settings"])
    assert (jax_settings.pop("shards"), jax_settings.pop("valid_shards")) == (
        "shards/train_v2_128", "shards/valid_v2_128")
    assert {**jax_settings, "corpus": long_v2["corpus"],
            "valid_corpus": long_v2["valid_corpus"]} == long_v2
    assert configs["long_v2_jax"]["vocabulary"] == configs["long_v2"]["vocabulary"]
    assert configs["long_v2_jax_seed2"]["settings"] == {**configs["long_v2_jax"]["settings"],
                                                        "seed": 2}
    for name, seed1 in (("long", "long_seed1"), ("long_v2", "long_v2_seed1"),
                        ("relative_v2", "relative_v2_seed1"),
                        ("long_v2_jax", "long_v2_jax_seed1")):
        assert configs[seed1]["settings"] == {**configs[name]["settings"], "seed": 1}, seed1
        assert list(configs[seed1]["references"]) == [name], seed1


# Every study resolves to the settings it had when each was a file of its own (and its
# recorded runs were made): the sha256 (first 16 digits) of the resolved study, its
# description (and a frozen study's reason) aside, the studies it names by name. A study
# changed on purpose before it has records gets its new digest here; a recorded one is not
# changed. (29 digests changed once, when `base`, `seed` and `overrides` became `extends` and
# `settings` and left the resolved study: with those three keys left out, every study's
# digest was the same before and after.)
STUDY_DIGESTS = {
    "clip_sweep": "ea463b6bda1228ae", "encodings": "d973bd94bfc332b9",
    "encodings_length": "91d0d67b7ffbdaf2", "encodings_long": "f58deacbf1aa1979",
    "encodings_long_length": "7ebedfcfce0972a6", "finetune": "bcba631cf8e1e04b",
    "finetune_intermediate": "0f34c075769f041e", "glue_full": "df1e673e952ea6ed",
    "glue_relative": "bdec7d62d8288ef3", "glue_s1": "efe379b268ada59b",
    "glue_s3": "0157c9bdeba97491", "glue_s4": "550285c514650f44",
    "huang_long": "aaf10739b362fe57", "length": "f9aba7907c76b440", "long": "7b4fa4dfe3cc171b",
    "long_seed1": "94b304289b91a754", "long_v2": "e4d7a55292a45c94",
    "long_v2_jax": "1247ccd7a4d48870", "long_v2_jax_seed1": "9b667f746fc13617",
    "long_v2_jax_seed2": "9bfacd420e8efffa", "long_v2_seed1": "599ebdce7c015347",
    "plateau_preln": "00100a7a4d3cc15c", "plateau_preln_seed1": "93ca63929a26133a",
    "pretrain": "e5263cb1ca03297e", "pretrain_seed1": "99be2d25c21d9e9e",
    "relative": "496bb85201469cf0", "relative_v2": "876c9660d8263730",
    "relative_v2_seed1": "311be904390720a7", "speed_bf16_noxla": "71247ec624296fa3",
    "speed_bf16_xla": "00797f4b9b550eea", "speed_f32_noxla": "6f43cc8bf3353108",
    "speed_f32_xla": "add8837984df753b", "squad_long": "647ef9e5ed1a775b",
    "squad_relative": "6824bf86b7b9a270", "stage_s1": "2c77a5e53a098254",
    "stage_s3": "05d6179eb1939ea3", "stage_s4": "1e8db249a1b84bbf",
    "sweep_lr1e3_wu05": "0ecb38478986eeb2", "sweep_lr1e3_wu20": "96cf594c8a01fe29",
    "sweep_lr2e3_wu20": "4a49901b6fc663d1", "sweep_lr2e4_wu05": "3f5e3830753eed95",
    "sweep_lr2e4_wu20": "193fb45ce520dbeb", "sweep_lr5e4_wu05": "5fcbfdc43bf41445",
    "sweep_lr5e4_wu20": "9f91e0f6847638e9", "sweep_v2_lr1e3_wu20": "be4bdce0bad0d26f",
    "sweep_v2_lr2e3_wu20": "12b801b11d3c2044", "sweep_v2_lr5e4_wu20": "0f9668f87e59bee9",
}


# Folders of `docs/results/records/` that hold no study: `experiments.stage.collect` puts each
# GPU stage's logs and stage record under `stages/<stage>/`, and stage S0's scratch runs (its
# pace rounds and fine-tuning timings, configs written on the card, no study of
# studies.json) under `calibration/`.
STAGE_FOLDERS = {"stages", "calibration"}


def test_every_study_resolves_to_the_settings_it_was_run_with():
    records_dir = REPO / "docs" / "results" / "records"
    recorded = {p.name for p in records_dir.iterdir()
                if p.is_dir()}  # a folder a study; beside them the GLUE floors' record
    # a new study is pinned here once it has records
    assert recorded - STAGE_FOLDERS <= set(STUDY_DIGESTS)
    if (records_dir / "stages").is_dir():  # one folder a stage of stages.json
        assert {p.name for p in (records_dir / "stages").iterdir()} <= set(
            load_stages()["stages"])
    for name, digest in STUDY_DIGESTS.items():
        resolved = {key: value for key, value in study_config.resolved(
            study_config.load_config(name)).items() if key not in ("description", "frozen")}
        text = json.dumps(resolved, sort_keys=True).encode()
        assert hashlib.sha256(text).hexdigest()[:16] == digest, name


def test_a_study_that_extends_another_takes_its_keys_and_settings_key_by_key(tmp_path,
                                                                                monkeypatch):
    # `settings` and `vocabulary` of the study extended are overridden key by key.
    long_v2_jax = study_config.load_config("long_v2_jax")
    assert study_config.studies()["long_v2_jax"]["extends"] == "pretrain"
    assert long_v2_jax["settings"]["steps"] == 16000
    assert long_v2_jax["settings"]["shards"] == "shards/train_v2_128"
    studies = {"a": {"kind": "length", "runs_dir": "r", "results_dir": "d", "seed": 1,
                     "pretrain_configs": ["long"], "lengths": [128], "batches": 2,
                     "valid_corpus": "v.txt", "tokens_per_batch": 512},
               "b": {"extends": "a", "lengths": [128, 256]},
               "c": {"extends": "c"}, "e": {"extends": "b", "batches": 3},
               "f": {"extends": "g"}, "g": {"extends": "f"}}
    (tmp_path / "studies.json").write_text(json.dumps(studies))
    monkeypatch.setattr(study_config, "STUDIES_FILE", str(tmp_path / "studies.json"))
    b = study_config.load_config("b")
    assert (b["study"], b["lengths"], b["batches"], b["_flag"]) == (
        "b", [128, 256], 2, ["--study", "b"])
    # A chain: each study takes what the one it extends resolved to.
    e = study_config.load_config("e")
    assert (e["lengths"], e["batches"], e["seed"]) == ([128, 256], 3, 1)
    for name, chain in (("c", "c -> c"), ("f", "f -> g -> f")):
        with pytest.raises(study_config.StudyError, match=f"`extends` goes round: {chain}\\."):
            study_config.load_config(name)
    with pytest.raises(study_config.StudyError, match="no study 'd' in .*Studies: a, b, c, e"):
        study_config.load_config("d")


def test_the_shipped_replicates_and_chains_resolve_to_their_runs_settings():
    """`stage_s3` extends `stage_s1`, which extends `long_v2_jax`, which extends `pretrain`;
    each replicate is the study it repeats (`references`) with another `settings.seed`."""
    s1, s3 = study_config.load_config("stage_s1"), study_config.load_config("stage_s3")
    assert s3["settings"] == {**study_config.load_config("long_v2_jax")["settings"], "seed": 1}
    assert (s3["variants"], s3["vocabulary"]) == (s1["variants"], s1["vocabulary"])
    entries = study_config.studies()
    assert not [name for name, entry in entries.items() if {"base", "overrides"} & set(entry)
                or "seed" in entry and entry.get("kind", "pretrain") == "pretrain"
                and "extends" in entry]
    for name in ("long_seed1", "long_v2_jax_seed1", "long_v2_jax_seed2", "pretrain_seed1",
                 "plateau_preln_seed1", "relative_v2_seed1"):  # each names what it repeats
        replicate = study_config.load_config(name)
        parent = study_config.load_config(*replicate["references"])
        assert replicate["settings"] == {**parent["settings"],
                                         "seed": replicate["settings"]["seed"]}, name
        assert replicate["settings"]["seed"] != parent["settings"]["seed"], name


def test_comparisons_and_claims_are_entries_that_name_studies(tmp_path, monkeypatch):
    shipped = study_config.studies()
    assert {name: entry["studies"][0] for name, entry in shipped.items()
            if entry.get("kind") == "compare"} == {
        "speed": "speed_f32_xla", "sweep": "sweep_lr5e4_wu05",
        "sweep_v2": "sweep_v2_lr1e3_wu20", "initialization": "long"}  # the reference first
    claims = study_config.load_config("claims", kind="claims")
    assert claims["t2"]["replicates"] == ["long_v2_jax_seed1", "long_v2_jax_seed2"]
    entries = {"a": {"kind": "compare", "studies": ["speed_f32_xla", "nowhere"]},
               "b": {"kind": "compare", "studies": ["speed_f32_xla"]},
               "c": {"kind": "compare_seeds", "groups": [["long"], ["long_v2_jax", "x"]]},
               "d": {"kind": "claims", "t2": {}, "plateau": {}}}
    (tmp_path / "studies.json").write_text(json.dumps({**shipped, **entries}))
    monkeypatch.setattr(study_config, "STUDIES_FILE", str(tmp_path / "studies.json"))
    for name, message in (("a", r"names \['nowhere'\], which are not studies"),
                          ("b", r"names at least two studies, each once. Received: "
                                r"\['speed_f32_xla'\]"),
                          ("c", "ValueError: not enough values to unpack"),
                          ("d", r"missing \['pipelines'\]")):
        with pytest.raises(study_config.StudyError, match=message):
            study_config.load_config(name)


@pytest.mark.slow
def test_the_committed_pages_are_the_report_of_the_committed_records(tmp_path, monkeypatch):
    """`report` in a checkout that holds only the configs and the committed records, with no
    `../shared` beside it, writes exactly the committed pages, and no committed page of a
    study or comparison is left that it no longer writes (regenerate them, remove stale ones
    and commit when this fails)."""
    checkout = tmp_path / "checkout"
    results = REPO / "docs" / "results"
    # The inputs: the runs' records and the maps' data (their figures are report's).
    shutil.copytree(results / "records", checkout / "docs" / "results" / "records")
    shutil.copytree(results / "maps", checkout / "docs" / "results" / "maps",
                    ignore=shutil.ignore_patterns("*.png"))
    (checkout / "experiments").mkdir()
    shutil.copy(study_config.STUDIES_FILE, checkout / "experiments" / "studies.json")
    # No ../shared beside it: the configs' ../shared/data (the GLUE floors included) is
    # not read.
    assert not (tmp_path / "shared").exists()
    monkeypatch.chdir(checkout)
    monkeypatch.setattr(study_config, "STUDIES_FILE", str(checkout / "experiments" /
                                                          "studies.json"))
    assert main(["report"]) == 0
    written = {path.relative_to(checkout / "docs" / "results"): path.read_bytes()
               for path in (checkout / "docs" / "results").rglob("*")
               if path.is_file() and "records" not in path.parts}
    assert any(path.parts[0] == "maps" and path.suffix == ".png" for path in written)
    assert [path for path in written if not (results / path).is_file()] == []
    assert [path for path in written if (results / path).read_bytes() != written[path]] == []
    # A page is named `<study or comparison>_<kind of page>`: a committed file named so for a
    # kind that `report` writes is stale when `report` no longer writes it (the benchmarks'
    # files, the maps' data and the pre-training guide's figure are named otherwise).
    # A frozen study's pages are committed and never written again.
    names = sorted(study_config.studies(), key=len, reverse=True)
    frozen = {name for name in names if study_config.load_config(name).get("frozen")}

    def study_and_kind(path):  # the longest study or comparison name that fits, and the rest
        return next(((name, str(path)[len(name) + 1:]) for name in names
                     if str(path).startswith(f"{name}_")), (None, None))

    kinds = {study_and_kind(path)[1] for path in written} - {None}
    stale = [path for path in results.iterdir()
             if path.is_file() and study_and_kind(path.relative_to(results))[1] in kinds
             and path.relative_to(results) not in written]
    assert sorted({study_and_kind(path.relative_to(results))[0] for path in stale}) == sorted(
        frozen)
    assert sorted(path.name for path in stale) == sorted(
        f"{name}_{page}" for name in frozen for page in ("config.json", "glue.csv", "table.md"))


def test_format_seconds_rounds_to_whole_minutes_before_splitting_hours():
    assert records.format_seconds(None) == "–"
    assert records.format_seconds(42.4) == "42 s"
    assert records.format_seconds(125) == "2.1 min"
    assert records.format_seconds(2 * 3600 + 5 * 60 + 20) == "2 h 05 min"
    # 82 h 59.98 min printed "82 h 60 min" before.
    assert records.format_seconds(82 * 3600 + 59.98 * 60) == "83 h 00 min"


def test_the_second_half_leaves_out_the_evaluations_before_half_the_last_step():
    """The comparison's late difference (past the warm-up and the plateau): only the steps
    from half the last shared step on count, here 4, 6 and 8 of 2-8."""
    from experiments.report_pretraining import _second_half

    cell = _second_half([2, 4, 6, 8], [0.5, -0.1, 0.2, -0.3])
    assert cell == "-0.300 to +0.200 (-0.067; steps 4–8, 3 evaluations)"
    assert _second_half([], []) == "–"


def test_a_runs_encoder_config_is_read_from_its_preset_or_a_record(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    assert study_config.run_backbone_config(str(run)) is None
    (run / "backbone_config.json").write_text(json.dumps({"config": {"from": "record"}}))
    assert study_config.run_backbone_config(str(run)) == {"from": "record"}
    (run / "preset").mkdir()
    (run / "preset" / "config.json").write_text(json.dumps({"config": {"from": "preset"}}))
    assert study_config.run_backbone_config(str(run)) == {"from": "preset"}
