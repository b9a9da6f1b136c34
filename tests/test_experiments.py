"""The study runner of `experiments/`: tiny studies end to end on real text.

One module-scoped fixture pre-trains two tiny studies (2 + 1 variants, 4 steps)
on a few hundred lines of enwiki; the tests then re-run, report, evaluate at
longer lengths, fine-tune and draw maps from those runs.
"""

import csv
import json
import os
import re
from pathlib import Path

import numpy as np
import pytest

from experiments import config as study_config
from experiments import finetune_study, length_study, pretrain_study, records
from keras_tupe import data
from keras_tupe.data import glue
from experiments.run import main

REPO = Path(__file__).resolve().parents[1]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI = DATA_DIR / "enwiki"
GLUE = DATA_DIR / "glue"


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
    relative = {"study": "relative", "base": "pretrain.json",
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
    return {"root": root, "runs": Path(runs), "results": Path(results), "configs": paths}


def test_every_variant_trained_with_the_same_settings_and_one_vocabulary(study):
    runs = study["runs"]
    vocabulary = runs / "vocab.txt"
    record = json.loads((runs / "vocab.json").read_text())
    assert record["settings"]["vocabulary_size"] == 300 and record["sha256"]
    configs = {}
    for run in ("pretrain/bert_a", "pretrain/tupe_r", "relative/huang_m4_k8"):
        directory = runs / run
        assert (directory / "mlm.keras").exists() and (directory / "backbone.keras").exists()
        assert (directory / "checkpoints" / "step_0000002.keras").exists()
        assert (directory / "vocab.txt").read_bytes() == vocabulary.read_bytes()
        saved = json.loads((directory / "run_config.json").read_text())
        assert saved["vocabulary_sha256"] == record["sha256"]
        configs[run] = saved["config"]
    presets = {run: c.pop("preset") for run, c in configs.items()}
    assert presets == {"pretrain/bert_a": "bert_a_tiny", "pretrain/tupe_r": "tupe_r_tiny",
                       "relative/huang_m4_k8": "huang_m4_k8_tiny"}
    for c in configs.values():
        c.pop("out")
    assert len({json.dumps(c, sort_keys=True) for c in configs.values()}) == 1
    import keras

    from keras_tupe.models.presets import PRESETS

    backbone = keras.saving.load_model(runs / "relative/huang_m4_k8/backbone.keras")
    assert backbone.max_relative_distance == 8 and backbone.relative_position == "method4"
    assert "huang_m4_k8_tiny" not in PRESETS  # registered only while the study trained


def test_running_a_study_again_skips_its_finished_runs(study, capsys):
    mlm = study["runs"] / "pretrain" / "bert_a" / "mlm.keras"
    before = mlm.stat().st_mtime_ns
    assert main(["pretrain", "--config", study["configs"]["pretrain"], "--verbose", "0"]) == 0
    out = capsys.readouterr().out
    assert "bert_a: finished, skipped" in out and "tupe_r: finished, skipped" in out
    assert mlm.stat().st_mtime_ns == before
    log = records.read_jsonl(str(study["runs"] / "pretrain" / "commands.jsonl"))
    assert log[-1]["status"] == {"bert_a": "skipped", "tupe_r": "skipped"}


def test_the_table_columns_add_each_saved_checkpoint_that_an_evaluation_falls_on():
    # The long runs: 16,000 steps, evaluated every 200, saved at 0, 30% and 50%.
    long = {"settings": {"steps": 16000, "eval_every": 200, "save_steps": [0, 4800, 8000]}}
    assert list(pretrain_study.fraction_steps(long).items()) == [
        (0.25, 4000), (0.3, 4800), (0.5, 8000), (1.0, 16000)]
    # A checkpoint between evaluations has no validation loss of its own: no column.
    off_grid = {"settings": {"steps": 2000, "eval_every": 100, "save_steps": [650, 1000]}}
    assert list(pretrain_study.fraction_steps(off_grid).items()) == [
        (0.25, 500), (0.5, 1000), (1.0, 2000)]


def test_report_writes_the_loss_csv_plot_table_and_settings_record(study):
    assert main(["report", "--config", study["configs"]["pretrain"]]) == 0
    results = study["results"]
    lines = (results / "pretrain_loss.csv").read_text().splitlines()
    assert lines[0].startswith("# command: python -m experiments.run report --config ")
    rows = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert {(r["variant"], r["step"]) for r in rows} == {
        (v, s) for v in ("bert_a", "tupe_r") for s in ("2", "4")}
    assert all(float(r["val_loss"]) > 0 for r in rows)
    assert (results / "pretrain_val_loss.png").read_bytes()[:4] == b"\x89PNG"
    table = (results / "pretrain_table.md").read_text()
    assert "25% (step 2) | 50% (step 2) | 100% (step 4)" in table
    assert re.search(r"\| tupe_r \| tupe_r_tiny \| \d+\.\d{3} \| \d+\.\d{3} \| \d+\.\d{3} \|", table)
    assert "python -m experiments.run report" in table
    # Pairs: bert_a - tupe_r at each shared evaluation, from the loss CSV's own columns.
    loss = {(r["variant"], int(r["step"])): float(r["val_loss"]) for r in rows}
    lines = (results / "pretrain_pairs.csv").read_text().splitlines()
    [pair] = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    diffs = [loss["bert_a", step] - loss["tupe_r", step] for step in (2, 4)]
    assert (pair["a"], pair["b"], pair["evaluations"]) == ("bert_a", "tupe_r", "2")
    assert int(pair["a_lower"]) == sum(d < 0 for d in diffs)
    assert float(pair["diff_min"]) == pytest.approx(min(diffs), abs=2e-5)
    assert float(pair["diff_max"]) == pytest.approx(max(diffs), abs=2e-5)
    assert float(pair["diff_final"]) == pytest.approx(diffs[1], abs=2e-5)
    record = json.loads((results / "pretrain_config.json").read_text())
    assert record["command"].startswith("python -m experiments.run report")
    assert record["runs"]["bert_a"]["run_config"]["config"]["learning_rate"] == 1e-3
    assert record["runs"]["tupe_r"]["wall_seconds"] > 0
    assert record["vocabulary"]["sha256"] == record["runs"]["tupe_r"]["run_config"][
        "vocabulary_sha256"]

    assert main(["report", "--config", study["configs"]["relative"]]) == 0
    relative = json.loads((results / "relative_config.json").read_text())
    assert relative["runs"]["huang_m4_k8"]["structural_overrides"] == {"max_relative_distance": 8}
    assert relative["runs"]["huang_m4_k8"]["backbone_config"]["max_relative_distance"] == 8


def test_reporting_again_keeps_files_whose_only_change_is_a_timestamp(study, monkeypatch):
    assert main(["report", "--config", study["configs"]["pretrain"]]) == 0
    results = study["results"]
    names = ("pretrain_loss.csv", "pretrain_table.md", "pretrain_config.json")
    before = {name: (results / name).read_bytes() for name in names}
    monkeypatch.setattr(records, "now", lambda: "2099-01-01 00:00:00 UTC")
    assert main(["report", "--config", study["configs"]["pretrain"]]) == 0
    assert {name: (results / name).read_bytes() for name in names} == before
    assert b"2099" not in before["pretrain_loss.csv"]


def test_a_rewrite_with_new_content_replaces_the_file(tmp_path):
    path = str(tmp_path / "out.json")
    records.write_json(path, {"created": "then", "seconds": 1.0, "loss": 6.25})
    records.write_json(path, {"created": "now", "seconds": 2.0, "loss": 6.25})
    assert json.loads(Path(path).read_text())["created"] == "then"
    records.write_json(path, {"created": "now", "seconds": 2.0, "loss": 6.5})
    assert json.loads(Path(path).read_text()) == {"created": "now", "seconds": 2.0, "loss": 6.5}

    table = str(tmp_path / "out.csv")
    records.write_csv(table, ["step", "loss"], [{"step": 1, "loss": 6.0}], ["generated: then"])
    records.write_csv(table, ["step", "loss"], [{"step": 1, "loss": 6.0}], ["generated: now"])
    assert "# generated: then" in Path(table).read_text()
    records.write_csv(table, ["step", "loss"], [{"step": 1, "loss": 5.0}], ["generated: now"])
    assert Path(table).read_text().splitlines() == ["# generated: now", "step,loss", "1,5"]


def test_report_refuses_runs_whose_settings_differ(study, capsys):
    path = study["runs"] / "pretrain" / "tupe_r" / "run_config.json"
    original = path.read_text()
    tampered = json.loads(original)
    tampered["config"]["learning_rate"] = 2e-3
    path.write_text(json.dumps(tampered))
    table = study["results"] / "pretrain_table.md"
    table.unlink(missing_ok=True)
    try:
        assert main(["report", "--config", study["configs"]["pretrain"]]) == 2
    finally:
        path.write_text(original)
    err = capsys.readouterr().err
    assert "not trained identically" in err
    assert "tupe_r: learning_rate is 0.002" in err and "the config says 0.001" in err
    assert "tupe_r and bert_a differ in learning_rate" in err
    assert not table.exists()


def test_a_variant_may_not_change_training_settings(tmp_path, study, capsys):
    config = json.loads(Path(study["configs"]["pretrain"]).read_text())
    config["variants"]["tupe_r"] = {"learning_rate": 1e-4}
    path = tmp_path / "tuned.json"
    path.write_text(json.dumps(config))
    assert main(["pretrain", "--config", str(path)]) == 2
    assert "no per-variant tuning" in capsys.readouterr().err
    child = tmp_path / "child.json"
    child.write_text(json.dumps({"study": "child", "base": "tuned.json",
                                 "settings": {"steps": 2}, "variants": {"shaw": {}}}))
    config["variants"]["tupe_r"] = {}
    path.write_text(json.dumps(config))
    with pytest.raises(study_config.StudyError, match=r"sets \['settings'\].*from its base"):
        study_config.load_config(str(child))


def test_length_study_numbers_for_relative_models_and_na_for_short_absolute_tables(study):
    assert main(["length", "--config", study["configs"]["length"]]) == 0
    rows = {(r["variant"], r["length"]): r
            for r in records.read_jsonl(str(study["runs"] / "length" / "results.jsonl"))}
    assert len(rows) == 8
    # The context-free reference: an add-one unigram of the vocabulary's 400 training lines,
    # counted here line by line, scored on the same masked batches.
    config = study_config.load_config(study["configs"]["length"])
    job = length_study.plan(config)[0]
    tokenizer = data.load_tokenizer(job["vocab"], lowercase=True)
    counts = np.ones(tokenizer.vocabulary_size())
    for line in (study["root"] / "train.txt").read_text(encoding="utf-8").splitlines():
        for token_id in np.asarray(tokenizer(line)).ravel():
            counts[token_id] += 1
    for token in ("[CLS]", "[SEP]", "[PAD]"):
        counts[tokenizer.token_to_id(token)] = 1
    log_p = np.log(counts / counts.sum())
    for length in (32, 256):
        batches = length_study._Batches(config).get(job, length)
        expected = (sum(-(log_p[y] * w).sum() for _, y, w in batches)
                    / sum(w.sum() for _, _, w in batches))
        assert rows[("unigram", length)]["loss"] == pytest.approx(expected, rel=1e-9)
        assert rows[("unigram", length)]["masked_tokens"] == rows[("huang_m4_k8", length)][
            "masked_tokens"]
    # tiny presets: 128 absolute positions; the relative model has no table to outgrow.
    relative = rows[("huang_m4_k8", 256)]
    assert np.isfinite(relative["loss"]) and relative["masked_tokens"] > 0
    assert "distances beyond k=8 clipped" in relative["note"]
    for variant in ("bert_a", "tupe_r"):
        assert rows[(variant, 256)]["loss"] is None
        assert "absolute position table has 128 rows" in rows[(variant, 256)]["note"]
        assert np.isfinite(rows[(variant, 32)]["loss"])
    # Same text, same masks at a length: two models, same masked-token count.
    assert rows[("bert_a", 32)]["masked_tokens"] == rows[("huang_m4_k8", 32)]["masked_tokens"]
    # At the pre-training length, tokens_per_batch / 32 = the pre-training batch and seed 1 =
    # its validation seed: the very batches of the logged validation loss. With every mask
    # slot used (16 sequences x 5 here), Keras's loss (sum / slots) equals the weighted mean.
    assert rows[("bert_a", 32)]["masked_tokens"] == 2 * 8 * 5
    logged, _ = records.read_metrics(str(study["runs"] / "pretrain" / "bert_a"))
    assert rows[("bert_a", 32)]["loss"] == pytest.approx(logged[-1]["val_loss"], rel=1e-5)
    table = (study["results"] / "length_table.md").read_text()
    assert re.search(r"\| pretrain/bert_a \| bert_a_tiny \| 4 \| \d+\.\d{3} \| n/a \|", table)
    assert re.search(r"\| relative/huang_m4_k8 \| huang_m4_k8_tiny \| 4 \| \d+\.\d{3} \| "
                     r"\d+\.\d{3} \|", table)
    assert (study["results"] / "length_loss.png").exists()
    # Resumable: a second run evaluates nothing new.
    assert main(["length", "--config", study["configs"]["length"]]) == 0
    assert len(records.read_jsonl(str(study["runs"] / "length" / "results.jsonl"))) == 8
    assert re.search(r"\| baseline/unigram \| \(no model\) \| 0 \| \d+\.\d{3} \| \d+\.\d{3} \|",
                     table)


@pytest.mark.slow
def test_finetune_study_on_the_intermediate_and_final_checkpoints(study):
    assert main(["finetune", "--config", study["configs"]["finetune"]]) == 0
    base = study["runs"] / "finetune" / "pretrain" / "bert_a"
    for step in ("step_0000002", "step_0000004"):
        [row] = records.read_jsonl(str(base / step / "results.jsonl"))
        assert row["wall_seconds"] >= row["train_seconds"] > 0
    table = (study["results"] / "finetune_table.md").read_text()
    assert re.search(r"\| pretrain/bert_a \| 2 \| \d+\.\d\d \| \*\*\d+\.\d\d\*\* \| 1/1 \|", table)
    assert re.search(r"\| pretrain/bert_a \| 4 \|", table)
    # The report names the command that regenerates it from the runs on disk, so that
    # `report` afterwards (or a resumed study) rewrites none of its files.
    regenerate = f"python -m experiments.run report --config {study['configs']['finetune']}"
    lines = (study["results"] / "finetune_glue.csv").read_text().splitlines()
    assert lines[0] == f"# command: {regenerate}"
    assert f"Regenerate: `{regenerate}`" in table
    written = {name: (study["results"] / name).read_bytes()
               for name in ("finetune_glue.csv", "finetune_table.md", "finetune_config.json")}
    assert main(["report", "--config", study["configs"]["finetune"]]) == 0
    assert {name: (study["results"] / name).read_bytes() for name in written} == written
    # The floor row: RTE's dev majority label's share (a constant answer), and the average.
    labels = glue.load_glue("rte", "validation", str(GLUE)).labels
    share = 100 * max(np.mean(labels == 0), np.mean(labels == 1))
    assert f"| *majority class* | – | {share:.2f} | {share:.2f} | – | – |" in table


def test_checkpoint_variants_fine_tune_a_checkpoint_of_only_the_encoders_named(tmp_path):
    """One fine-tuning table with the final models of two pre-training seeds, TUPE-A at 30%
    and one random-init control: `checkpoint_variants` (a plan, nothing trained)."""
    from experiments import finetune_study

    configs = REPO / "experiments" / "configs"
    spec = {"study": "x", "kind": "finetune", "runs_dir": str(tmp_path / "runs"),
            "results_dir": str(tmp_path / "results"),
            "pretrain_configs": [str(configs / "long.json"), str(configs / "long_seed1.json")],
            "variants": ["bert_a", "tupe_a"], "checkpoints": [1.0, 0.3, 0.0],
            "checkpoint_variants": {"0.3": ["tupe_a"], "0.0": ["long/bert_a"]},
            "tasks": ["rte"], "data_dir": str(GLUE), "learning_rates": [1e-4], "seeds": [0],
            "settings": {"epochs": 1}}

    def load(**changes):
        path = tmp_path / "x.json"
        path.write_text(json.dumps({**spec, **changes}))
        return study_config.load_config(str(path))

    jobs = finetune_study.plan(load())
    assert sorted((j["pretrain_study"], j["variant"], j["step"]) for j in jobs) == sorted([
        ("long", "bert_a", 16000), ("long", "tupe_a", 16000), ("long_seed1", "bert_a", 16000),
        ("long_seed1", "tupe_a", 16000), ("long", "tupe_a", 4800),
        ("long_seed1", "tupe_a", 4800), ("long", "bert_a", 0)])
    assert {j["init"] for j in jobs if j["step"] == 0} == {
        "runs/study/long/bert_a/checkpoints/step_0000000.keras"}
    with pytest.raises(study_config.StudyError, match=r"checkpoint '0.5', which is not one"):
        load(checkpoint_variants={"0.5": ["tupe_a"]})
    with pytest.raises(study_config.StudyError, match="maps a checkpoint fraction"):
        load(checkpoint_variants={"0.3": []})
    for name in ("bert_r", "long/bert_x", "pretrain/bert_a"):
        with pytest.raises(study_config.StudyError,
                           match=rf"no variant '{name}'.*Valid: \['bert_a', 'long/bert_a'"):
            finetune_study.plan(load(checkpoint_variants={"0.0": [name]}))


def test_step_0_is_the_initialization_and_fine_tunes_as_the_random_init_control(study):
    import keras

    from keras_tupe.models import TupeBackbone
    from keras_tupe.models.task import load_saved_model

    run = study["runs"] / "pretrain" / "tupe_r"
    initial = load_saved_model(run / "checkpoints" / "step_0000000.keras")
    trained = load_saved_model(run / "checkpoints" / "step_0000002.keras")
    # The encoder the run started from: the preset built under the run's seed, as
    # pre-training builds it, before any step.
    keras.utils.set_random_seed(0)
    vocabulary_size = len((run / "vocab.txt").read_text().splitlines())
    fresh = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=vocabulary_size, dropout=0.1)
    weights = {w.path: keras.ops.convert_to_numpy(w) for w in initial.backbone.weights}
    assert len(weights) == len(fresh.weights)
    for w in fresh.weights:
        np.testing.assert_array_equal(weights[w.path], keras.ops.convert_to_numpy(w),
                                      err_msg=w.path)
    moved = [a.path for a, b in zip(initial.trainable_weights, trained.trainable_weights,
                                    strict=True)
             if not np.array_equal(keras.ops.convert_to_numpy(a), keras.ops.convert_to_numpy(b))]
    assert len(moved) == len(initial.trainable_weights)  # two steps changed every weight

    config = json.loads(Path(study["configs"]["finetune"]).read_text())
    config.update(study="control", variants=["tupe_r"], checkpoints=[0.0, 1.0])
    path = Path(study["configs"]["finetune"]).parent / "control.json"
    path.write_text(json.dumps(config))
    assert main(["finetune", "--config", str(path)]) == 0
    [row] = records.read_jsonl(
        str(study["runs"] / "control" / "pretrain" / "tupe_r" / "step_0000000" / "results.jsonl"))
    assert row["task"] == "rte" and 0 <= row["dev"]["validation"]["score"] <= 1
    settings = json.loads((study["runs"] / "control" / "pretrain" / "tupe_r" / "step_0000000"
                           / "finetune_settings.json").read_text())
    assert settings["init"] == str(run / "checkpoints" / "step_0000000.keras")
    table = (study["results"] / "control_table.md").read_text()
    assert re.search(r"\| pretrain/tupe_r, random init \| 0 \| \d+\.\d\d \|", table)
    assert re.search(r"\| pretrain/tupe_r \| 4 \| \d+\.\d\d \|", table)

    # A fraction the pre-training kept no checkpoint for, or outside [0, 1]: clear errors.
    for fraction, message in [(0.25, r"no checkpoint at 0.25 of the budget \(step 1\)"),
                              (1.5, r"fractions of the pre-training budget in \[0, 1\]")]:
        path.write_text(json.dumps({**config, "checkpoints": [fraction]}))
        with pytest.raises(study_config.StudyError, match=message):
            finetune_study.plan(study_config.load_config(str(path)))


