"""The grid trainer (`keras_tupe.grid`): K members in one program equal K `fit` runs.

Each member of a grid is held to the run Keras's own `fit` makes from the same start
(`keras.utils.set_random_seed(seed)` then the same build) on the same batches, dropout
on: per-step losses and final weights, for a classifier (K = 4, two encoders), a regressor
(STS-B's head; K = 2 and K = 1) and the masked LM (K = 2); the comparison is shown to fail
when a member's rate, seed or encoder is swapped. The GLUE protocol through the grid gives
today's `run_protocol` table. Under JAX (marked `jax`: `make test-jax`); the refusal on
other backends, in `make test`.
"""

import dataclasses
import os
from pathlib import Path

import keras
import numpy as np
import pytest

from keras_tupe.data.masking import mask_batch
from keras_tupe.data.order import epoch_rows
from keras_tupe.grid import GridTrainer, Schedule, check_members
from keras_tupe.models import TupeBackbone, TupeMaskedLM, TupeTextClassifier
from keras_tupe.optimization import create_optimizer
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig, SquadConfig

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
VOCABULARY, LENGTH, EXAMPLES, BATCH, EPOCHS, WARMUP = 60, 12, 20, 4, 2, 2
SEEDS, RATES = (0, 1, 2, 3), (1e-3, 3e-4, 2e-3, 5e-4)
# float32, one compiled program against another: measured differences are <= 5e-7 (losses)
# and <= 1e-7 (weights); a swapped rate or seed moves them by > 1e-3.
LOSS_TOLERANCE, WEIGHT_TOLERANCE = 1e-5, 1e-5


def backbone():
    return TupeBackbone.from_preset("tupe_a_tiny", vocabulary_size=VOCABULARY, num_layers=1)


def inputs(seed=0):
    rng = np.random.default_rng(seed)
    ids = rng.integers(5, VOCABULARY, (EXAMPLES, LENGTH)).astype(np.int32)
    ids[:, 0] = 1
    lengths = rng.integers(4, LENGTH + 1, EXAMPLES)
    padding = np.arange(LENGTH)[None, :] < lengths[:, None]
    ids[~padding] = 0
    return {"token_ids": ids, "padding_mask": padding,
            "segment_ids": np.zeros_like(ids)}


def classifier(num_classes):
    return lambda seed: TupeTextClassifier(backbone(), num_classes=num_classes)


def fit_run(build, seed, rate, x, y, sample_weight, steps):
    """The reference: `fit` on the member's batches in order; per-step losses (from the
    epoch's running means) and the trained model."""
    keras.utils.set_random_seed(seed)
    model = build(seed)
    model.compile(optimizer=create_optimizer(model, rate, total_steps=steps,
                                             warmup_steps=WARMUP), jit_compile=True)
    means = []
    model.fit(x, y, sample_weight=sample_weight, batch_size=BATCH, shuffle=False, verbose=0,
              callbacks=[keras.callbacks.LambdaCallback(
                  on_train_batch_end=lambda batch, logs: means.append(logs["loss"]))])
    means = np.asarray(means, np.float64) * np.arange(1, steps + 1)
    return np.diff(means, prepend=0.0), model


def differences(trainer, losses, references, members):
    """Per member `k` of the grid, against the reference run `members[k]`: the largest loss
    and weight differences."""
    found = []
    for k, index in enumerate(members):
        reference_losses, reference = references[index]
        model = trainer.member_model(k)
        weights = max(float(np.max(np.abs(np.asarray(a.value) - np.asarray(b.value))))
                      for a, b in zip(reference.trainable_variables, model.trainable_variables))
        found.append((float(np.max(np.abs(losses[:, k] - reference_losses))), weights))
    return found


def check_equal(found):
    for loss, weights in found:
        assert loss <= LOSS_TOLERANCE and weights <= WEIGHT_TOLERANCE, found


def classification_data(num_classes):
    """`(source, rows, weights, fit_batches)`: every member's batches of the same examples
    in its own order, and the same batches laid out for `fit`."""
    x = inputs()
    rng = np.random.default_rng(1)
    y = (rng.normal(size=EXAMPLES).astype(np.float32) if num_classes == 1
         else rng.integers(0, num_classes, EXAMPLES).astype(np.int32))
    count = EXAMPLES - 3  # a last batch of 1: filled, weighted
    orders = [epoch_rows(count, BATCH, seed, EPOCHS) for seed in SEEDS]
    rows, weights = (np.stack(parts, axis=1) for parts in zip(*orders))
    fit_batches = [({name: value[r.reshape(-1)] for name, value in x.items()},
                    y[r.reshape(-1)], w.reshape(-1)) for r, w in orders]
    return (x, y), rows, weights, fit_batches


