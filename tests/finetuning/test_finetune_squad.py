"""SQuAD fine-tuning end to end on the offline article split of the real dev file."""

import dataclasses
import json
import os
from pathlib import Path

import pytest

from keras_tupe import data
from keras_tupe.data import squad
from keras_tupe.models import TupeBackbone
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig, SquadConfig
from keras_tupe_cli import finetune_squad as cli

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
DEV = DATA_DIR / "squad" / "dev-v1.1.json"


# Held out: 2 of the dev file's 48 articles (220 questions, 687 windows), enough to answer
# every question of a real split; 100 training questions (185 windows) for the wiring.
EVAL_FRACTION = 0.05


@pytest.mark.slow
def test_offline_split_fine_tune_reports_labelled_official_metrics(tmp_path, capsys):
    articles = squad.load_squad(str(DEV))
    corpus = tmp_path / "contexts.txt"
    corpus.write_text("\n".join(p["context"] for a in articles for p in a["paragraphs"]) + "\n")
    vocab = data.train_vocabulary(str(corpus), 2000, str(tmp_path / "vocab.txt"))
    size = data.load_tokenizer(vocab).vocabulary_size()
    TupeBackbone.from_preset("huang_m4_tiny", vocabulary_size=size).save_to_preset(
        str(tmp_path / "m4"))
    out = tmp_path / "squad"
    code = cli.main(["--init", str(tmp_path / "m4"), "--vocab", vocab,
                     "--offline-split", str(DEV), "--seq-len", "192", "--doc-stride", "64",
                     "--eval-fraction", str(EVAL_FRACTION),
                     "--max-train-examples", "100", "--epochs", "1", "--batch-size", "16",
                     "--learning-rate", "1e-3", "--out", str(out),
                     "--save-dir", str(tmp_path / "qa_preset")])
    assert code == 0, capsys.readouterr().err
    saved = json.loads((out / "squad_results.json").read_text())["result"]
    assert "NOT the official" in saved["data"] and "(95%/5%, seed 0)" in saved["data"]
    assert 0.0 <= saved["exact_match"] <= saved["f1"] <= 100.0
    # Every evaluation question of the split got an answer string.
    _, eval_articles = squad.split_articles(articles, eval_fraction=EVAL_FRACTION, seed=0)
    questions = sum(len(p["qas"]) for a in eval_articles for p in a["paragraphs"])
    assert saved["eval_questions"] == questions
    predictions = json.loads((out / "squad_predictions.json").read_text())
    assert len(predictions) == questions and all(isinstance(v, str) for v in predictions.values())
    # The fine-tuned span-QA model is a preset folder: the task with its preprocessor, its
    # record in metadata.json, and usable as --init.
    preset = tmp_path / "qa_preset"
    metadata = json.loads((preset / "metadata.json").read_text())["keras_tupe_finetuning"]
    assert metadata["task"] == "squad" and metadata["result"]["f1"] == saved["f1"]
    from keras_tupe.finetuning import load_backbone
    from keras_tupe.models import TupeSpanQA

    restored = TupeSpanQA.from_preset(str(preset))
    assert restored.preprocessor.sequence_length == 192
    assert load_backbone(str(preset)).relative_position == "method4"


def test_squad_protocol_appends_glue_form_rows_and_resumes(tmp_path, monkeypatch, capsys):
    from keras_tupe.finetuning import run_squad_protocol
    from keras_tupe.finetuning import squad as finetuning_squad

    calls = []

    def fake_finetune(config, data):
        assert data == "windows"  # cut once, for every run
        calls.append((config.learning_rate, config.seed, config.epochs))
        if len(calls) == 3:
            raise KeyboardInterrupt  # interrupted during the third run
        f1 = 50.0 + 1e5 * config.learning_rate + config.seed
        return {"data": "d", "exact_match": f1 - 10, "f1": f1, "train_features": 7,
                "train_seconds": 1.0, "eval_questions": 3}

    monkeypatch.setattr(finetuning_squad, "finetune_squad", fake_finetune)
    monkeypatch.setattr(finetuning_squad, "encoder_and_windows", lambda config: (None, "windows"))
    out = tmp_path / "squad"
    protocol = ProtocolConfig(tasks=["squad"], out=str(out), learning_rates=[1e-4, 2e-4],
                              seeds=[0, 1])
    with pytest.raises(KeyboardInterrupt):
        run_squad_protocol(protocol, SquadConfig(init="unused", epochs=3))
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 2  # the two finished runs stay, to resume from
    rows = run_squad_protocol(protocol, SquadConfig(init="unused", epochs=3))
    assert calls[3:] == [(2e-4, 0, 3), (2e-4, 1, 3)]  # only the runs not done
    assert [(r["learning_rate"], r["seed"]) for r in rows] == [
        (1e-4, 0), (1e-4, 1), (2e-4, 0), (2e-4, 1)]
    row = json.loads((out / "results.jsonl").read_text().splitlines()[-1])
    assert row["task"] == "squad" and row["epochs"] == 3 and row["wall_seconds"] >= 0
    assert row["dev"] == {"eval": {"exact_match": 61.0, "f1": 71.0, "score": 0.71}}
    assert "squad lr=0.0002 seed=1: fine-tuning (run 4 of 4) ..." in capsys.readouterr().out
    with pytest.raises(ValueError, match=r"runs tasks=\['squad'\]; received \['rte'\]"):
        run_squad_protocol(dataclasses.replace(protocol, tasks=["rte"]), SquadConfig(init="u"))
    with pytest.raises(TypeError, match="takes a ProtocolConfig and a SquadConfig; received "
                                        "ProtocolConfig and FinetuneConfig"):
        run_squad_protocol(protocol, FinetuneConfig(task="rte", init="u"))
    with pytest.raises(ValueError, match=r"`warmup_ratio` must be a number in \[0, 1\]"):
        run_squad_protocol(protocol, SquadConfig(init="u", warmup_ratio=2.0))