def test_task_settings_change_one_task_and_are_pinned_with_the_study(study, capsys):
    config = json.loads(Path(study["configs"]["finetune"]).read_text())
    config.update(study="capped", checkpoints=[1.0], tasks=["rte", "mrpc"],
                  task_settings={"rte": {"max_train_examples": 8}})
    path = Path(study["configs"]["finetune"]).parent / "capped.json"
    path.write_text(json.dumps(config))
    assert main(["finetune", "--config", str(path)]) == 0
    out = study["runs"] / "capped" / "pretrain" / "bert_a" / "step_0000004"
    rows = {r["task"]: r for r in records.read_jsonl(str(out / "results.jsonl"))}
    assert rows["rte"]["train_examples"] == 8  # its own cap
    assert rows["mrpc"]["train_examples"] == 16  # the shared setting
    table = (study["results"] / "capped_table.md").read_text()
    assert 'by task {"rte": {"max_train_examples": 8}}' in table
    # Another cap, with the runs of the first on disk: refused, nothing mixed.
    path.write_text(json.dumps({**config, "task_settings": {"rte": {"max_train_examples": 4}}}))
    assert main(["finetune", "--config", str(path)]) == 2
    assert "holds results fine-tuned with other settings" in capsys.readouterr().err
    for task_settings, message in [
            ({"cola": {"epochs": 1}}, r"'cola' is not one of the tasks \['rte', 'mrpc'\]"),
            ({"rte": {"learning_rate": 1e-3}}, r"rte: 'learning_rate' cannot change by task "
                                               r"\(valid: \['epochs', 'batch_size'")]:
        path.write_text(json.dumps({**config, "task_settings": task_settings}))
        with pytest.raises(study_config.StudyError, match=message):
            study_config.load_config(str(path))