def masked_lm_data():
    """Each member's masked batches (its own masks, from its seed), as one source."""
    steps = 5
    x, y, w = {}, [], []
    for seed in SEEDS:
        rng = np.random.default_rng([seed, 7])
        for _ in range(steps):
            ids = inputs(int(rng.integers(1 << 30)))["token_ids"][:BATCH]
            batch_x, batch_y, batch_w = mask_batch(ids, rng, VOCABULARY, num_slots=3)
            for name, value in batch_x.items():
                x.setdefault(name, []).append(value)
            y.append(batch_y)
            w.append(batch_w)
    x = {name: np.concatenate(parts) for name, parts in x.items()}
    y, w = np.concatenate(y), np.concatenate(w)
    # Member k's step s is the source's batch k * steps + s.
    rows = np.arange(len(SEEDS) * steps * BATCH).reshape(len(SEEDS), steps, BATCH)
    rows = rows.transpose(1, 0, 2)
    fit_batches = [({name: value[r.reshape(-1)] for name, value in x.items()},
                    y[r.reshape(-1)], w[r.reshape(-1)]) for r in rows.transpose(1, 0, 2)]
    return (x, y, w), rows, None, fit_batches


def masked_lm(seed):
    return TupeMaskedLM(backbone())


CASES = {
    "regressor": (classifier(1), lambda: classification_data(1)),
    "masked_lm": (masked_lm, masked_lm_data),
}


@pytest.mark.jax
@pytest.mark.parametrize("case", sorted(CASES))
def test_each_member_is_the_fit_run_of_its_seed_and_rate(case):
    """K = 2 members at two rates (then, for the regressor, K = 1): each equals `fit` from
    the same seed on the same batches. (The classifier, K = 4, below: with the comparison
    shown to fail once rates, seeds or encoders are swapped.)"""
    build, make_data = CASES[case]
    source, rows, weights, fit_batches = make_data()
    steps = len(rows)
    schedule = Schedule(total_steps=steps, warmup_steps=WARMUP)
    references = [fit_run(build, seed, rate, *batch, steps)
                  for seed, rate, batch in zip(SEEDS[:2], RATES[:2], fit_batches)]

    trainer = GridTrainer(build, SEEDS[:2], RATES[:2], schedule, steps_per_dispatch=steps)
    check_equal(differences(trainer, trainer.fit(source, rows[:, :2],
                                                 None if weights is None else weights[:, :2]),
                            references, range(2)))
    assert trainer.compiles == 1  # every step of every member: one program
    if case != "regressor":
        return
    # Dispatches of at most 4 steps: 10 steps are 3 of 4, one program; the 2 steps past
    # the end are computed and discarded (were they kept, the member would not be `fit`'s).
    single = GridTrainer(build, SEEDS[:1], RATES[:1], schedule, steps_per_dispatch=4)
    check_equal(differences(single, single.fit(source, rows[:, :1], weights[:, :1]),
                            references, [0]))
    assert steps % 4 and single.compiles == 1


@pytest.mark.jax
def test_members_start_from_their_own_encoders_in_one_program():
    """A classifier grid of K = 4 over two encoders of one architecture (other weights),
    `inits` a member: each member equals `fit` from its own encoder at its seed and rate,
    in one program. The comparison fails for every member once two members swap rates and
    two swap seeds (the data order stays each position's), and once the inits are swapped
    (a member given the wrong encoder)."""
    encoders = {}
    for name, seed in (("a", 100), ("b", 101)):
        keras.utils.set_random_seed(seed)
        encoders[name] = backbone().get_weights()

    def build(seed, init):
        encoder = backbone()
        encoder.set_weights(encoders[init])
        return TupeTextClassifier(encoder, num_classes=3)
    source, rows, weights, fit_batches = classification_data(3)
    steps, inits = len(rows), ("a", "b", "b", "a")
    schedule = Schedule(total_steps=steps, warmup_steps=WARMUP)
    references = [fit_run(lambda seed, init=init: build(seed, init), seed, rate, *batch, steps)
                  for seed, rate, init, batch in zip(SEEDS, RATES, inits, fit_batches)]
    trainer = GridTrainer(build, SEEDS, RATES, schedule, steps_per_dispatch=steps,
                          inits=inits)
    check_equal(differences(trainer, trainer.fit(source, rows, weights), references,
                            range(4)))
    assert trainer.compiles == 1
    for seeds, rates, starts in (
            ((0, 1, 3, 2), (RATES[1], RATES[0], RATES[2], RATES[3]), inits),
            (SEEDS, RATES, ("b", "a", "a", "b"))):
        swapped = GridTrainer(build, seeds, rates, schedule, steps_per_dispatch=steps,
                              inits=starts)
        found = differences(swapped, swapped.fit(source, rows, weights), references, range(4))
        assert all(loss > 100 * LOSS_TOLERANCE or weight > 100 * WEIGHT_TOLERANCE
                   for loss, weight in found), found
    with pytest.raises(ValueError, match="one start per member: received 3 inits for 4"):
        GridTrainer(build, SEEDS, RATES, schedule, inits=inits[:3])


