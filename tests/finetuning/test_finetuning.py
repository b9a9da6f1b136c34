"""GLUE fine-tuning: clear errors before any work, and an end-to-end run on real SST-2."""

import csv
import os
from pathlib import Path

import numpy as np
import pytest

from keras_tupe import data
from keras_tupe.data import glue
from keras_tupe.finetuning import finetune_glue
from keras_tupe.finetuning.glue import longest_packed_length, packed_lengths
from keras_tupe.models import TupeBackbone, TupeTokenizer
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig
from keras_tupe_cli import finetune_glue as cli
from tests.packing_oracle import pack_texts, packed_batches

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")


@pytest.fixture(scope="module")
def encoder_dir(tmp_path_factory):
    """Freshly initialized tiny encoders (`preset`: TUPE-R with the tokenizer, `m4`: Huang's
    method 4, `one_layer`: TUPE-R of one layer) and a vocabulary trained on SST-2 sentences."""
    directory = tmp_path_factory.mktemp("encoder")
    # A small vocabulary (979 pieces from 2,000 SST-2 sentences): the longest STS-B and CoLA
    # dev examples still pack well under 128 tokens.
    sentences = glue.load_glue("sst2", "train", DATA_DIR).sentence1[:2000]
    corpus = directory / "sst2.txt"
    corpus.write_text("\n".join(sentences) + "\n")
    vocab = data.train_vocabulary(str(corpus), 1000, str(directory / "vocab.txt"))
    size = data.load_tokenizer(vocab).vocabulary_size()
    # `directory` is a run folder: its preset/ holds the encoder and the tokenizer.
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size).save_to_preset(
        str(directory / "preset"))
    TupeTokenizer(vocabulary=vocab).save_to_preset(str(directory / "preset"))
    TupeBackbone.from_preset("huang_m4_tiny", vocabulary_size=size).save_to_preset(
        str(directory / "m4"))
    # One layer, for runs that test lengths, shapes and seeds, not depth: a smaller graph to
    # trace and compile.
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=size, num_layers=1).save_to_preset(
        str(directory / "one_layer"))
    return directory


def run(argv, capsys):
    code = cli.main(argv)
    return code, capsys.readouterr().err


def test_unknown_task_lists_the_valid_ones(encoder_dir, tmp_path, capsys):
    code, err = run(["--init", str(encoder_dir), "--tasks", "sst5", "--out", str(tmp_path / "o")],
                    capsys)
    assert code == 2 and "sst5" in err and "cola" in err and "wnli" in err
    assert not (tmp_path / "o").exists()