def test_squad_study_fine_tunes_every_seed_on_one_article_split(study, capsys):
    from keras_tupe.data import squad

    dev = json.loads((DATA_DIR / "squad" / "dev-v1.1.json").read_text())
    small = {"version": dev["version"],
             "data": [{**a, "paragraphs": a["paragraphs"][:2]} for a in dev["data"][:5]]}
    squad_file = study["root"] / "squad_small.json"
    squad_file.write_text(json.dumps(small))
    config = {"study": "squad", "kind": "finetune", "runs_dir": str(study["runs"]),
              "results_dir": str(study["results"]), "pretrain_configs": ["pretrain.json"],
              "variants": ["bert_a"], "checkpoints": [1.0], "tasks": ["squad"],
              "squad_file": str(squad_file), "learning_rates": [1e-4], "seeds": [0, 1],
              "settings": {"epochs": 1, "batch_size": 8, "seq_len": 64, "doc_stride": 32,
                           "max_query_length": 16, "eval_fraction": 0.4, "split_seed": 0,
                           "xla": False}}
    path = Path(study["configs"]["finetune"]).parent / "squad.json"
    path.write_text(json.dumps(config))
    assert main(["finetune", "--config", str(path)]) == 0
    rows = records.read_jsonl(
        str(study["runs"] / "squad" / "pretrain" / "bert_a" / "step_0000004" / "results.jsonl"))
    assert [(r["task"], r["learning_rate"], r["seed"]) for r in rows] == [
        ("squad", 1e-4, 0), ("squad", 1e-4, 1)]
    # Both seeds evaluate on the split of split_seed 0, not on a split of their own.
    _, held_out = squad.split_articles(small["data"], eval_fraction=0.4, seed=0)
    questions = sum(len(p["qas"]) for a in held_out for p in a["paragraphs"])
    assert [r["eval_questions"] for r in rows] == [questions, questions]
    assert all("seed 0); NOT the official" in r["data"] for r in rows)
    f1 = [r["dev"]["eval"]["f1"] for r in rows]
    exact = [r["dev"]["eval"]["exact_match"] for r in rows]
    assert all(0 <= e <= f <= 100 for e, f in zip(exact, f1))
    table = (study["results"] / "squad_table.md").read_text()
    assert "| encoder | step | SQuAD F1 (EM) | average | runs | time |" in table
    assert (f"| pretrain/bert_a | 4 | {np.median(f1):.2f} ({np.median(exact):.2f}) | "
            f"**{np.median(f1):.2f}** | 2/2 |") in table
    assert "majority class" not in table and "article split" in table
    # A SQuAD study fine-tunes SQuAD alone, from a file, with SquadConfig's settings.
    for change, message in [({"tasks": ["squad", "rte"]}, r"must be \[\"squad\"\]"),
                            ({"squad_file": None}, "squad_file"),
                            ({"settings": {"pad_to_longest": True}},
                             r"unknown fine-tuning settings \['pad_to_longest'\]")]:
        changed = {k: v for k, v in {**config, **change}.items() if v is not None}
        path.write_text(json.dumps(changed))
        with pytest.raises(study_config.StudyError, match=message):
            study_config.load_config(str(path))


def test_finetune_report_judges_variants_against_the_pretraining_seed_spread(study):
    folder = Path(study["configs"]["pretrain"]).parent
    (folder / "seedrep.json").write_text(json.dumps({
        "study": "seedrep", "base": "pretrain.json", "seed": 1,
        "variants": {"bert_a": {}, "tupe_r": {}}}))
    config = json.loads(Path(study["configs"]["finetune"]).read_text())
    config.update(study="spread", pretrain_configs=["pretrain.json", "seedrep.json"],
                  variants=["bert_a", "tupe_r"], checkpoints=[1.0], tasks=["rte", "mrpc"],
                  learning_rates=[1e-4], seeds=[0])
    path = folder / "spread.json"
    path.write_text(json.dumps(config))
    scores = {("pretrain", "bert_a"): (0.50, 0.60), ("seedrep", "bert_a"): (0.54, 0.70),
              ("pretrain", "tupe_r"): (0.60, 0.63), ("seedrep", "tupe_r"): (0.62, 0.69)}
    for (pretrain, variant), by_task in scores.items():
        out = study["runs"] / "spread" / pretrain / variant / "step_0000004"
        out.mkdir(parents=True)
        for task, score in zip(("rte", "mrpc"), by_task):
            split = "validation"
            records.append_jsonl(str(out / "results.jsonl"), {
                "task": task, "learning_rate": 1e-4, "seed": 0,
                "dev": {split: {"accuracy": score, "score": score}}})
    assert main(["report", "--config", str(path)]) == 0
    table = (study["results"] / "spread_table.md").read_text()
    assert ("| bert_a | 4 | 0, 1 | 50.00–54.00 (52.00) | 60.00–70.00 (65.00) | "
            "55.00–62.00 (58.50) |") in table
    assert ("| tupe_r | 4 | 0, 1 | 60.00–62.00 (61.00) | 63.00–69.00 (66.00) | "
            "61.50–65.50 (63.50) |") in table
    # RTE: -10 and -8, beyond both ranges (4, 2); MRPC: the signs differ; the average:
    # -6.5 and -3.5, within bert_a's range of 7.
    assert "| bert_a − tupe_r | 4 | -9.00 ! | -1.00 | -5.00 |" in table


def _two_by_two_finetune_study(study, name):
    """`(config, its path, bert_a's final job folder)`: the fixture's fine-tuning study as
    `name`, the final checkpoint only, learning rates 1e-4 and 5e-5 x seeds 0 and 1."""
    config = json.loads(Path(study["configs"]["finetune"]).read_text())
    config.update(study=name, checkpoints=[1.0], learning_rates=[1e-4, 5e-5], seeds=[0, 1])
    path = Path(study["configs"]["finetune"]).parent / f"{name}.json"
    path.write_text(json.dumps(config))
    out = study["runs"] / name / "pretrain" / "bert_a" / "step_0000004"
    out.mkdir(parents=True)
    return config, path, out


def test_a_task_is_complete_only_when_its_whole_grid_has_run(study):
    _, path, out = _two_by_two_finetune_study(study, "partial")

    def row(rate, seed, score):
        return {"task": "rte", "learning_rate": rate, "seed": seed,
                "dev": {"validation": {"accuracy": score, "score": score}}}

    # The best rate has all its seeds, the other one of two: its median may still win.
    rows = [row(1e-4, 0, 0.6), row(1e-4, 1, 0.6), row(5e-5, 0, 0.5)]
    for r in rows:
        records.append_jsonl(str(out / "results.jsonl"), r)
    assert main(["report", "--config", str(path)]) == 0
    table = (study["results"] / "partial_table.md").read_text()
    # ↑: the best rate is the grid's highest.
    assert "| pretrain/bert_a | 4 | 60.00↑* | – | 3/4 |" in table
    # The first three runs are from before runs recorded their time; the last one has it.
    records.append_jsonl(str(out / "results.jsonl"), {**row(5e-5, 1, 0.8), "wall_seconds": 90.0})
    # A run of a grid point the config does not hold: neither scored nor timed.
    records.append_jsonl(str(out / "results.jsonl"), {**row(3e-4, 0, 0.9), "wall_seconds": 60.0})
    assert main(["report", "--config", str(path)]) == 0
    table = (study["results"] / "partial_table.md").read_text()
    # 5e-5: the median of 0.5 and 0.8 wins now.
    assert "| pretrain/bert_a | 4 | 65.00↓ | **65.00** | 4/4 | 1.5 min (1 of 4 runs) |" in table
    assert "| pretrain/bert_a | 4 | 50.0–80.0 |" in table  # the seed range at 5e-5


def test_a_finetune_report_regenerates_from_its_runs_record_without_runs(study, tmp_path,
                                                                         capsys):
    """Issue 21 item 7: the fine-tuning tables regenerate without `runs/`."""
    study = _copy_study(study, tmp_path / "copy")
    config, path, out = _two_by_two_finetune_study(study, "recorded")
    scores = {(1e-4, 0): 0.6, (1e-4, 1): 0.7, (5e-5, 0): 0.5, (5e-5, 1): 0.55}
    for (rate, seed), score in scores.items():
        records.append_jsonl(str(out / "results.jsonl"), {
            "task": "rte", "learning_rate": rate, "seed": seed, "wall_seconds": 30.0,
            "dev": {"validation": {"accuracy": score, "score": score}}})
    assert main(["report", "--config", str(path)]) == 0
    results = study["results"]
    table = (results / "recorded_table.md").read_text()
    assert "| pretrain/bert_a | 4 | 65.00↑ | **65.00** | 4/4 | 2.0 min |" in table
    runs = records.read_csv_rows(results / "recorded_runs.csv")
    assert [(r["learning_rate"], r["seed"], r["score"]) for r in runs] == [
        ("0.0001", "0", "60"), ("0.0001", "1", "70"), ("5e-05", "0", "50"), ("5e-05", "1", "55")]
    assert json.loads(runs[1]["result"])["dev"]["validation"]["score"] == 0.7

    # A new workspace: runs/ is gone. The report is the same, marked as from the record,
    # and fine-tuning skips the recorded job instead of asking for its checkpoint.
    import shutil

    shutil.rmtree(study["runs"])
    csv_before = (results / "recorded_glue.csv").read_text()
    assert main(["report", "--config", str(path)]) == 0
    table = (results / "recorded_table.md").read_text()
    assert "| pretrain/bert_a | 4 | 65.00↑ | **65.00** | 4/4 † | 2.0 min |" in table
    assert (results / "recorded_glue.csv").read_text() == csv_before
    capsys.readouterr()
    assert main(["finetune", "--config", str(path)]) == 0
    assert "every run is in recorded_runs.csv (an earlier workspace), skipped" in (
        capsys.readouterr().out)
    assert not study["runs"].exists()
    # --fresh (run_all.sh --all): the record does not stand in for the runs; the checkpoint
    # they need is gone, so it is asked for.
    assert main(["finetune", "--config", str(path), "--fresh"]) == 2
    assert "Not pre-trained yet" in capsys.readouterr().err
    # A grid point the record lacks: that job must be fine-tuned, and its checkpoint is gone.
    path.write_text(json.dumps({**config, "seeds": [0, 1, 2]}))
    assert main(["finetune", "--config", str(path)]) == 2
    assert "Not pre-trained yet" in capsys.readouterr().err