# Two grids of one shape and two schedules in a fresh process with JAX's persistent
# compilation cache: the entries each grid's training adds, and how far their losses differ.
SHARED_PROGRAM = """
import json, os, sys
import jax
for option, value in (("jax_compilation_cache_dir", sys.argv[1]),
                      ("jax_persistent_cache_min_compile_time_secs", 0),
                      ("jax_persistent_cache_min_entry_size_bytes", -1)):
    jax.config.update(option, value)
import numpy as np
from keras_tupe.grid import GridTrainer, Schedule
from tests.training.test_grid import WARMUP, classification_data, classifier
source, rows, weights, _ = classification_data(3)
entries = lambda: set(os.listdir(sys.argv[1]))
added, losses = [], []
for total in (len(rows), 10 * len(rows)):
    trainer = GridTrainer(classifier(3), (0, 1), (1e-3, 1e-3), Schedule(total, WARMUP),
                          steps_per_dispatch=len(rows))
    before = entries()
    if total == len(rows):  # compiled only, then run (as a window compiles ahead)
        trainer.compile_fit(source, rows[:, :2], weights[:, :2])
        trainer.compile_predict(source[0])
        added.append(len(entries() - before))
        before = entries()
    losses.append(trainer.fit(source, rows[:, :2], weights[:, :2]))
    trainer.predict(source[0])
    added.append(len(entries() - before))
# Built and compiled for the first schedule, given the second before its first step: the
# second; a schedule that changes the optimizer's settings, refused.
trainer = GridTrainer(classifier(3), (0, 1), (1e-3, 1e-3), Schedule(len(rows), WARMUP),
                      steps_per_dispatch=len(rows))
trainer.compile_fit(source, rows[:, :2], weights[:, :2])
trainer.schedule = Schedule(10 * len(rows), WARMUP, weight_decay=0.5)
try:
    trainer.fit(source, rows[:, :2], weights[:, :2])
    refused = None
except ValueError as error:
    refused = str(error)
trainer.schedule = Schedule(10 * len(rows), WARMUP)
rescheduled = trainer.fit(source, rows[:, :2], weights[:, :2])
# Once it trained, another schedule would bend its curve midway: refused.
trainer.schedule = Schedule(len(rows), WARMUP)
try:
    trainer.fit(source, rows[:, :2], weights[:, :2])
    late = None
except ValueError as error:
    late = str(error)
print(json.dumps({"added": added, "apart": float(np.max(np.abs(losses[0] - losses[1]))),
                  "rescheduled": float(np.max(np.abs(rescheduled - losses[1]))),
                  "refused": refused, "late": late}))
"""


@pytest.mark.jax
def test_grids_of_one_shape_share_one_program_whatever_their_schedules(tmp_path):
    """The schedule's steps are an input of the compiled program, not constants in it: a
    second grid of the same shape with a ten times longer schedule adds nothing to JAX's
    compilation cache (with the steps as constants it compiled anew: one entry), so a
    window's calibration compiles the program its run uses. It still trains on its own
    schedule: past the warm-up its losses are not the first grid's. `compile_fit` and
    `compile_predict` write the programs that the first grid's `fit` and `predict` then
    load (none added): a grid compiled ahead. A grid given another schedule (`schedule`)
    before its first step trains as one built on that schedule (a grid built and compiled
    before its length is chosen); one that would change the optimizer's settings is
    refused, naming them, and so is another schedule once the grid has trained."""
    import json
    import subprocess
    import sys

    result = subprocess.run(
        [sys.executable, "-c", SHARED_PROGRAM, str(tmp_path / "cache")], cwd=REPO,
        capture_output=True, text=True, timeout=900,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": os.pathsep.join(
            [str(REPO / "tests" / "no_tensorflow"), str(REPO)])})  # JAX alone, as on a GPU
    assert result.returncode == 0, result.stderr[-3000:]
    found = json.loads(result.stdout.splitlines()[-1])
    # (the first count holds small programs besides: the keys', the device puts')
    assert found["added"][0] >= 2 and found["added"][1:] == [0, 0], found
    assert found["apart"] > 1e-3 and found["rescheduled"] == 0, found
    assert "changes weight_decay" in found["refused"], found
    assert "its schedule changes only before its first step" in found["late"], found


@pytest.mark.jax
def test_a_grid_refuses_members_of_different_architectures():
    def build(seed):
        return TupeTextClassifier(backbone(), num_classes=2 + seed)

    with pytest.raises(ValueError, match="share one architecture"):
        GridTrainer(build, (0, 1), (1e-3, 1e-3), Schedule(10, 1))