def test_missing_split_is_refused_before_anything_is_written(encoder_dir, tmp_path, capsys):
    # The shared GLUE folder has QNLI dev but no QNLI train.
    code, err = run(["--init", str(encoder_dir), "--tasks", "qnli", "--data-dir", str(DATA_DIR),
                     "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "train.tsv" in err
    assert not (tmp_path / "o").exists()


def test_absolute_encoder_refuses_longer_sequences(encoder_dir, tmp_path, capsys):
    code, err = run(["--init", str(encoder_dir), "--tasks", "rte", "--data-dir", str(DATA_DIR),
                     "--seq-len", "256", "--out", str(tmp_path / "o")], capsys)
    assert code == 2 and "max_sequence_length=128" in err
    assert not (tmp_path / "o").exists()


@pytest.mark.slow  # a fine-tuning run at length 192
def test_relative_encoder_fine_tunes_beyond_its_pretraining_length(encoder_dir):
    # Without XLA: the length is what is tested, and TensorFlow's own kernels refuse an
    # index out of range that XLA's gather would clamp. 32 dev pairs: the length, not the
    # score, is what is evaluated.
    dev = glue.load_glue("rte", "validation", DATA_DIR)
    splits = {"train": glue.load_glue("rte", "train", DATA_DIR),
              "validation": glue.GlueExamples(dev.sentence1[:32], dev.sentence2[:32],
                                              dev.labels[:32], "rte", "validation")}
    result = finetune_glue(FinetuneConfig(
        task="rte", init=str(encoder_dir / "m4"), vocab=str(encoder_dir / "vocab.txt"),
        data_dir=str(DATA_DIR), seq_len=192, epochs=1, max_train_examples=64, batch_size=16,
        learning_rate=1e-3, xla=False), splits)
    assert result["sequence_lengths"] == {"train": 192, "validation": 192}
    assert 0.0 <= result["dev"]["validation"]["accuracy"] <= 1.0


def test_pad_to_longest_pads_each_split_to_its_longest_example(encoder_dir):
    tokenizer = data.load_tokenizer(str(encoder_dir / "vocab.txt"))
    train = glue.load_glue("cola", "train", DATA_DIR)
    dev = glue.load_glue("cola", "validation", DATA_DIR)
    splits = {"train": train, "validation": dev}

    def padded(sentences):  # independent of the code under test: the packer's own mask
        real = pack_texts(tokenizer, 512, sentences)["padding_mask"].numpy().sum(axis=1)
        return 8 * -(-int(real.max()) // 8)

    common = dict(task="cola", init=str(encoder_dir / "one_layer"), epochs=1,
                  vocab=str(encoder_dir / "vocab.txt"), data_dir=str(DATA_DIR), batch_size=32,
                  max_train_examples=64, learning_rate=1e-3, xla=False)
    trimmed = finetune_glue(FinetuneConfig(pad_to_longest=True, **common), splits)
    expected = {"train": padded(train.sentence1[:64]), "validation": padded(dev.sentence1)}
    assert trimmed["sequence_lengths"] == expected and max(expected.values()) < 128
    # `packed_lengths` gives a run's lengths without training it (the same function of the
    # config and the splits): the other two settings are checked on it.
    assert packed_lengths(FinetuneConfig(pad_to_longest=True, **common), splits) == expected
    # Without pad_to_longest: seq_len (a run's: the pad-each-batch test below).
    assert packed_lengths(FinetuneConfig(**common), splits) == {"train": 128, "validation": 128}
    # Capped at seq_len: a shorter seq_len than the longest example is kept as is.
    capped = packed_lengths(FinetuneConfig(pad_to_longest=True, **common, seq_len=16), splits)
    assert capped == {"train": 16, "validation": 16}


@pytest.fixture(scope="module")
def stsb_dev(encoder_dir):
    """The tokenizer, 200 STS-B dev pairs of varied lengths, and their batches of 32 packed
    to 128 by the oracle (six of 32 and one of 8)."""
    tokenizer = data.load_tokenizer(str(encoder_dir / "vocab.txt"))
    full = glue.load_glue("stsb", "validation", DATA_DIR)
    dev = glue.GlueExamples(full.sentence1[:200], full.sentence2[:200], full.labels[:200],
                            "stsb", "validation")
    return tokenizer, dev, list(packed_batches(dev, tokenizer, 128, 32))


@pytest.fixture(scope="module")
def classifiers(encoder_dir, stsb_dev):
    """`{name: (classifier, its outputs on the batches padded to 128)}` for the absolute
    TUPE-R (`preset`) and the relative method 4 (`m4`) encoders of the module.

    Without XLA: what is compared is the model's arithmetic on padding, which XLA does not
    change (tests/models/test_backbone.py checks padding for every variant), and each batch width
    would be a compile of its own.
    """
    from keras_tupe.finetuning import load_backbone
    from keras_tupe.models import TupeTextClassifier

    found = {}
    for name in ("preset", "m4"):
        model = TupeTextClassifier(load_backbone(str(encoder_dir / name)), num_classes=1)
        model.compile(jit_compile=False)
        found[name] = model, predictions(model, stsb_dev[2])
    return found


def predictions(model, batches):
    return np.concatenate([model.predict_on_batch(x) for x, _ in batches])


def test_trimmed_padding_gives_the_classifier_the_same_outputs(stsb_dev, classifiers):
    tokenizer, dev, fixed = stsb_dev
    longest = longest_packed_length(tokenizer, (dev.sentence1, dev.sentence2))
    # The longest packed pair exactly, by the packer's own mask (the oracle's).
    assert longest == max(int(x["padding_mask"].numpy().sum(axis=1).max()) for x, _ in fixed)
    assert longest < 120
    trimmed = list(packed_batches(dev, tokenizer, longest, 32))
    for name, (model, outputs) in classifiers.items():  # absolute TUPE-R, relative method 4
        np.testing.assert_allclose(predictions(model, trimmed), outputs, rtol=1e-4, atol=1e-5,
                                   err_msg=name)


def test_pad_each_batch_trims_every_batch_to_its_longest_example(encoder_dir, stsb_dev,
                                                                 classifiers, monkeypatch):
    """The same examples in the same batches, each only as long as its longest example
    (rounded up to 16, at most the split's length), and the classifier's outputs equal
    those of the batches padded to 128; fine-tuning runs on the varying shapes (XLA)."""
    tokenizer, dev, fixed = stsb_dev
    trimmed = list(packed_batches(dev, tokenizer, 128, 32, pad_multiple=16))
    assert len(fixed) == len(trimmed) == 7
    widths = []
    for (x, y), (x_trim, y_trim) in zip(fixed, trimmed):
        real = int(x["padding_mask"].numpy().sum(axis=1).max())  # the packer's own mask
        width = min(128, 16 * -(-real // 16))
        widths.append(width)
        np.testing.assert_array_equal(y_trim, y)
        for name in ("token_ids", "padding_mask", "segment_ids"):
            assert x_trim[name].shape == (len(y), width)
            np.testing.assert_array_equal(x_trim[name], x[name][:, :width])
            assert not x[name].numpy()[:, width:].any()  # only padding was cut
    assert len(set(widths)) > 1 and max(widths) < 128  # the batches really differ
    capped = list(packed_batches(dev, tokenizer, 24, 32, pad_multiple=16))
    assert {x["token_ids"].shape[1] for x, _ in capped} == {24}
    for name, (model, outputs) in classifiers.items():  # absolute TUPE-R, relative method 4
        np.testing.assert_allclose(predictions(model, trimmed), outputs, rtol=1e-4, atol=1e-5,
                                   err_msg=name)
    # Fine-tuning packs the train split once (tests/finetuning/test_task_finetuning.py: the same
    # batches as packing each inside `fit`), not every batch of every epoch, and cuts
    # each batch; evaluation pads a split to one length.
    from keras_tupe.models import TupeTextClassifierPreprocessor

    # 64 train examples: two batches of 32, 48 and 64 tokens long with this vocabulary
    # (two shapes, two XLA compiles of the step), on the one-layer TUPE-R encoder (a second
    # block has the same shapes); evaluated on the 200 pairs above.
    splits = {"train": glue.load_glue("stsb", "train", DATA_DIR), "validation": dev}

    def run(epochs, xla):
        calls = []
        monkeypatch.setattr(TupeTextClassifierPreprocessor, "call",
                            lambda self, *args, **kwargs: (calls.append(self.sequence_length)
                                                           or original(self, *args, **kwargs)))
        result = finetune_glue(FinetuneConfig(
            task="stsb", init=str(encoder_dir / "one_layer"),
            vocab=str(encoder_dir / "vocab.txt"), data_dir=str(DATA_DIR), epochs=epochs,
            max_train_examples=64, batch_size=32, learning_rate=1e-3, pad_each_batch=True,
            xla=xla), splits)
        return calls, result

    original = TupeTextClassifierPreprocessor.call
    # The second run counts packing calls only, which XLA does not change: without its
    # compiles of each batch length.
    (once, result), (twice, _) = run(1, xla=True), run(2, xla=False)
    assert once == twice  # the same packing calls for two epochs as for one
    assert result["train_lengths_compiled_at_most"] == list(range(16, 129, 16))
    assert result["sequence_lengths"] == {"train": 128, "validation": 128}  # no pad_to_longest
    assert len(result["epoch_seconds"]) == 1
    assert -1.0 <= result["dev"]["validation"]["pearson"] <= 1.0


@pytest.mark.slow
def test_a_seed_repeats_its_run_and_another_seed_does_not(encoder_dir):
    """The study's seed spread is only meaningful if a seed's run is a fixed function of
    the seed: the same config twice gives the same dev score, another seed another one."""

    full = glue.load_glue("stsb", "validation", DATA_DIR)
    splits = {"train": glue.load_glue("stsb", "train", DATA_DIR),  # 64 examples: 4 steps
              "validation": glue.GlueExamples(full.sentence1[:200], full.sentence2[:200],
                                              full.labels[:200], "stsb", "validation")}

    def pearson(seed):  # on the one-layer encoder: dropout, head and order all seeded
        result = finetune_glue(FinetuneConfig(
            task="stsb", init=str(encoder_dir / "one_layer"), seed=seed, epochs=1,
            vocab=str(encoder_dir / "vocab.txt"), data_dir=str(DATA_DIR), batch_size=16,
            max_train_examples=64, learning_rate=1e-3, pad_to_longest=True, xla=False), splits)
        return result["dev"]["validation"]["pearson"]

    first = pearson(0)
    assert pearson(0) == first
    assert pearson(1) != first


@pytest.mark.slow
def test_sst2_end_to_end_beats_chance_and_writes_the_table(encoder_dir, tmp_path, capsys):
    out = tmp_path / "glue"
    # The studies' padding (each split to its longest example, each batch to its own),
    # without XLA: its compile of each seed's step took longer than the steps it saves
    # (the pad-each-batch test above fine-tunes under XLA).
    argv = ["--init", str(encoder_dir), "--tasks", "sst2", "--data-dir", str(DATA_DIR),
            "--learning-rates", "3e-3", "--seeds", "0", "1", "2", "--epochs", "1",
            "--max-train-examples", "4000", "--seq-len", "64", "--pad-to-longest",
            "--pad-each-batch", "--no-xla", "--out", str(out)]
    code, err = run(argv, capsys)
    assert code == 0, err
    with open(out / "summary.csv") as f:
        rows = {row["task"]: row for row in csv.DictReader(f)}
    # SST-2 dev: 444 positive of 872 (majority 50.9%). From a random encoder, one epoch of
    # 4,000 examples at 3e-3 scored 69.04, 67.43, 65.83 and, from another initialization,
    # 68.12, 68.23, 65.37 here (medians 67.43 and 68.12; two epochs at 1e-3, twice the
    # time: 68.35). Fewer examples leave too little margin: two epochs of 2,000 scored
    # 64.22, 67.09, 67.78 at 3e-3 and stayed at the majority class (50.92) at 1e-3.
    assert float(rows["sst2"]["score"]) > 62.0, rows
    assert rows["sst2"]["seeds"] == "3" and "average" in rows
    assert "| sst2 |" in (out / "summary.md").read_text()
    lines = (out / "results.jsonl").read_text().splitlines()
    assert len(lines) == 3
    # Resuming the protocol runs nothing again.
    code, _ = run(argv, capsys)
    assert code == 0 and len((out / "results.jsonl").read_text().splitlines()) == 3


def protocol_of(out, **grid):
    """`run_protocol`'s settings for RTE on `out` with the protocol's `grid` (its rates,
    seeds, choice): a `ProtocolConfig` and a `FinetuneConfig`."""
    return ProtocolConfig(tasks=["rte"], out=str(out), **grid), FinetuneConfig(task="rte",
                                                                             init="unused")


def _fake_runs(monkeypatch, scores):
    """`run_protocol` with each run (`train_glue`, one member) replaced by a score of
    (rate, seed) from `scores`: returns the list of runs it was asked for, in order."""
    from keras_tupe.finetuning import glue as protocol

    calls = []

    def finetune(config, members, engine, data):
        [(seed, rate)] = members
        assert (config.learning_rate, config.seed) == (rate, seed) and engine is protocol.FIT
        calls.append((rate, seed))
        score = scores(rate, seed)
        return [{"task": config.task, "learning_rate": rate, "seed": seed,
                 "dev": {"validation": {"accuracy": score, "score": score}}}]

    monkeypatch.setattr(protocol, "train_glue", finetune)
    monkeypatch.setattr(protocol, "glue_data", lambda config, splits: None)
    monkeypatch.setattr(protocol, "_preflight", lambda tasks, *args: {t: {} for t in tasks})
    return calls


def test_the_selection_protocol_chooses_with_one_seed_and_widens_at_the_edge(tmp_path,
                                                                           monkeypatch):
    from keras_tupe.finetuning import run_protocol

    # Seed 0 is best at the grid's top, then one rate further up, then worse again.
    by_rate = {3e-5: 0.55, 1e-4: 0.60, 3e-4: 0.70, 1e-3: 0.80, 3e-3: 0.85, 1e-2: 0.50}
    calls = _fake_runs(monkeypatch, lambda rate, seed: by_rate[rate] - 0.02 * seed)
    grid = {"learning_rates": [1e-4, 3e-4, 1e-3], "seeds": [0, 1, 2], "selection_seed": 0,
            "edge_learning_rates": [3e-5, 3e-3, 1e-2]}
    [row] = run_protocol(*protocol_of(tmp_path / "up", **grid))
    assert calls == [(1e-4, 0), (3e-4, 0), (1e-3, 0), (3e-3, 0), (1e-2, 0), (3e-3, 1), (3e-3, 2)]
    from keras_tupe.finetuning import Protocol
    from keras_tupe.finetuning.summary import read_results

    rows, protocol = read_results(str(tmp_path / "up"))[1], Protocol(**grid)
    assert protocol.run_number(rows[:3], ["rte"]) == "run 4 of at least 5"  # 3 rates + 2 seeds
    assert protocol.run_number(rows[:5], ["rte"]) == "run 6 of at least 7"  # widened twice
    assert row["best_learning_rate"] == 3e-3 and row["seeds"] == 3
    assert row["score"] == pytest.approx(100 * np.median([0.85, 0.83, 0.81]))
    calls.clear()  # resumed: nothing runs again
    run_protocol(*protocol_of(tmp_path / "up", **grid))
    assert calls == []
    # Best at the lowest rate: the nearest lower edge rate next; it loses, so 1e-4 stays.
    by_rate.update({1e-4: 0.9, 3e-5: 0.6})
    run_protocol(*protocol_of(tmp_path / "down", **grid))
    assert calls == [(1e-4, 0), (3e-4, 0), (1e-3, 0), (3e-5, 0), (1e-4, 1), (1e-4, 2)]
    # Without a selection seed: the papers' full grid, rate by rate.
    calls.clear()
    run_protocol(*protocol_of(tmp_path / "grid", learning_rates=[1e-4, 3e-4], seeds=[0, 1]))
    assert calls == [(1e-4, 0), (1e-4, 1), (3e-4, 0), (3e-4, 1)]


def test_a_results_line_cut_by_a_full_disk_is_named_and_its_run_done_again(tmp_path,
                                                                          monkeypatch):
    """`results.jsonl` whose last line a full disk cut: the resumed protocol warns once,
    naming the file and the line, and runs that (rate, seed) again instead of refusing."""
    from keras_tupe.finetuning import run_protocol

    calls = _fake_runs(monkeypatch, lambda rate, seed: 0.5 + seed / 10)
    out, grid = tmp_path / "out", {"learning_rates": [1e-4], "seeds": [0, 1, 2]}
    run_protocol(*protocol_of(out, **grid))
    results = out / "results.jsonl"
    first, second, third = results.read_text().splitlines()
    results.write_text(f"{first}\n{second}\n{third[:40]}")  # seed 2's line, cut
    calls.clear()
    with pytest.warns(UserWarning) as caught:
        [row] = run_protocol(*protocol_of(out, **grid))
    assert calls == [(1e-4, 2)]
    assert len({str(w.message) for w in caught}) == 1
    assert str(caught[0].message).startswith(f"{results} line 3 is cut short or not JSON")
    assert row["seeds"] == 3 and row["score"] == pytest.approx(60.0)
    assert results.read_text().splitlines()[2] == third[:40]  # kept, and skipped when read


def test_the_chosen_rate_is_the_selection_seeds_not_the_best_median():
    from keras_tupe.finetuning import Protocol, summarize

    def row(rate, seed, score):
        return {"task": "rte", "learning_rate": rate, "seed": seed,
                "dev": {"validation": {"score": score}}}

    # Seed 0 chose 1e-4 (0.9 against 0.8); its other seeds then scored 0.5. The single
    # seed-0 run at 3e-4 has the higher median, but it is not the rate the protocol chose.
    rows = [row(1e-4, 0, 0.9), row(3e-4, 0, 0.8), row(1e-4, 1, 0.5), row(1e-4, 2, 0.55)]
    [chosen] = Protocol((1e-4, 3e-4), (0, 1, 2), selection_seed=0).summarize(rows, ["rte"])
    assert (chosen["best_learning_rate"], chosen["seeds"]) == (1e-4, 3)
    assert chosen["score"] == pytest.approx(55.0)
    [best_median] = summarize(rows, ["rte"])
    assert best_median["best_learning_rate"] == 3e-4
    assert best_median["score"] == pytest.approx(80.0)


@pytest.mark.parametrize("grid,message", [
    ({"seeds": [0, 1], "selection_seed": 2}, r"`selection_seed` 2 is not one of `seeds` 0 1"),
    ({"selection_seed": 0, "edge_learning_rates": [1e-4]},
     r"`edge_learning_rates` 0.0001: each must be a positive rate that is not already"),
    ({"selection_seed": 0, "edge_learning_rates": [-1e-3]}, r"`edge_learning_rates` -0.001: "),
    ({"edge_learning_rates": [1e-3]}, "widen the grid of a `selection_seed`"),
])
def test_a_bad_selection_is_refused_before_any_run(tmp_path, monkeypatch, grid, message):
    from keras_tupe.finetuning import run_protocol

    calls = _fake_runs(monkeypatch, lambda rate, seed: 0.5)
    with pytest.raises(ValueError, match=message):
        run_protocol(*protocol_of(tmp_path / "out", **{"learning_rates": [1e-4, 3e-4],
                                                       "seeds": [0, 1], **grid}))
    assert calls == [] and not (tmp_path / "out").exists()


def test_cli_pad_to_longest_flag():
    base = ["--init", "run", "--tasks", "cola", "--out", "o"]

    def run_settings(argv):
        return cli.parse_configs(argv)[1]

    assert run_settings(base + ["--pad-to-longest"]).pad_to_longest is True
    assert run_settings(base).pad_to_longest is False
    assert run_settings(base + ["--pad-each-batch"]).pad_each_batch is True
    assert run_settings(base).pad_each_batch is False
    protocol, _ = cli.parse_configs(base + ["--selection-seed", "0", "--edge-learning-rates",
                                            "3e-3"])
    assert (protocol.selection_seed, protocol.edge_learning_rates) == (0, [3e-3])
    protocol, _ = cli.parse_configs(base)
    assert (protocol.selection_seed, protocol.edge_learning_rates) == (None, [])


@pytest.mark.parametrize("flags,message", [
    (["--seeds", "0", "1", "--selection-seed", "2"],
     "--selection-seed 2 is not one of --seeds 0 1"),
    (["--seeds", "0", "--edge-learning-rates", "1e-3"], "widen the grid of a --selection-seed"),
    (["--seeds", "0", "--learning-rates", "1e-4", "--selection-seed", "0",
      "--edge-learning-rates", "1e-4", "-1"], "--edge-learning-rates 0.0001 -1: each must be"),
])
def test_cli_refuses_a_bad_selection_in_one_line(flags, message, capsys, tmp_path):
    out = tmp_path / "o"
    code = cli.main(["--init", "run", "--tasks", "rte", "--out", str(out)] + flags)
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.strip().splitlines()) == 1
    assert err.startswith("error: ") and not out.exists()