@pytest.mark.slow
def test_fresh_trains_what_the_records_hold_and_estimate_reads_their_times(study, tmp_path,
                                                                          capsys):
    """Issue 21 item 7, `run_all.sh --all`: `--fresh` makes again the runs an earlier
    workspace recorded, and `estimate` gives the time from the recorded wall times."""
    import shutil

    from experiments import config as study_config
    from experiments.estimate import estimate

    copy = _copy_study(study, tmp_path / "copy")
    results, configs = copy["results"], copy["configs"]
    for stale in results.glob("relative_*"):  # another test may have reported it
        stale.unlink()
    assert main(["report", "--config", configs["pretrain"]]) == 0
    walls = {v: r["wall_seconds"] for v, r in
             json.loads((results / "pretrain_config.json").read_text())["runs"].items()}
    pretrain, relative = (study_config.load_config(configs[n]) for n in ("pretrain", "relative"))
    (row,) = estimate([pretrain])
    assert row["seconds"] == pytest.approx(sum(walls.values())) and row["runs"] == 2
    (row,) = estimate([pretrain], only=[["tupe_r"]], until_steps=[2])  # 2 of 4 steps
    assert row["seconds"] == pytest.approx(walls["tupe_r"] / 2) and row["runs"] == 1
    # relative has no report: its run takes its 4 steps at the median recorded s/step.
    rows = estimate([pretrain, relative])
    assert rows[1]["seconds"] == pytest.approx(np.median([w / 4 for w in walls.values()]) * 4)
    assert "huang_m4_k8 not recorded" in rows[1]["basis"]
    capsys.readouterr()
    assert main(["estimate", configs["pretrain"], f"{configs['pretrain']}:zz"]) == 2
    assert "no variant ['zz']; the study has bert_a, tupe_r" in capsys.readouterr().err

    # The length study with the records of every model, then tupe_r's run is gone.
    assert main(["length", "--config", configs["length"]]) == 0
    logged = read_val_loss(copy["runs"] / "pretrain" / "tupe_r")
    shutil.rmtree(copy["runs"] / "pretrain" / "tupe_r")
    shutil.rmtree(copy["runs"] / "length")
    capsys.readouterr()
    assert main(["length", "--config", configs["length"]]) == 0  # its recorded rows kept
    assert "pretrain/tupe_r step 4: not on disk, its recorded rows are kept" in (
        capsys.readouterr().out)
    assert main(["length", "--config", configs["length"], "--fresh"]) == 2
    assert re.search(r"Not pre-trained yet.*\n.*pretrain/tupe_r/mlm\.keras",
                     capsys.readouterr().err)
    # Without --fresh the recorded run is skipped; with it, trained again: the same numbers.
    assert main(["pretrain", "--config", configs["pretrain"], "--verbose", "0"]) == 0
    assert not (copy["runs"] / "pretrain" / "tupe_r").exists()
    assert main(["pretrain", "--config", configs["pretrain"], "--verbose", "0", "--fresh"]) == 0
    log = records.read_jsonl(str(copy["runs"] / "pretrain" / "commands.jsonl"))
    assert log[-1]["status"] == {"bert_a": "skipped", "tupe_r": "trained"}
    again = read_val_loss(copy["runs"] / "pretrain" / "tupe_r")
    assert again.keys() == logged.keys()
    np.testing.assert_allclose(list(again.values()), list(logged.values()), rtol=1e-5)
    assert main(["length", "--config", configs["length"], "--fresh"]) == 0


def test_estimate_reads_the_committed_records(tmp_path):
    """`estimate` on the committed records of the 8.2M-token study, recomputed here from
    the records' JSON: recorded runs, a share of them, a study never run, fine-tuning."""
    from experiments.estimate import estimate

    configs = REPO / "experiments" / "configs"
    results = REPO / "docs" / "results"
    pretrain = study_config.load_config(str(configs / "pretrain.json"))
    walls = [run["wall_seconds"] for run in json.loads(
        (results / "pretrain_config.json").read_text())["runs"].values()]
    assert len(walls) == 6
    unrun = tmp_path / "never_run.json"
    unrun.write_text(json.dumps({"study": "never_run", "base": str(configs / "pretrain.json"),
                                 "seed": 5, "variants": {"bert_a": {}, "tupe_r": {}}}))
    finetune = study_config.load_config(str(configs / "finetune.json"))
    rows = estimate([pretrain, pretrain, study_config.load_config(str(unrun)), finetune],
                    only=[None, ["bert_a"], None, None], until_steps=[None, 1000, None, None])
    assert rows[0]["seconds"] == pytest.approx(sum(walls))
    bert_a = json.loads((results / "pretrain_config.json").read_text())["runs"]["bert_a"]
    assert rows[1]["seconds"] == pytest.approx(bert_a["wall_seconds"] / 2)
    # Never run: its steps at the median recorded seconds a step of the mini runs.
    assert rows[2]["seconds"] == pytest.approx(2 * 2000 * np.median([w / 2000 for w in walls]))
    assert "not recorded" in rows[2]["basis"]
    jobs = json.loads((results / "finetune_config.json").read_text())["jobs"]
    grid = len(finetune["tasks"]) * len(finetune["learning_rates"]) * len(finetune["seeds"])
    assert rows[3]["seconds"] == pytest.approx(
        sum(j["wall_seconds"] / j["timed_runs"] * grid for j in jobs))