@pytest.mark.jax
def test_a_grid_refuses_no_devices_and_a_member_it_does_not_hold():
    with pytest.raises(ValueError, match="^devices must name at least one device"):
        GridTrainer(classifier(2), (0, 1), (1e-3, 1e-3), Schedule(10, 1), devices=[])
    trainer = GridTrainer(classifier(2), (0, 1), (1e-3, 1e-3), Schedule(10, 1))
    for index in (-1, 2):
        with pytest.raises(IndexError, match=rf"^member {index} is not in this grid of 2 "):
            trainer.member_model(index)


@pytest.mark.jax
def test_a_grid_too_large_for_the_device_is_refused_with_the_largest_that_fits():
    trainer = GridTrainer(classifier(2), (0, 1, 2), (1e-3,) * 3, Schedule(10, 1))
    need = trainer.check_memory(BATCH, LENGTH, limit_bytes=2**40)
    with pytest.raises(ValueError, match=r"K=3 members needs .* Use at most K=1 members"):
        trainer.check_memory(BATCH, LENGTH, limit_bytes=int(need / 3 / 0.9) + 1)


def test_members_need_one_rate_a_seed():
    with pytest.raises(ValueError, match=r"one rate per seed .* 3 seeds .* 2 learning_rates"):
        check_members((0, 1, 2), (1e-3, 2e-3))
    with pytest.raises(ValueError, match="positive"):
        check_members((0,), (-1e-3,))
    assert check_members((0, 1), (1, 2e-3)) == [(0, 1.0), (1, 2e-3)]


def test_a_grid_on_another_backend_is_refused_in_one_line_naming_jax(monkeypatch, tmp_path):
    """The grid trainer, and pre-training's grid engine before it asks JAX for anything."""
    from keras_tupe.pretraining import Grid, pretrain
    from keras_tupe_base.settings import PretrainConfig

    monkeypatch.setattr(keras.backend, "backend", lambda: "tensorflow")
    refusal = "JAX backend; this process runs Keras on tensorflow. Set KERAS_BACKEND=jax"
    with pytest.raises(ValueError, match=refusal):
        GridTrainer(classifier(2), (0,), (1e-3,), Schedule(10, 1))
    config = PretrainConfig(preset="tupe_a_tiny", corpus=None, shards=str(tmp_path),
                            out=str(tmp_path / "runs"))
    with pytest.raises(ValueError, match=refusal):
        pretrain(config, members=[(0, 1e-3)], engine=Grid())
    assert not (tmp_path / "runs").exists()


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """A freshly initialized one-layer encoder with a vocabulary of SST-2 sentences."""
    from keras_tupe import data
    from keras_tupe.data import glue
    from keras_tupe.models import TupeTokenizer

    directory = tmp_path_factory.mktemp("encoder")
    corpus = directory / "sst2.txt"
    corpus.write_text("\n".join(glue.load_glue("sst2", "train", DATA_DIR).sentence1[:3000]))
    vocabulary = data.train_vocabulary(str(corpus), 400, str(directory / "vocab.txt"))
    size = data.load_tokenizer(vocabulary).vocabulary_size()
    TupeBackbone.from_preset("tupe_a_tiny", vocabulary_size=size, num_layers=1).save_to_preset(
        str(directory / "preset"))
    TupeTokenizer(vocabulary=vocabulary).save_to_preset(str(directory / "preset"))
    return directory


@pytest.mark.jax
def test_the_glue_protocol_through_grids_gives_run_protocols_table(encoder, tmp_path):
    """STS-B (a correlation: no floor that every run shares), two rates x two seeds with a
    selection seed: `run_protocol` run by run (on Grain, the batches a grid member gets)
    and in one grid choose the same rate, every run's dev score within 1e-4 of the other's."""
    from keras_tupe.finetuning import run_protocol
    from keras_tupe.finetuning.summary import read_results

    run = FinetuneConfig(task="stsb", init=str(encoder), epochs=1, batch_size=16, seq_len=32,
                         max_train_examples=40, data_dir=DATA_DIR / "glue")
    tables = {name: run_protocol(ProtocolConfig(
        tasks=["stsb"], out=str(tmp_path / name), learning_rates=[1e-3, 1e-4], seeds=[0, 1],
        selection_seed=0, grid=name == "grid"), dataclasses.replace(run, **extra))
              for name, extra in (("runs", {"data_loader": "grain"}), ("grid", {}))}
    rows = {name: {(r["learning_rate"], r["seed"]): r["dev"]["validation"]["score"]
                   for r in read_results(str(tmp_path / name))[1]} for name in tables}
    # Run by run: both rates on seed 0, then seed 1 at the chosen rate; the grid ran all four.
    assert len(rows["runs"]) == 3 and len(rows["grid"]) == 4
    # The grid's programs: one for training, one for predicting the dev split.
    assert {r["grid_compiles"] for r in read_results(str(tmp_path / "grid"))[1]} == {2}
    assert len(set(rows["runs"].values())) == 3  # three different runs, not one floor
    for run, score in rows["runs"].items():
        assert abs(rows["grid"][run] - score) <= 1e-4, (run, rows)
    [runs], [grid] = tables["runs"], tables["grid"]
    assert (runs["best_learning_rate"], runs["seeds"]) == (grid["best_learning_rate"], 2)
    for key in ("score", "seed_min", "seed_max"):
        assert abs(runs[key] - grid[key]) <= 1e-2, (runs, grid)  # percentage points


@pytest.fixture(scope="module")
def squad_file(tmp_path_factory):
    """Six articles of SQuAD dev, the first six questions of each one's first paragraph."""
    import json

    found = json.loads((DATA_DIR / "squad" / "dev-v1.1.json").read_text())
    found["data"] = [{**article, "paragraphs": [{**article["paragraphs"][0], "qas": article[
        "paragraphs"][0]["qas"][:6]}]} for article in found["data"][:6]]
    path = tmp_path_factory.mktemp("squad") / "squad.json"
    path.write_text(json.dumps(found))
    return path


@pytest.mark.jax
def test_a_squad_grid_member_is_the_run_of_its_seed_and_rate(encoder, squad_file, monkeypatch):
    """Two members of other rates and seeds on SQuAD windows: each one's start and end
    logits within 1e-4 of its run by `fit` at its rate and seed (on Grain: the
    batches a grid member gets) and its EM/F1 the same; one program for training, one for
    predicting. (`run_squad_protocol` with `grid` runs these grids in `Protocol.grid_rounds`,
    as GLUE's above: the next test.)"""
    from keras_tupe.finetuning import FIT, Grid, train_squad
    from keras_tupe.finetuning import squad as squad_runs

    seen = []  # each run's logits, in the order it is scored
    original = squad_runs.postprocess

    def postprocess(features, start, end, articles, **kwargs):
        seen.append(np.stack([np.asarray(start, np.float64), np.asarray(end, np.float64)]))
        return original(features, start, end, articles, **kwargs)

    monkeypatch.setattr(squad_runs, "postprocess", postprocess)
    config = SquadConfig(init=str(encoder), epochs=1, batch_size=8, seq_len=64, doc_stride=32,
                         max_query_length=16, offline_split=str(squad_file), eval_fraction=0.34,
                         split_seed=0, data_loader="grain")
    members = [(0, 1e-3), (1, 1e-4)]
    runs = train_squad(config, members, FIT)  # the one function, the engine an argument
    grid = train_squad(config, members, Grid())
    run_logits, grid_logits = seen[:2], seen[2:]
    assert len(grid_logits) == 2 and {found["grid_compiles"] for found in grid} == {2}
    for (seed, rate), run, found, expected, logits in zip(members, runs, grid, run_logits,
                                                          grid_logits):
        assert (found["seed"], found["learning_rate"]) == (seed, rate)
        np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0, err_msg=str(seed))
        assert (found["exact_match"], found["f1"], found["train_features"]) == (
            run["exact_match"], run["f1"], run["train_features"])
    # Two different runs: had the members' rates or seeds been swapped, the logits would
    # not have matched above.
    assert np.max(np.abs(run_logits[0] - run_logits[1])) > 1e-2


@pytest.mark.jax
def test_the_squad_protocol_through_a_grid_records_the_grids_runs(encoder, squad_file,
                                                                  tmp_path, monkeypatch):
    """`run_squad_protocol` with `grid`: its one round (1 rate x 2 seeds) is the grid
    `train_squad(..., Grid())` trains, a row a member in `results.jsonl` as returned; run
    again, it trains nothing and returns the same rows."""
    import json

    from keras_tupe.finetuning import Grid, run_squad_protocol, train_squad
    from keras_tupe.finetuning import squad as squad_runs

    config = SquadConfig(init=str(encoder), epochs=1, batch_size=8, seq_len=64, doc_stride=32,
                         max_query_length=16, offline_split=str(squad_file), eval_fraction=0.34,
                         split_seed=0, data_loader="grain")
    protocol = ProtocolConfig(tasks=["squad"], out=str(tmp_path / "out"), learning_rates=[1e-3],
                              seeds=[0, 1], grid=True)
    rows = run_squad_protocol(protocol, config)
    grid = train_squad(config, [(0, 1e-3), (1, 1e-3)], Grid())
    assert [(r["seed"], r["learning_rate"], r["grid_members"]) for r in rows] == [
        (0, 1e-3, 2), (1, 1e-3, 2)]
    for row, found in zip(rows, grid, strict=True):
        assert (row["dev"]["eval"]["exact_match"], row["dev"]["eval"]["f1"]) == (
            found["exact_match"], found["f1"])
    written = [json.loads(line) for line in
               (tmp_path / "out" / "results.jsonl").read_text().splitlines()]
    assert [(r["seed"], r["dev"]) for r in written] == [(r["seed"], r["dev"]) for r in rows]
    monkeypatch.setattr(squad_runs, "train_squad", None)  # a second grid would fail
    assert run_squad_protocol(protocol, config) == written