def test_estimate_of_a_study_alone_takes_its_speed_from_the_configs_beside_it(tmp_path):
    """The long study with no finished run recorded (here one unfinished, whose wall time
    covers only its first steps) names no recorded study: its steps take the median
    recorded seconds a step of the finished runs of every mini pre-training config in its
    folder; a config alone in a folder without records gets a clear error instead."""
    from experiments.estimate import estimate

    configs = REPO / "experiments" / "configs"
    results = REPO / "docs" / "results"
    per_step = []
    for path in sorted(configs.glob("*.json")):
        raw = json.loads(path.read_text())
        if raw.get("kind", "pretrain") != "pretrain":
            continue
        config = study_config.load_config(str(path))
        record = results / f"{config['study']}_config.json"
        if record.exists():
            per_step += [run["wall_seconds"] / config["settings"]["steps"]
                         for run in json.loads(record.read_text())["runs"].values()
                         if run.get("wall_seconds") and run.get("status") in (
                             "finished", "finished (recorded)")]
    assert len(per_step) >= 10
    long = study_config.load_config(str(configs / "long.json"))
    long["results_dir"] = str(tmp_path)  # its own record: one run stopped at step 6,400
    records.write_json(str(tmp_path / "long_config.json"), {"runs": {
        "bert_a": {"status": "unfinished (step 6400)", "wall_seconds": 6180.0},
        "tupe_a": {"status": "not started", "wall_seconds": None}}})
    (row,) = estimate([long], only=[["bert_a", "tupe_a"]])
    assert row["seconds"] == pytest.approx(2 * 16000 * np.median(per_step))
    assert "of every config beside it" in row["basis"]
    # A fine-tuning study never run: its steps (every task's training set, SST-2 capped)
    # at the median seconds a step of the recorded 1,000-example runs (3 epochs x 32
    # batches of 32 a run).
    glue_full = study_config.load_config(str(configs / "glue_full.json"))
    sizes = {"cola": 8551, "mrpc": 3668, "rte": 2490, "stsb": 5749, "sst2": 10000}
    steps = sum(3 * -(-n // 32) for n in sizes.values())
    per_run = [job["wall_seconds"] / job["timed_runs"]
               for name in ("finetune", "finetune_intermediate")
               for job in json.loads((results / f"{name}_config.json").read_text())["jobs"]
               if job.get("timed_runs")]
    row, after = estimate([glue_full, long], only=[None, ["bert_a", "tupe_a"]])
    before, _ = estimate([long, glue_full], only=[["bert_a", "tupe_a"], None])
    assert after["seconds"] == pytest.approx(before["seconds"])  # in any order
    assert row["runs"] == 7 * 5 * 3 * 3
    assert row["seconds"] == pytest.approx(7 * 3 * 3 * steps * np.median(per_run) / (3 * 32))
    assert "not recorded: 7 checkpoints x 2,862 training steps" in row["basis"]
    relative = study_config.load_config(str(configs / "glue_relative.json"))
    for key in ("tasks", "data_dir", "learning_rates", "seeds", "settings", "task_settings"):
        assert relative[key] == glue_full[key], key  # Huang Table 3 on glue_full's grid
    squad = study_config.load_config(str(configs / "squad_relative.json"))
    with pytest.raises(study_config.StudyError, match="no recorded SQuAD fine-tuning time"):
        estimate([squad])
    alone = tmp_path / "alone.json"
    alone.write_text(json.dumps({"study": "alone", "base": str(configs / "long.json"),
                                 "seed": 7, "variants": {"bert_a": {}}}))
    with pytest.raises(study_config.StudyError, match="no recorded run of size 'mini'"):
        estimate([study_config.load_config(str(alone))])


def test_majority_class_is_the_best_constant_answer_on_dev():
    from experiments import finetune_study

    scores = finetune_study.majority_class({"tasks": ["cola", "mrpc", "stsb"],
                                            "data_dir": str(GLUE), "settings": {}})
    labels = glue.load_glue("mrpc", "validation", str(GLUE)).labels
    assert 50 < scores["mrpc"] == 100 * max(np.mean(labels == 0), np.mean(labels == 1))
    # A constant answer has Matthews correlation 0, and no correlation at all for STS-B.
    assert scores["cola"] == 0.0 and scores["stsb"] is None


def test_maps_draw_tupe_r_and_refuse_bert_a_clearly(study, tmp_path, capsys):
    out = tmp_path / "maps" / "tupe_r.png"
    run = study["runs"] / "pretrain" / "tupe_r"
    assert main(["maps", "--init", str(run), "--out", str(out), "--length", "16"]) == 0
    assert out.read_bytes()[:4] == b"\x89PNG"
    assert (tmp_path / "maps" / "tupe_r_t5_buckets.png").read_bytes()[:4] == b"\x89PNG"
    arrays = np.load(tmp_path / "maps" / "tupe_r.npz")
    assert arrays["positional_bias"].shape == (4, 16, 16) and arrays["t5_bias"].shape == (32, 4)
    info = json.loads((tmp_path / "maps" / "tupe_r.json").read_text())
    bias = arrays["positional_bias"].astype(np.float64)
    for head, summary in enumerate(info["summary"]):
        for offset in (-2, 0, 1):
            rows = range(max(1, 1 - offset), 16 - max(0, offset))  # [CLS] row and column aside
            expected = np.mean([bias[head, i, i + offset] for i in rows])
            assert summary["mean_by_offset"][str(offset)] == pytest.approx(expected, abs=1e-6)
        by_offset = {int(d): m for d, m in summary["mean_by_offset"].items()}
        assert summary["peak_offset"] == max(by_offset, key=by_offset.get)
        assert summary["cls_column_mean"] == pytest.approx(bias[head, 1:, 0].mean(), abs=1e-6)
    assert info["command"].startswith("python -m experiments.run maps --init")
    # A step checkpoint (a masked-LM .keras) works too.
    checkpoint = run / "checkpoints" / "step_0000002.keras"
    assert main(["maps", "--init", str(checkpoint), "--out", str(tmp_path / "c.png")]) == 0
    capsys.readouterr()
    bad = tmp_path / "bert_a.png"
    code = main(["maps", "--init", str(study["runs"] / "pretrain" / "bert_a"), "--out", str(bad)])
    err = capsys.readouterr().err
    assert code == 2 and "no content-free positional term" in err and "tupe_a" in err
    assert not bad.exists()


def test_maps_redraw_from_their_arrays_without_the_model(study, tmp_path, capsys):
    """`maps --from-npz`: the figures of a study whose runs are gone, drawn again from the
    saved arrays, pixel for pixel those drawn from the model."""
    import matplotlib.image

    first = tmp_path / "first" / "tupe_r.png"
    run = study["runs"] / "pretrain" / "tupe_r"
    assert main(["maps", "--init", str(run), "--out", str(first), "--length", "16"]) == 0
    again = tmp_path / "again.png"
    npz = first.with_suffix(".npz")
    before = npz.read_bytes()
    assert main(["maps", "--from-npz", str(npz), "--out", str(again)]) == 0
    for drawn, redrawn in ((first, again), (tmp_path / "first" / "tupe_r_t5_buckets.png",
                                            tmp_path / "again_t5_buckets.png")):
        np.testing.assert_array_equal(matplotlib.image.imread(redrawn),
                                      matplotlib.image.imread(drawn))
    assert npz.read_bytes() == before  # the arrays are kept as they were
    info = json.loads(first.with_suffix(".json").read_text())
    assert info["command"].startswith("python -m experiments.run maps --init")
    assert info["redrawn"]["command"].startswith("python -m experiments.run maps --from-npz")
    capsys.readouterr()
    first.with_suffix(".json").unlink()
    assert main(["maps", "--from-npz", str(npz)]) == 2
    assert "tupe_r.json, written with it, is missing" in capsys.readouterr().err
    assert main(["maps", "--from-npz", str(tmp_path / "none.npz")]) == 2
    assert "not a maps .npz file" in capsys.readouterr().err
    assert main(["maps", "--init", str(run)]) == 2
    assert "maps --init needs --out" in capsys.readouterr().err


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


def read_val_loss(run_dir):
    with open(run_dir / "metrics.csv") as f:
        return {int(r["step"]): float(r["val_loss"]) for r in csv.DictReader(f)}


def test_references_draw_and_tabulate_runs_of_another_study(study, capsys):
    folder = Path(study["configs"]["pretrain"]).parent
    results = study["results"]
    with_references = folder / "relative_with_references.json"
    with_references.write_text(json.dumps({
        **json.loads(Path(study["configs"]["relative"]).read_text()),
        "references": {"pretrain.json": ["tupe_r", "bert_a"]}}))
    assert main(["report", "--config", str(with_references)]) == 0
    table = (results / "relative_table.md").read_text()
    logged = read_val_loss(study["runs"] / "pretrain" / "tupe_r")
    # The reference row holds the reference run's own logged losses at 25/50/100%.
    row = next(line for line in table.splitlines() if line.startswith("| *tupe_r (pretrain)*"))
    cells = [c.strip() for c in row.split("|")[1:-1]]
    assert cells[2:5] == [f"{logged[2]:.3f}", f"{logged[2]:.3f}", f"{logged[4]:.3f}"]
    assert cells[-1] == "reference: finished"
    names = [line.split("|")[1].strip() for line in table.splitlines()
             if line.startswith("| ") and "---" not in line][1:]
    assert names == ["huang_m4_k8", "*tupe_r (pretrain)*", "*bert_a (pretrain)*"]
    lines = (results / "relative_pairs.csv").read_text().splitlines()
    pairs = list(csv.DictReader(line for line in lines if not line.startswith("#")))
    assert [(p["a"], p["b"]) for p in pairs] == [
        ("huang_m4_k8", "tupe_r (pretrain)"), ("huang_m4_k8", "bert_a (pretrain)"),
        ("tupe_r (pretrain)", "bert_a (pretrain)")]
    bert_a = read_val_loss(study["runs"] / "pretrain" / "bert_a")
    assert float(pairs[2]["diff_final"]) == pytest.approx(logged[4] - bert_a[4], abs=1e-4)
    record = json.loads((results / "relative_config.json").read_text())
    assert [(r["study"], r["variant"], r["seed"]) for r in record["references"]] == [
        ("pretrain", "tupe_r", 0), ("pretrain", "bert_a", 0)]

    def refused(content, message):
        with_references.write_text(json.dumps(content))
        assert main(["report", "--config", str(with_references)]) == 2
        assert re.search(message, capsys.readouterr().err)

    relative = json.loads(Path(study["configs"]["relative"]).read_text())
    refused({**relative, "references": {"pretrain.json": ["bert_r"]}},
            r"has no variant\(s\) \['bert_r'\]\. Its variants: \['bert_a', 'tupe_r'\]")
    refused({**relative, "references": {"relative_with_references.json": ["huang_m4_k8"]}},
            r"names its own study")
    refused({**relative, "references": ["pretrain.json"]}, r"`references` maps another")
    other = json.loads(Path(study["configs"]["pretrain"]).read_text())
    other["study"], other["settings"]["learning_rate"] = "other", 5e-4
    (folder / "other.json").write_text(json.dumps(other))
    refused({**relative, "references": {"other.json": ["bert_a"]}},
            r"reference study other\.json was trained with other \['learning_rate'\]")
    # A replicate with another seed is a valid reference; its seed is named.
    replicate = folder / "seed5.json"
    replicate.write_text(json.dumps({"study": "seed5", "base": "pretrain.json", "seed": 5,
                                     "variants": {"tupe_r": {}},
                                     "references": {"pretrain.json": ["tupe_r"]}}))
    config = study_config.load_config(str(replicate))
    [(reference, run)] = pretrain_study.collect_references(config)
    assert pretrain_study._reference_label(config, reference, run) == "tupe_r (pretrain, seed 0)"
    assert main(["report", "--config", study["configs"]["relative"]]) == 0  # as before


def test_a_replicate_study_changes_the_seed_and_nothing_else(study, tmp_path):
    folder = Path(study["configs"]["pretrain"]).parent
    replicate = folder / "replicate.json"
    replicate.write_text(json.dumps({"study": "replicate", "base": "pretrain.json", "seed": 7,
                                     "variants": {"tupe_r": {}}}))
    base = study_config.load_config(study["configs"]["pretrain"])
    config = study_config.load_config(str(replicate))
    assert config["settings"] == {**base["settings"], "seed": 7}
    assert config["vocabulary"] == base["vocabulary"]
    [variant] = study_config.variants(config)
    run = study_config.pretrain_config(config, variant)
    original = study_config.pretrain_config(base, study_config.variants(base)[1])
    assert (run.seed, original.seed) == (7, 0)
    assert {**run.resume_key(), "seed": 0, "out": original.out} == original.resume_key()
    assert run.out != original.out and "replicate" in run.out

    for content, message in [
        ({"seed": 0}, r"base's own seed"),
        ({"seed": "1"}, r"`seed` must be an integer"),
        ({"seed": 1, "settings": {"seed": 1}}, r"sets \['settings'\]"),
    ]:
        replicate.write_text(json.dumps({"study": "replicate", "base": "pretrain.json",
                                         "variants": {"tupe_r": {}}, **content}))
        with pytest.raises(study_config.StudyError, match=message):
            study_config.load_config(str(replicate))
    own = tmp_path / "own.json"
    own.write_text(json.dumps({**json.loads(Path(study["configs"]["pretrain"]).read_text()),
                               "seed": 3}))
    with pytest.raises(study_config.StudyError, match=r"only for a study with a `base`"):
        study_config.load_config(str(own))


def test_seeds_puts_replicates_together_with_their_spread(study, capsys):
    folder = Path(study["configs"]["pretrain"]).parent
    replicate = folder / "seed1.json"
    replicate.write_text(json.dumps({"study": "seed1", "base": "pretrain.json", "seed": 1,
                                     "variants": {"bert_a": {}, "tupe_r": {}}}))
    assert main(["pretrain", "--config", str(replicate), "--verbose", "0"]) == 0
    studies = [study["configs"]["pretrain"], str(replicate)]
    assert main(["seeds", "--name", "rep", "--studies", *studies]) == 0
    loss = {(v, seed): read_val_loss(study["runs"] / name / v)
            for v in ("bert_a", "tupe_r") for seed, name in ((0, "pretrain"), (1, "seed1"))}
    results = study["results"]
    lines = (results / "rep_seeds.csv").read_text().splitlines()
    rows = {(r["variant"], int(r["step"])): r
            for r in csv.DictReader(line for line in lines if not line.startswith("#"))}
    assert set(rows) == {(v, s) for v in ("bert_a", "tupe_r") for s in (2, 4)}
    for (v, step), row in rows.items():
        values = [loss[v, 0][step], loss[v, 1][step]]
        assert float(row["mean"]) == pytest.approx(np.mean(values), abs=2e-5)
        assert float(row["lowest"]) == pytest.approx(min(values), abs=2e-5)
        assert float(row["highest"]) == pytest.approx(max(values), abs=2e-5)
        assert int(row["tokens"]) == step * 8 * 32 and row["seeds"] == "2"
    assert (results / "rep_seeds.png").read_bytes()[:4] == b"\x89PNG"
    table = (results / "rep_seeds.md").read_text()
    final = [loss["tupe_r", 0][4], loss["tupe_r", 1][4]]
    assert (f"| tupe_r | " in table and f"{np.mean(final):.3f} ({min(final):.3f}–"
            f"{max(final):.3f}) | 2 |" in table)
    # The gap at 100%, seed by seed, and bert_a at 50% (step 2) against tupe_r at 100%.
    gaps = [loss["bert_a", s][4] - loss["tupe_r", s][4] for s in (0, 1)]
    assert (f"| bert_a − tupe_r | 4 | {np.mean(gaps):+.3f} | {gaps[0]:+.3f}, {gaps[1]:+.3f} |"
            in table)
    early = [loss["bert_a", s][2] - loss["tupe_r", s][4] for s in (0, 1)]
    assert (f"| bert_a at 50% − tupe_r at 100% | 2 vs 4 | {np.mean(early):+.3f} | "
            f"{early[0]:+.3f}, {early[1]:+.3f} |" in table)

    # A replicate still under way (seed 1 of tupe_r logged only step 2): its cells and gaps
    # at steps not every seed has reached are empty, not taken from another step.
    metrics = study["runs"] / "seed1" / "tupe_r" / "metrics.csv"
    original = metrics.read_text()
    try:
        metrics.write_text("".join(line for line in original.splitlines(True)
                                   if not line.startswith("4,")))
        assert read_val_loss(study["runs"] / "seed1" / "tupe_r").keys() == {2}
        assert main(["seeds", "--name", "part", "--studies", *studies]) == 0
    finally:
        metrics.write_text(original)
    table = (results / "part_seeds.md").read_text()
    assert _table_row(table, "tupe_r")[3:] == ["–", "2"]
    assert _table_row(table, "bert_a")[3] == (
        f"{np.mean([loss['bert_a', 0][4], loss['bert_a', 1][4]]):.3f} "
        f"({min(loss['bert_a', 0][4], loss['bert_a', 1][4]):.3f}–"
        f"{max(loss['bert_a', 0][4], loss['bert_a', 1][4]):.3f})")
    assert "| bert_a − tupe_r | 4 | – | – | – |" in table
    assert "| tupe_r at 50% − bert_a at 100% | 2 vs 4 | " in table
    assert "| bert_a at 50% − tupe_r at 100% | 2 vs 4 | – | – | – |" in table

    capsys.readouterr()
    for argv, message in [
            ([studies[0], studies[0]], "names a study twice"),
            ([studies[0]], "at least two studies"),
            ([studies[0], str(folder / "relative.json")], "seeds are \\[0, 0\\]")]:
        assert main(["seeds", "--name", "bad", "--studies", *argv]) == 2
        assert re.search(message, capsys.readouterr().err)
    assert not (results / "bad_seeds.md").exists()


def test_an_overrides_study_changes_only_the_settings_it_names(study, tmp_path):
    folder = Path(study["configs"]["pretrain"]).parent
    path = folder / "overrides.json"
    path.write_text(json.dumps({"study": "overrides", "base": "pretrain.json",
                                "overrides": {"learning_rate": 3e-3, "warmup_ratio": 0.5,
                                              "precision": "mixed_bfloat16"},
                                "variants": {"bert_a": {}}}))
    base = study_config.load_config(study["configs"]["pretrain"])
    config = study_config.load_config(str(path))
    assert config["settings"] == {**base["settings"], "learning_rate": 3e-3,
                                  "warmup_ratio": 0.5, "precision": "mixed_bfloat16"}
    assert base["settings"]["learning_rate"] == 1e-3  # the base is left as it was
    run = study_config.pretrain_config(config, study_config.variants(config)[0])
    assert (run.learning_rate, run.warmup_ratio, run.precision) == (3e-3, 0.5, "mixed_bfloat16")

    for content, message in [
        ({"overrides": {"steps": 8}}, r"may change only \['precision', 'xla', "
                                      r"'learning_rate', 'warmup_ratio'\].*\['steps'\]"),
        ({"overrides": {"learning_rate": 1e-3}}, r"sets \['learning_rate'\] to the base's own"),
        ({"overrides": {}}, r"`overrides` maps settings to new values"),
        ({"overrides": [1]}, r"`overrides` maps settings to new values"),
    ]:
        path.write_text(json.dumps({"study": "overrides", "base": "pretrain.json",
                                    "variants": {"bert_a": {}}, **content}))
        with pytest.raises(study_config.StudyError, match=message):
            study_config.load_config(str(path))
    own = tmp_path / "own.json"
    own.write_text(json.dumps({**json.loads(Path(study["configs"]["pretrain"]).read_text()),
                               "overrides": {"learning_rate": 3e-3}}))
    with pytest.raises(study_config.StudyError, match=r"`overrides`.*only for a study with a"):
        study_config.load_config(str(own))


def test_compare_puts_studies_that_differ_in_their_overrides_side_by_side(study, tmp_path,
                                                                        capsys):
    study = _copy_study(study, tmp_path / "copy")
    folder = Path(study["configs"]["pretrain"]).parent
    faster = folder / "faster.json"
    faster.write_text(json.dumps({"study": "faster", "base": "pretrain.json",
                                  "overrides": {"learning_rate": 3e-3},
                                  "variants": {"bert_a": {}}}))
    assert main(["pretrain", "--config", str(faster), "--verbose", "0"]) == 0
    capsys.readouterr()
    assert main(["compare", "--name", "lr", "--studies", study["configs"]["pretrain"],
                 str(faster)]) == 0
    results = study["results"]
    base_rows, _ = records.read_metrics(study["runs"] / "pretrain" / "bert_a")
    fast_rows, fast_wall = records.read_metrics(study["runs"] / "faster" / "bert_a")
    rows = records.read_csv_rows(results / "lr_compare.csv")
    assert [(r["study"], r["variant"], r["step"]) for r in rows] == [
        ("pretrain", "bert_a", "2"), ("pretrain", "bert_a", "4"),
        ("pretrain", "tupe_r", "2"), ("pretrain", "tupe_r", "4"),
        ("faster", "bert_a", "2"), ("faster", "bert_a", "4")]
    assert {r["overrides"] for r in rows if r["study"] == "faster"} == {"learning_rate=0.003"}
    assert float(rows[5]["val_loss"]) == pytest.approx(fast_rows[-1]["val_loss"], rel=1e-5)

    table = (results / "lr_compare.md").read_text()
    base_loss = {r["step"]: r["val_loss"] for r in base_rows}
    fast_loss = {r["step"]: r["val_loss"] for r in fast_rows}
    diffs = [fast_loss[s] - base_loss[s] for s in (2, 4)]
    largest = max(diffs, key=abs)
    speed = records.median_tokens_per_second(fast_rows)
    base_speed = records.median_tokens_per_second(base_rows)
    row = [cell.strip() for cell in next(
        line for line in table.splitlines() if line.startswith("| bert_a | faster |")
    ).split("|")[1:-1]]
    assert row == ["bert_a", "faster", "learning_rate=0.003", "4", f"{speed:,.0f}",
                   f"{speed / base_speed:.2f}x", f"{fast_loss[4]:.3f} (step 4)",
                   f"{largest:+.3f} (2 evaluations)", records.format_seconds(fast_wall)]
    winner = "faster" if fast_loss[4] < base_loss[4] else "pretrain"
    assert f"bert_a: `{winner}` ({min(fast_loss[4], base_loss[4]):.3f} at step 4)" in table
    # The shared setting: over bert_a, the one variant both studies ran.
    lowest = min(fast_loss[4], base_loss[4])
    assert (f"One shared setting for bert_a (the variants every study ran): `{winner}`, the "
            f"lowest mean of their losses at the common step ({lowest:.3f}; "
            f"`pretrain` {base_loss[4]:.3f}, `faster` {fast_loss[4]:.3f}).") in table
    # tupe_r ran in the first study only: its row has no comparison.
    tupe_row = next(line for line in table.splitlines() if line.startswith("| tupe_r |"))
    assert "| pretrain | base settings |" in tupe_row and tupe_row.count("| – |") == 1
    assert (results / "lr_compare.png").stat().st_size > 10_000

    # Studies that differ in more than their overrides, or a study named twice, are refused.
    other = folder / "other.json"
    other.write_text(json.dumps({**json.loads(Path(study["configs"]["pretrain"]).read_text()),
                                 "study": "other", "settings": {
                                     **json.loads(Path(study["configs"]["pretrain"]).read_text())[
                                         "settings"], "steps": 6}}))
    for studies, message in [
        ([study["configs"]["pretrain"], str(other)], r"differ in \['steps'\]: only studies"),
        ([str(faster), str(faster)], r"names a study twice"),
        ([str(faster)], r"at least two studies"),
    ]:
        with pytest.raises(study_config.StudyError, match=message):
            from experiments.compare import compare

            compare([study_config.load_config(p) for p in studies], "x", "cmd")
    assert not (results / "x_compare.md").exists()


def test_the_shipped_study_configs_load_and_share_their_settings():
    folder = REPO / "experiments" / "configs"
    pretrain = study_config.load_config(str(folder / "pretrain.json"))
    for name in ("relative", "clip_sweep", "pretrain_seed1"):
        config = study_config.load_config(str(folder / f"{name}.json"))
        assert config["vocabulary"] == pretrain["vocabulary"], name
        expected = {**pretrain["settings"], **({"seed": 1} if name == "pretrain_seed1" else {})}
        assert config["settings"] == expected, name
        # Its references exist and were trained comparably (checked on the configs; the
        # runs need not be on disk).
        assert config["references"] and pretrain_study.collect_references(config), name
    final = study_config.load_config(str(folder / "finetune.json"))
    intermediate = study_config.load_config(str(folder / "finetune_intermediate.json"))
    for key in ("tasks", "data_dir", "learning_rates", "seeds", "settings", "pretrain_configs"):
        assert final[key] == intermediate[key], key
    assert set(intermediate["variants"]) <= set(pretrain["variants"])
    for fraction in intermediate["checkpoints"]:  # a checkpoint the pre-training writes
        study_config.checkpoint_path(pretrain, study_config.variants(pretrain)[0], fraction)
    study_config.load_config(str(folder / "length.json"), kind="length")


def test_the_sweep_is_one_grid_for_every_variant_and_the_speed_studies_change_one_thing():
    """Issue 21: the configs prove the tuning grid was the same for every variant."""
    folder = REPO / "experiments" / "configs"
    sweep = [study_config.load_config(str(path)) for path in sorted(folder.glob("sweep_*.json"))]
    base = study_config.load_config(str(folder / "sweep_lr5e4_wu05.json"))
    grid = {(c["settings"]["learning_rate"], c["settings"]["warmup_ratio"]) for c in sweep}
    # The grid, whole, plus the point that brackets the best rate (1e-3 at 20%
    # warm-up for both models, at the grid's edge): 2e-3 at 20%.
    assert grid == {(lr, wu) for lr in (2e-4, 5e-4, 1e-3) for wu in (0.05, 0.2)} | {(2e-3, 0.2)}
    assert len(sweep) == len(grid) == 7
    for config in sweep:
        assert list(config["variants"]) == ["bert_a", "tupe_a", "bert_r", "tupe_r"]
        assert {**config["settings"], "learning_rate": 0, "warmup_ratio": 0} == {
            **base["settings"], "learning_rate": 0, "warmup_ratio": 0}, config["study"]
        assert config["vocabulary"] == base["vocabulary"]
    # The sweep's base is the pretrain study's setting (5e-4, 5%), the vocabulary file too.
    pretrain = study_config.load_config(str(folder / "pretrain.json"))
    assert {k: v for k, v in base["settings"].items() if k != "precision"} == {
        k: v for k, v in pretrain["settings"].items() if k != "precision"}
    speed = {path.stem: study_config.load_config(str(path))
             for path in folder.glob("speed_*.json")}
    assert {name: (c["settings"]["precision"], c["settings"]["xla"])
            for name, c in speed.items()} == {
        "speed_f32_xla": ("float32", True), "speed_bf16_xla": ("mixed_bfloat16", True),
        "speed_f32_noxla": ("float32", False), "speed_bf16_noxla": ("mixed_bfloat16", False)}
    for config in speed.values():
        assert {**config["settings"], "precision": "float32", "xla": True} == pretrain["settings"]


def test_the_long_and_relative_studies_share_the_sweep_base():
    """Issue 21 item 2: >= 65M tokens, checkpoints at 0, 30% and 50%, at a grid point of
    the sweep, the sweep's data and vocabulary; the seed replicate differs only in seed."""
    folder = REPO / "experiments" / "configs"
    base = study_config.load_config(str(folder / "sweep_lr5e4_wu05.json"))
    long, seed1 = (study_config.load_config(str(folder / f"{name}.json"))
                   for name in ("long", "long_seed1"))
    settings = long["settings"]
    assert settings["steps"] * settings["batch_size"] * settings["seq_len"] >= 65_000_000
    assert settings["steps"] >= 8 * base["settings"]["steps"]
    assert settings["save_steps"] == [0, int(0.3 * settings["steps"]), settings["steps"] // 2]
    changed = ("steps", "eval_every", "save_steps", "learning_rate", "warmup_ratio")
    assert {k: v for k, v in settings.items() if k not in changed} == {
        k: v for k, v in base["settings"].items() if k not in changed}
    # The chosen setting is the committed sweep's best grid point of both BERT-A and TUPE-A.
    final = {}  # (learning rate, warm-up) -> {variant: final validation loss}
    for path in sorted(folder.glob("sweep_*.json")):
        config = study_config.load_config(str(path))
        runs, _ = pretrain_study.recorded_runs(config)
        point = (config["settings"]["learning_rate"], config["settings"]["warmup_ratio"])
        final[point] = {name: run["rows"][-1]["val_loss"] for name, run in runs.items()
                        if run["rows"][-1]["step"] == config["settings"]["steps"]}
    for variant in ("bert_a", "tupe_a"):
        losses = {point: f[variant] for point, f in final.items() if variant in f}
        assert len(losses) >= 6, (variant, losses)
        assert min(losses, key=losses.get) == (settings["learning_rate"],
                                               settings["warmup_ratio"]), (variant, losses)
    assert long["vocabulary"] == seed1["vocabulary"] == base["vocabulary"]
    assert seed1["settings"] == {**settings, "seed": 1} and settings["seed"] == 0
    assert list(seed1["variants"]) == ["bert_a", "tupe_a"] == list(long["variants"])[:2]
    # Item 4: the relative methods again on the sweep's base, k = 8 and 512 with two seeds.
    relative, relative1 = (study_config.load_config(str(folder / f"{name}.json"))
                           for name in ("relative_v2", "relative_v2_seed1"))
    assert relative["settings"] == base["settings"] == {**relative1["settings"], "seed": 0}
    assert relative1["settings"]["seed"] == 1
    assert relative["vocabulary"] == relative1["vocabulary"] == base["vocabulary"]
    assert {v.name: (v.variant, v.overrides) for v in study_config.variants(relative)} == {
        **{name: (name, {}) for name in ("shaw", "huang_m1", "huang_m2", "huang_m3",
                                         "huang_m4")},
        "huang_m4_k8": ("huang_m4", {"max_relative_distance": 8})}
    assert {v.name: (v.variant, v.overrides) for v in study_config.variants(relative1)} == {
        "huang_m4": ("huang_m4", {}), "huang_m4_k8": ("huang_m4", {"max_relative_distance": 8})}
    for config in (relative, relative1):
        assert pretrain_study.collect_references(config), config["study"]


def _copy_study(study, target):
    """The fixture's study copied to `target`: its runs and results there (the corpus, which
    the runs record, where it was)."""
    import shutil

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


def _table_row(table, name):
    line = next(line for line in table.splitlines() if line.startswith(f"| {name} |"))
    return [cell.strip() for cell in line.split("|")[1:-1]]


def test_a_report_keeps_finished_runs_whose_directories_are_gone(study, tmp_path, capsys):
    # runs/ is not in git: a new workspace has the committed report but not the runs.
    copy = _copy_study(study, tmp_path / "copy")
    results, configs = copy["results"], copy["configs"]
    assert main(["report", "--config", configs["pretrain"]]) == 0
    csv_before = (results / "pretrain_loss.csv").read_text()
    row_before = _table_row((results / "pretrain_table.md").read_text(), "tupe_r")
    logged = read_val_loss(copy["runs"] / "pretrain" / "tupe_r")
    import shutil

    shutil.rmtree(copy["runs"] / "pretrain" / "tupe_r")
    # Without the vocabulary on disk, the report's own record of it is used.
    vocabulary = {name: (copy["runs"] / name).read_bytes() for name in ("vocab.txt", "vocab.json")}
    for name in vocabulary:
        (copy["runs"] / name).unlink()
    assert main(["report", "--config", configs["pretrain"]]) == 0
    for name, content in vocabulary.items():
        (copy["runs"] / name).write_bytes(content)
    # Every logged evaluation of the removed run is still there, with its numbers.
    assert (results / "pretrain_loss.csv").read_text().splitlines()[1:] == \
        csv_before.splitlines()[1:]
    table = (results / "pretrain_table.md").read_text()
    row = _table_row(table, "tupe_r")
    assert row[:-1] == row_before[:-1] and row[2:5] == [
        f"{logged[2]:.3f}", f"{logged[2]:.3f}", f"{logged[4]:.3f}"]
    assert row[-1] == "finished (recorded)" and _table_row(table, "bert_a")[-1] == "finished"
    record = json.loads((results / "pretrain_config.json").read_text())
    assert "pretrain_loss.csv" in record["runs"]["tupe_r"]["source"]
    assert record["runs"]["bert_a"]["source"].endswith(os.path.join("pretrain", "bert_a"))
    # Training the study again skips the recorded run, unless --variants names it.
    assert main(["pretrain", "--config", configs["pretrain"], "--verbose", "0"]) == 0
    assert "tupe_r: finished in an earlier workspace" in capsys.readouterr().out
    assert not (copy["runs"] / "pretrain" / "tupe_r").exists()
    log = records.read_jsonl(str(copy["runs"] / "pretrain" / "commands.jsonl"))
    assert log[-1]["status"] == {"bert_a": "skipped", "tupe_r": "skipped (recorded)"}
    # A reference whose directory is gone comes from its study's record too.
    with_references = Path(configs["relative"]).with_name("relative_refs.json")
    with_references.write_text(json.dumps({
        **json.loads(Path(configs["relative"]).read_text()),
        "references": {"pretrain.json": ["tupe_r"]}}))
    assert main(["report", "--config", str(with_references)]) == 0
    reference = _table_row((results / "relative_table.md").read_text(), "*tupe_r (pretrain)*")
    assert reference[2:5] == row[2:5] and reference[-1] == "reference: finished (recorded)"

    # A record is checked like a run on disk: other settings are refused, by name.
    original = (results / "pretrain_config.json").read_text()
    changed = json.loads(original)
    changed["runs"]["tupe_r"]["run_config"]["config"]["learning_rate"] = 0.1
    (results / "pretrain_config.json").write_text(json.dumps(changed))
    assert main(["report", "--config", configs["pretrain"]]) == 2
    assert re.search(r"tupe_r: learning_rate is 0\.1 in .*pretrain_config\.json",
                     capsys.readouterr().err)
    # An unfinished run whose directory is gone keeps its recorded evaluations in the
    # report (nothing committed is dropped), marked as such; training starts it anew.
    changed = json.loads(original)
    changed["runs"]["tupe_r"]["status"] = "unfinished (step 4)"
    (results / "pretrain_config.json").write_text(json.dumps(changed))
    assert main(["report", "--config", configs["pretrain"]]) == 0
    table = (results / "pretrain_table.md").read_text()
    assert _table_row(table, "tupe_r")[-1] == "unfinished (recorded, step 4)"
    assert _table_row(table, "tupe_r")[2:5] == row[2:5]
    assert "*unfinished (recorded, step N)*" in table
    assert (results / "pretrain_loss.csv").read_text().splitlines()[1:] == \
        csv_before.splitlines()[1:]
    record = json.loads((results / "pretrain_config.json").read_text())
    assert record["runs"]["tupe_r"]["status"] == "unfinished (recorded, step 4)"
    kept, _ = pretrain_study.recorded_runs(study_config.load_config(configs["pretrain"]))
    assert kept["tupe_r"]["finished"] is False and kept["bert_a"]["finished"] is True
    assert {r["step"]: r["val_loss"] for r in kept["tupe_r"]["rows"]
            if r["val_loss"] is not None} == pytest.approx(logged, abs=1e-4)
    # A run stopped before its first evaluation has nothing to keep.
    changed["runs"]["tupe_r"]["status"] = "unfinished (step 0)"
    (results / "pretrain_config.json").write_text(json.dumps(changed))
    (results / "pretrain_loss.csv").write_text("".join(
        line for line in csv_before.splitlines(True) if not line.startswith("tupe_r,")))
    assert main(["report", "--config", configs["pretrain"]]) == 0
    assert _table_row((results / "pretrain_table.md").read_text(), "tupe_r")[-1] == "not started"


@pytest.mark.slow
def test_a_length_report_keeps_the_rows_of_models_evaluated_elsewhere(study, tmp_path):
    copy = _copy_study(study, tmp_path / "copy")
    results, config = copy["results"], copy["configs"]["length"]
    jsonl = copy["runs"] / "length" / "results.jsonl"
    jsonl.unlink(missing_ok=True)
    for path in results.glob("length_*"):  # another test's report, copied with the study
        path.unlink()
    assert main(["length", "--config", config, "--variants", "bert_a", "huang_m4_k8"]) == 0
    before = {name: (results / name).read_text() for name in ("length_loss.csv",
                                                               "length_table.md")}
    assert "pretrain/tupe_r" in before["length_table.md"]
    assert "| pretrain/tupe_r | tupe_r_tiny | 4 | – | – |" in before["length_table.md"]
    # Another workspace: the results on disk are gone, tupe_r is evaluated there.
    jsonl.unlink()
    assert main(["length", "--config", config, "--variants", "tupe_r"]) == 0
    table = (results / "length_table.md").read_text()
    for name in ("pretrain/bert_a", "relative/huang_m4_k8", "baseline/unigram"):
        assert _table_row(table, name) == _table_row(before["length_table.md"], name), name
    assert re.search(r"\| pretrain/tupe_r \| tupe_r_tiny \| 4 \| \d+\.\d{3} \| n/a \|", table)
    rows = records.read_csv_rows(str(results / "length_loss.csv"))
    assert [(r["variant"], r["length"]) for r in rows] == [
        (v, n) for v in ("bert_a", "tupe_r", "huang_m4_k8", "unigram") for n in ("32", "256")]
    # The whole study in a workspace where bert_a's model is gone: its rows are kept, the
    # models on disk are evaluated (again: the same numbers).
    jsonl.unlink()
    (copy["runs"] / "pretrain" / "bert_a" / "mlm.keras").unlink()
    assert main(["length", "--config", config]) == 0
    again = (results / "length_table.md").read_text()
    for name in ("pretrain/bert_a", "pretrain/tupe_r", "relative/huang_m4_k8"):
        assert _table_row(again, name) == _table_row(table, name), name
    assert {r["variant"] for r in records.read_jsonl(str(jsonl))} == {"tupe_r", "huang_m4_k8"}
    # A model neither on disk nor recorded is refused, by path.
    (results / "length_loss.csv").write_text("".join(
        line for line in (results / "length_loss.csv").read_text().splitlines(True)
        if ",bert_a," not in line))
    jsonl.unlink()
    with pytest.raises(study_config.StudyError, match=r"(?s)Not pre-trained yet.*bert_a/mlm.keras"):
        length_study.run_study(study_config.load_config(config), "c", "r")


@pytest.mark.slow
def test_a_run_stopped_at_until_step_resumes_to_the_uninterrupted_weights(study, tmp_path,
                                                                          capsys):
    import shutil

    import keras

    copy = _copy_study(study, tmp_path / "copy")
    config, run = copy["configs"]["pretrain"], copy["runs"] / "pretrain" / "tupe_r"
    # An earlier workspace's report recorded tupe_r unfinished at step 4 (its last
    # evaluation); that run's directory and backup are gone here.
    assert main(["report", "--config", config]) == 0
    record_path = copy["results"] / "pretrain_config.json"
    record = json.loads(record_path.read_text())
    record["runs"]["tupe_r"]["status"] = "unfinished (step 4)"
    record_path.write_text(json.dumps(record))
    shutil.rmtree(run)
    assert main(["pretrain", "--config", config, "--variants", "tupe_r", "--until-step", "3",
                 "--verbose", "0"]) == 2
    assert re.search(r"until_step must be a positive multiple of eval_every \(2\) and at most "
                     r"steps \(4\)\. Received: 3", capsys.readouterr().err)
    assert main(["pretrain", "--config", config, "--variants", "tupe_r", "--until-step", "2",
                 "--verbose", "0"]) == 0
    # Stopped after step 2: the 50% checkpoint is there, the run is not finished.
    assert (run / "checkpoints" / "step_0000002.keras").exists()
    # Its backup is kept: the next call resumes after step 2 instead of starting over.
    assert json.loads((run / "backup" / "training_metadata.json").read_text())["step"] == 2
    # Removed, the initialization is not saved again by the resumed run: its model is
    # at step 2 then, not the initialization.
    (run / "checkpoints" / "step_0000000.keras").unlink()
    assert not (run / "mlm.keras").exists() and not (run / "backbone.keras").exists()
    assert list(read_val_loss(run)) == [2]
    log = records.read_jsonl(str(copy["runs"] / "pretrain" / "commands.jsonl"))
    assert log[-1]["status"] == {"tupe_r": "trained to step 2"}
    assert "tupe_r: unfinished in an earlier workspace (step 4" in capsys.readouterr().out
    # Until the new run passes the recorded steps, the report keeps the recorded ones.
    assert main(["report", "--config", config]) == 0
    row = _table_row((copy["results"] / "pretrain_table.md").read_text(), "tupe_r")
    assert row[-1] == "unfinished (recorded, step 4; started anew here, at step 2)"
    assert row[4] == f"{read_val_loss(study['runs'] / 'pretrain' / 'tupe_r')[4]:.3f}"
    # Run to the end: the same losses and weights as the run that never stopped.
    assert main(["pretrain", "--config", config, "--variants", "tupe_r", "--verbose", "0"]) == 0
    original = study["runs"] / "pretrain" / "tupe_r"
    assert read_val_loss(run) == read_val_loss(original)
    resumed = keras.saving.load_model(run / "mlm.keras", compile=False)
    uninterrupted = keras.saving.load_model(original / "mlm.keras", compile=False)
    for a, b in zip(resumed.weights, uninterrupted.weights, strict=True):
        np.testing.assert_array_equal(keras.ops.convert_to_numpy(a),
                                      keras.ops.convert_to_numpy(b), err_msg=a.path)
    assert not (run / "checkpoints" / "step_0000000.keras").exists()
    assert main(["report", "--config", config]) == 0
    row = _table_row((copy["results"] / "pretrain_table.md").read_text(), "tupe_r")
    assert row[-1] == "finished" and row[4] == f"{read_val_loss(run)[4]:.3f}"


def test_run_all_all_runs_every_committed_study_in_dependency_order(tmp_path):
    """`run_all.sh --all` with a stand-in for Python that only records its arguments: the
    estimate first, then every study whose report is committed, each pre-training study
    followed by its report, and nothing read before it is made."""
    import subprocess

    log = tmp_path / "calls.txt"
    fake = tmp_path / "python"
    fake.write_text(f"#!/usr/bin/env bash\necho \"$*\" >> {log}\n")
    fake.chmod(0o755)
    result = subprocess.run(["bash", str(REPO / "experiments" / "run_all.sh"), "--all"],
                            env={**os.environ, "PY": str(fake)}, capture_output=True, text=True,
                            timeout=60)
    assert result.returncode == 0, result.stderr
    calls = [line.split()[2:] for line in log.read_text().splitlines()]  # after -m experiments.run
    assert calls[0][0] == "estimate"
    estimated = set(calls[0][1:])
    made = []  # studies in the order they are made
    for call in calls[1:]:
        command, study = call[0], call[call.index("--study") + 1] if "--study" in call else None
        if command in ("pretrain", "finetune", "length"):
            assert "--fresh" in call, call
            made.append(study)
        if command == "report":
            assert made[-1] == study, call  # right after its own run
    committed = {path.name[:-len("_config.json")]
                 for path in (REPO / "docs" / "results").glob("*_config.json")}
    if (REPO / "docs" / "results" / "speed_compare.csv").exists():  # reported by compare
        committed |= {path.stem for path in (REPO / "experiments" / "configs").glob("speed_*")}
    estimated = {spec.split(":")[0].split("@")[0] for spec in estimated}
    for study in made:
        assert study in committed, study  # only studies with a committed report
        assert study in estimated, study  # and the expected time counted it
    for name in committed & {"long", "long_seed1", "relative_v2", "relative_v2_seed1",
                             "glue_full", "glue_relative", "squad_relative", "pretrain",
                             "relative", "clip_sweep", "finetune", "length"}:
        assert name in made, name
    # A study is made after every pre-training study it reads.
    for study in made:
        config = study_config.load_config(str(REPO / "experiments" / "configs" / f"{study}.json"))
        if config["kind"] != "pretrain":
            for pretrain in study_config.related_configs(config, "pretrain_configs"):
                assert made.index(pretrain["study"]) < made.index(study), (study, pretrain)


def test_format_seconds_rounds_to_whole_minutes_before_splitting_hours():
    assert records.format_seconds(None) == "–"
    assert records.format_seconds(42.4) == "42 s"
    assert records.format_seconds(125) == "2.1 min"
    assert records.format_seconds(2 * 3600 + 5 * 60 + 20) == "2 h 05 min"
    # 82 h 59.98 min printed "82 h 60 min" before.
    assert records.format_seconds(82 * 3600 + 59.98 * 60) == "83 h 00 min"