def test_a_squad_grid_on_an_offline_split_needs_its_split_seed(tmp_path):
    """Run by run each seed cuts its own offline split; a grid cuts one: refused without
    `split_seed`, before any folder, on any backend."""
    from keras_tupe.finetuning import run_squad_protocol

    with pytest.raises(ValueError, match="split_seed"):
        run_squad_protocol(ProtocolConfig(tasks=["squad"], out=str(tmp_path / "out"),
                                          learning_rates=[1e-3], seeds=[0, 1], grid=True),
                           SquadConfig(init="unused", offline_split="squad.json"))
    assert not (tmp_path / "out").exists()


@pytest.mark.jax
def test_glue_grid_builds_the_grid_run_protocol_runs(encoder, tmp_path, monkeypatch):
    """A GLUE grid compiled ahead (`glue_grid`, then `compile_fit`; one encoder listed for
    each of the run's, as a window compiles a variant's fine-tuning beside its
    pre-training) is the grid `run_protocol(together=...)` then trains (members, batches,
    packed inputs, precision, dispatches), the task's settings applied. (That a compiled
    grid is then loaded, not compiled again: above.)"""
    import shutil

    from keras_tupe.finetuning import glue_grid, run_protocol

    class Seen(Exception):
        pass

    def record(kind):
        def seen(self, source, rows, sample_weight=None, transform=None):
            shapes = [(np.shape(leaf), np.asarray(leaf).dtype) for leaf in keras.tree.flatten(
                source)]
            found[kind] = (self.size, np.shape(rows), shapes, self.precision,
                           self.steps_per_dispatch, type(self.model).__name__)
            raise Seen
        return seen
    found = {}
    monkeypatch.setattr(GridTrainer, "compile_fit", record("compiled"))
    monkeypatch.setattr(GridTrainer, "fit", record("run"))
    other = shutil.copytree(encoder / "preset", tmp_path / "other")
    protocol_config = ProtocolConfig(
        tasks=["stsb"], out=str(tmp_path / "a"), learning_rates=[1e-3, 1e-4], seeds=[0, 1],
        selection_seed=0, grid=True, precision="mixed_bfloat16", steps_per_dispatch=3)
    run = FinetuneConfig(task="stsb", init=str(encoder / "preset"), epochs=1, batch_size=8,
                         seq_len=64, data_dir=DATA_DIR / "glue")
    init, members = str(encoder / "preset"), [(rate, seed) for rate in (1e-3, 1e-4)
                                               for seed in (0, 1)] * 2
    grid = glue_grid(FinetuneConfig(task="stsb", init=init, epochs=1, batch_size=8, seq_len=64,
                                    data_dir=DATA_DIR / "glue", max_train_examples=30),
                     [rate for rate, _ in members], [seed for _, seed in members],
                     precision="mixed_bfloat16", steps_per_dispatch=3, inits=[init] * 8)
    with pytest.raises(Seen):
        grid.trainer.compile_fit(grid.source, grid.rows, grid.weights)
    with pytest.raises(Seen):
        run_protocol(protocol_config, run, task_settings={"stsb": {"max_train_examples": 30}},
                     together=[(str(other), str(tmp_path / "b"))])
    assert found["compiled"] == found["run"], found
    assert found["run"][:2] == (8, (4, 8, 8))  # 2 encoders x 2 rates x 2 seeds; 30 rows


def write_shards(folder, sequences, seed):
    """A shard folder of `sequences` random sequences of LENGTH ([CLS] first, some padding:
    tokens a mask may not take), the vocabulary beside it; its path."""
    from keras_tupe.data.shards import write_shard_folder

    vocabulary = folder / "vocab.txt"
    vocabulary.write_text("\n".join(["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]"]
                                    + [f"w{i}" for i in range(VOCABULARY - 5)]) + "\n")
    # Few frequent words: a model trained a few steps predicts some (a non-zero accuracy).
    rng = np.random.default_rng(seed)
    ids = np.minimum(4 + rng.geometric(0.4, (sequences, LENGTH)), VOCABULARY - 1).astype(np.int32)
    ids[:, 0], ids[::3, -2:] = 1, 0
    write_shard_folder(str(folder / f"shards_{seed}"), [ids], str(vocabulary), True, LENGTH, 10)
    return str(folder / f"shards_{seed}")


@pytest.mark.jax
def test_the_masks_of_the_data_side_applied_on_the_device_give_fits_batches(tmp_path):
    """`MaskedLMShards.masks` (a batch's sequences and masks), applied by `given_masks` to
    those sequences as a grid holds them, give `MaskedLMShards.batch`, the batch `fit`
    trains on: every input, label and weight. A stream of a part is refused."""
    from keras_tupe.data.shards import MaskedLMShards
    from keras_tupe.grid import given_masks, shard_source

    shards = write_shards(tmp_path, 20, 0)
    ids, _ = shard_source(shards)
    stream = MaskedLMShards(shards, BATCH, seed=3, threads=0)
    for index in (0, 7):  # 7: a batch across two passes
        rows, masks = stream.masks(index)
        x, y, w = given_masks(None, ids[rows], None, tuple(map(np.asarray, masks)))
        want_x, want_y, want_w = stream.batch(index)
        assert int(want_w.sum()) > 0
        for name in want_x:
            assert np.array_equal(np.asarray(x[name]), want_x[name]), name
        assert np.array_equal(np.asarray(y), want_y) and np.array_equal(np.asarray(w), want_w)
    with pytest.raises(ValueError, match="without a part"):
        MaskedLMShards(shards, BATCH, part=(0, 2)).masks(0)


@pytest.mark.jax
def test_a_masked_lm_grid_trained_in_two_fits_is_the_grid_trained_in_one(tmp_path):
    """Two members from one token-id source, each on its own stream's batches and masks
    (`GridPretrainer`): their losses differ and are finite; a grid trained in two `fit`
    calls (as `pretrain`'s blocks) is the grid trained in one, in one program of 2-step
    dispatches whose surplus step changes nothing."""
    from keras_tupe.data.shards import MaskedLMShards
    from keras_tupe.grid import shard_source
    from keras_tupe.pretraining import GridPretrainer

    shards = write_shards(tmp_path, 20, 0)
    streams = [MaskedLMShards(shards, BATCH, seed=seed, threads=0) for seed in (0, 1)]

    def pretrainer(steps_per_dispatch):
        trainer = GridTrainer(masked_lm, (0, 1), (1e-3, 1e-3), Schedule(5, 1),
                              steps_per_dispatch=steps_per_dispatch)
        return GridPretrainer(trainer, shard_source(shards), streams)

    whole = pretrainer(100)
    losses = whole.fit(whole.inputs(0, 5))
    assert losses.shape == (5, 2) and np.all(np.isfinite(losses))
    assert not np.allclose(losses[:, 0], losses[:, 1])
    split = pretrainer(2)
    parts = [split.fit(split.inputs(0, 2)), split.fit(split.inputs(2, 5))]  # 3: 2 of 2
    assert split.trainer.compiles == 1 and split.trainer.steps_done == 5
    assert np.max(np.abs(np.concatenate(parts) - losses)) <= LOSS_TOLERANCE, (parts, losses)
    for k in range(2):
        weights = [np.asarray(v.value) for v in whole.trainer.member_model(k).trainable_variables]
        assert max(float(np.max(np.abs(a - np.asarray(b.value)))) for a, b in zip(
            weights, split.trainer.member_model(k).trainable_variables)) <= WEIGHT_TOLERANCE


@pytest.mark.jax
def test_mixed_bfloat16_tracks_float32():
    """The same two members trained in float32 and in mixed_bfloat16: every step's loss
    within 0.02 (bfloat16 keeps 8 bits of mantissa: about 0.4% of a loss of 0.7 a step),
    the variables stay float32."""
    source, rows, weights, _ = classification_data(3)
    schedule = Schedule(total_steps=len(rows), warmup_steps=WARMUP)
    losses = {}
    for precision in ("float32", "mixed_bfloat16"):
        trainer = GridTrainer(classifier(3), SEEDS[:2], RATES[:2], schedule, precision=precision,
                              steps_per_dispatch=len(rows))
        losses[precision] = trainer.fit(source, rows[:, :2], weights[:, :2])
        assert all(v.dtype == "float32" for v in trainer.model.trainable_variables)
    difference = np.max(np.abs(losses["float32"] - losses["mixed_bfloat16"]))
    assert 0 < difference < 0.02, losses
    assert keras.config.dtype_policy().name == "float32"  # restored


@pytest.mark.parametrize("flags,message", [
    (["--precision", "float32"], "--precision set how a grid trains: add --grid"),
    (["--grid", "--save-models"], "--grid keeps no classifier"),
    (["--grid", "--pad-each-batch"], "--grid trains one length"),
    (["--grid", "--precision", "float16"], "invalid choice: 'float16'"),
    (["--grid", "BACKEND=tensorflow"], "--grid trains on the JAX backend; KERAS_BACKEND is "
                                       "tensorflow. Valid: KERAS_BACKEND=jax"),
])
def test_the_glue_commands_grid_flags_are_checked_before_keras(flags, message, capsys,
                                                               monkeypatch):
    from keras_tupe_cli import finetune_glue

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    if "BACKEND=tensorflow" in flags:
        flags = flags[:-1]
        monkeypatch.setenv("KERAS_BACKEND", "tensorflow")

    try:  # argparse's own errors (a choice) stop the parse; the checks' return status 2
        code = finetune_glue.main(["--init", "x", "--tasks", "sst2", "--out", "o", *flags])
    except SystemExit as stop:
        code = stop.code
    err = capsys.readouterr().err
    assert code == 2 and message in err and len(err.splitlines()) == 1


@pytest.mark.jax
def test_each_pretraining_run_of_a_grid_is_its_fit_run_stopped_and_resumed(tmp_path):
    """`pretrain` of two members (two seeds at two rates) by either engine: the grid's runs,
    stopped after the first block (`until_step`; one member's backup then a block ahead, as
    a kill between backups leaves it) and resumed by the same call, are the `fit`
    runs: each block's loss and accuracy, validation loss and accuracy and learning rate in
    `metrics.csv`, the checkpoints (step 0, the initialization, and step 2) and the final
    presets, which keras-hub loads. The grid was built and compiled ahead for another
    length (`grid_pretrainer`, the aim's 8 steps) and trains in that one program; a grid
    of other members is refused, and so are `until_step` without backups and a strategy
    (a grid places its members itself); a second call on the finished runs is refused."""
    import csv
    import json
    import shutil

    import keras_hub

    from keras_tupe.pretraining import Grid, PretrainError, grid_pretrainer, pretrain
    from keras_tupe_base.settings import PretrainConfig

    config = PretrainConfig(
        preset="tupe_a_tiny", corpus=None, shards=write_shards(tmp_path, 24, 0),
        valid_shards=write_shards(tmp_path, 8, 1), valid_batches=2, out=str(tmp_path / "grid"),
        steps=4, batch_size=BATCH, seq_len=LENGTH, eval_every=2, save_steps=[0, 2],
        warmup_ratio=0.25, backbone_overrides={"num_layers": 1}, verbose=0)
    members = [(0, 1e-3), (1, 3e-3)]
    aim = dataclasses.replace(config, steps=8, save_steps=[0, 4])
    built = grid_pretrainer(aim, members, 2)
    built.compile(2)  # the program its blocks of 2 steps run
    assert not os.path.exists(config.out) and built.trainer.compiles == 1
    with pytest.raises(PretrainError, match="must be a grid of the members"):
        pretrain(config, 2, members[:1], Grid(2, built))
    with pytest.raises(PretrainError, match="until_step stops a grid"):
        pretrain(config, 2, members, Grid(2, backups=False))
    with pytest.raises(PretrainError, match="strategy='mirrored'. Valid: 'default'"):
        pretrain(dataclasses.replace(config, strategy="mirrored"), 2, members, Grid(2))
    stopped = pretrain(config, 2, members, Grid(2, built))
    assert built.trainer.compiles == 1  # the program compiled ahead, for another length
    assert [Path(folder).name for folder in stopped] == ["seed_0_lr0.001", "seed_1_lr0.003"]
    assert all((Path(folder) / "backup").is_dir() and not (Path(folder) / "preset").exists()
               for folder in stopped)
    # As a kill between two members' backups leaves it: seed 0's committed a block ahead
    # (a copy named for step 4), its step 2 kept; the grid resumes from step 2, which both hold.
    ahead = Path(stopped[0]) / "backup"
    shutil.copytree(ahead / "step_000000002", ahead / "step_000000004")
    (ahead / "training_metadata.json").write_text(json.dumps(
        {"epoch": 2, "batch": 1, "step": 4, "backup": "step_000000004"}))
    keras.backend.clear_session()
    # Resumes after step 2, a grid compiled ahead again (and writes no backup of its own).
    again = grid_pretrainer(aim, members, 2)
    again.compile(2)
    grid = pretrain(config, members=members, engine=Grid(2, again, backups=False))
    assert again.trainer.compiles == 1
    fit = pretrain(dataclasses.replace(config, out=str(tmp_path / "fit")), members=members)

    def rows(folder):
        with open(Path(folder) / "metrics.csv") as f:
            return [[float(row[name]) for name in ("step", "loss", "accuracy", "val_loss",
                                                   "val_accuracy", "learning_rate")]
                    for row in csv.DictReader(f)]

    def weights(path):
        return keras_hub.models.Backbone.from_preset(str(path)).get_weights()

    for ours, theirs in zip(grid, fit):
        assert np.array(rows(ours)).shape == (2, 6)
        np.testing.assert_allclose(rows(ours), rows(theirs), rtol=1e-5, atol=1e-6)
        assert not (Path(ours) / "backup").exists()
        for path in ("preset", "checkpoints/step_0000000", "checkpoints/step_0000002"):
            assert max(float(np.max(np.abs(a - b))) for a, b in zip(
                weights(Path(ours) / path), weights(Path(theirs) / path))) <= WEIGHT_TOLERANCE
    assert rows(grid[0])[1][1] != rows(grid[1])[1][1]  # each member its own run
    assert max(row[2] for folder in grid for row in rows(folder)) > 0  # accuracy compared
    with pytest.raises(PretrainError, match="holds a finished run"):
        pretrain(config, members=members, engine=Grid(2))
