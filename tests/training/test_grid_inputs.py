"""What a grid is given, checked before it is built (issue 76).

- Its memory, from the configuration alone: `member_parameters` counts a member's
  parameters on shallow twins (held here to the built model's own count), and a grid too
  large for the device is refused before the data, the encoder or any member is loaded, in
  the command's words (`--learning-rates` x `--seeds`) with the largest K that fits.
- A member listed twice (the same seed and rate, and encoder) trains once, with a note, as
  `--seeds 3 3` does in the command; a repeated task, rate or seed given to the library
  is merged with the same note.
- At the command's parse, before Keras: seeds outside NumPy's 0 .. 2**32 - 1, and `--grid`
  where the backend Keras will take (`KERAS_BACKEND`, else `keras.json`) is not JAX.
- Two encoders of other architectures in one grid: the message says what differs.
"""

import json
import os
import re
import subprocess
import sys
import warnings
from pathlib import Path

import numpy as np
import pytest

from keras_tupe import grid
from keras_tupe.finetuning import Protocol, engines, glue, run_protocol
from keras_tupe.grid import (GridTrainer, Schedule, check_grid_memory, member_parameters,
                             merged_members)
from keras_tupe.models import TupeBackbone, TupeMaskedLM, TupeSpanQA, TupeTextClassifier
from keras_tupe_base.presets import PRESETS
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig, check
from keras_tupe_cli import finetune_glue
from tests.backends import ATTENTION_PATHS

REPO = Path(__file__).resolve().parents[2]
GLUE_ARGS = ["--init", "r", "--tasks", "sst2", "--out", "o"]


def classifier_head(backbone):
    return TupeTextClassifier(backbone, num_classes=3, preprocessor=None)


@pytest.mark.parametrize("variant", [*ATTENTION_PATHS, "tupe_a_fairseq", "shaw", "huang_m1"])
def test_member_parameters_are_the_built_models_count(variant):
    """Every size differs from the tiny preset's (a count taken from the wrong one is off);
    the masked LM's head ties its output to the token embedding and adds a bias a token."""
    config = {**PRESETS[f"{variant}_tiny"], "num_layers": 3, "vocabulary_size": 77,
              "hidden_dim": 48, "num_heads": 3, "intermediate_dim": 40}
    built = TupeBackbone(**config)
    for task in (None, classifier_head, TupeMaskedLM, TupeSpanQA):
        expected = (task(built) if task else built).count_params()
        assert member_parameters(config, task) == expected, task


def encoder_folder(tmp_path):
    folder = tmp_path / "encoder"
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=64).save_to_preset(str(folder))
    return folder


def refused(*args, **kwargs):
    raise AssertionError("loaded before the grid's memory was checked")


def fits_three(config, batch_size, seq_len):
    """Device bytes where exactly three members of `config`'s classifier fit."""
    member = check_grid_memory(config, 1, batch_size, seq_len, task=classifier_head,
                               limit_bytes=2**60)
    return int(3 * member / 0.9) + 1


def test_a_grid_too_large_is_refused_before_anything_loads(tmp_path, monkeypatch, capsys):
    """K = 8 rates x 8 seeds = 64 at batch 32 x 128: refused with K=3 (what fits), before
    `_preflight` reads the data and before an encoder or a member is built; through the
    command, in its flags' words, nothing left on disk."""
    encoder = encoder_folder(tmp_path)
    config = json.loads((encoder / "config.json").read_text())["config"]
    monkeypatch.setattr(grid, "device_memory", lambda: fits_three(config, 32, 128))
    monkeypatch.setattr(glue, "check_backend", lambda: None)  # the check needs no JAX
    for module, loader in ((glue, "_preflight"), (glue, "load_backbone"),
                           (engines, "GridTrainer")):
        monkeypatch.setattr(module, loader, refused)
    rates, seeds = [1e-5 * (1 + i) for i in range(8)], list(range(8))
    message = (r"A grid of K=64 members \(a learning rate and a seed each: `{}` x `{}`\) needs "
               r"about .* GiB .* at batch 32 x 128 tokens\); the device holds .* GiB. Use at "
               r"most K=3 members a grid.")
    with pytest.raises(ValueError, match=message.format("learning_rates=", "seeds=")):
        run_protocol(ProtocolConfig(tasks=["sst2"], out=str(tmp_path / "out"),
                                    learning_rates=rates, seeds=seeds, grid=True),
                     FinetuneConfig(task="sst2", init=str(encoder), batch_size=32, seq_len=128))
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # the command's parse reads it for --grid
    code = finetune_glue.main(["--init", str(encoder), "--tasks", "sst2", "--out",
                               str(tmp_path / "out"), "--grid", "--learning-rates",
                               *map(str, rates), "--seeds", *map(str, seeds)])
    err = capsys.readouterr().err
    assert code == 2 and len(err.splitlines()) == 1, err
    assert re.search(message.format("--learning-rates", "--seeds"), err), err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["encoder"]


def test_a_member_listed_twice_trains_once_with_a_note():
    with pytest.warns(UserWarning, match=r"The same member is listed more than once: seed 3 "
                                         r"at learning rate 0.0001 \(2 times\); each trains "
                                         r"once \(2 members\)"):
        assert merged_members([3, 3, 4], [1e-4, 1e-4, 1e-4]) == ([3, 4], [1e-4, 1e-4], None)
    with warnings.catch_warnings():  # the same seed and rate from two encoders: two members
        warnings.simplefilter("error")
        assert merged_members([3, 3], [1e-4, 1e-4], ["a", "b"]) == (
            [3, 3], [1e-4, 1e-4], ["a", "b"])


def test_the_library_merges_repeated_rates_seeds_and_tasks_with_the_commands_note(tmp_path):
    with pytest.warns(UserWarning, match=r"^seeds= lists 3 more than once \(2 times\); each "
                                         r"runs once: seeds=\[3, 1\]$"):
        assert Protocol((1e-4,), (3, 3, 1)).seeds == (3, 1)
    with pytest.warns(UserWarning, match=r"^tasks= lists sst2 more than once"), \
            pytest.raises(FileNotFoundError):  # (no encoder there: refused after the note)
        run_protocol(ProtocolConfig(tasks=["sst2", "sst2"], out=str(tmp_path / "out")),
                     FinetuneConfig(task="sst2", init=str(tmp_path / "none")))


@pytest.mark.parametrize("seeds", [["0", "-1"], ["4294967296"]])
def test_seeds_numpy_cannot_take_are_refused_at_parse(seeds):
    with pytest.raises(ValueError, match=r"^--seeds must be an int >= 0 and <= 4294967295. "
                                         rf"Received: --seeds {seeds[-1]}$"):
        finetune_glue.parse_configs([*GLUE_ARGS, "--seeds", *seeds])
    with pytest.raises(ValueError, match="`seed` must be an int >= 0 and <= 4294967295"):
        check(FinetuneConfig(task="sst2", init="r", seed=-1))


def keras_itself(env):
    """The backend Keras takes in a fresh process with `env` (the reference)."""
    done = subprocess.run([sys.executable, "-c", "import keras; print(keras.backend.backend())"],
                          env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-2000:]
    return done.stdout.split()[-1]


@pytest.mark.parametrize("keras_json", [{"backend": "jax"}, {"backend": "tensorflow"}, None])
def test_grid_reads_the_backend_where_keras_does(tmp_path, monkeypatch, keras_json):
    """KERAS_BACKEND unset: keras.json in KERAS_HOME decides, else TensorFlow, as Keras
    itself decides in a fresh process (was: an unset variable taken for jax, and the refusal
    came from the library after 16 s)."""
    monkeypatch.delenv("KERAS_BACKEND", raising=False)
    monkeypatch.setenv("KERAS_HOME", str(tmp_path))
    if keras_json:
        (tmp_path / "keras.json").write_text(json.dumps(keras_json))
    from keras_tupe_base.extras import keras_backend

    backend = keras_backend()
    if keras_json != {"backend": "tensorflow"}:  # (TensorFlow's start is the slow reference)
        assert backend == keras_itself(dict(os.environ))
    if backend == "jax":
        assert finetune_glue.parse_configs([*GLUE_ARGS, "--grid"])[0].grid
    else:
        with pytest.raises(ValueError, match=r"^--grid trains on the JAX backend; KERAS_BACKEND "
                                             r"is unset, so Keras takes keras.json's backend, "
                                             r"tensorflow. Valid: KERAS_BACKEND=jax$"):
            finetune_glue.parse_configs([*GLUE_ARGS, "--grid"])


def test_save_models_with_grid_says_drop_one_or_the_other(monkeypatch):
    monkeypatch.setenv("KERAS_BACKEND", "jax")
    with pytest.raises(ValueError, match="drop --save-models, or drop --grid to keep them"):
        finetune_glue.parse_configs([*GLUE_ARGS, "--grid", "--save-models"])


@pytest.mark.jax
def test_encoders_of_two_architectures_are_named_with_what_differs():
    def build(seed, init):
        backbone = TupeBackbone.from_preset("tupe_a_tiny", vocabulary_size=60, num_layers=1,
                                            layer_norm_position=init)
        return TupeTextClassifier(backbone, num_classes=2, preprocessor=None)

    with pytest.raises(ValueError, match=r"seed 0 from pre made a model whose variables differ "
                                         r"from seed 0 from post's \(layer_norm_position "
                                         r"'post' against 'pre'\)"):
        GridTrainer(build, (0, 0), (1e-3, 1e-3), Schedule(10, 1), inits=["post", "pre"])


@pytest.mark.jax
def test_a_grid_built_directly_refuses_after_its_first_member(monkeypatch):
    """`GridTrainer(..., memory_for=(batch, length))`: K=64 is refused with one member built
    (was: all 64 built and stacked before `check_memory` could run)."""
    built = []

    def build(seed):
        built.append(seed)
        return TupeTextClassifier(TupeBackbone.from_preset(
            "tupe_a_tiny", vocabulary_size=60, num_layers=1), num_classes=2, preprocessor=None)

    config = {**PRESETS["tupe_a_tiny"], "vocabulary_size": 60, "num_layers": 1}
    monkeypatch.setattr(grid, "device_memory", lambda: fits_three(config, 32, 128))
    with pytest.raises(ValueError, match=r"K=64 members needs .* Use at most K=3 members"):
        GridTrainer(build, range(64), [1e-3] * 64, Schedule(10, 1), memory_for=(32, 128))
    assert built == [0]


SPREAD = """
import json
import jax
import numpy as np
from keras_tupe.grid import GridTrainer, Schedule
from tests.training.test_grid import RATES, SEEDS, classification_data, classifier

source, rows, weights, _ = classification_data(2)
found = {}
for name, devices in (("one", jax.devices()[:1]), ("two", jax.devices())):
    trainer = GridTrainer(classifier(2), SEEDS, RATES, Schedule(len(rows), 2),
                          steps_per_dispatch=5, devices=devices)
    losses = trainer.fit(source, rows, weights)
    kernel = trainer.state[0][0]  # each member's first weight, on its device
    placed = [sorted({s.device.id for s in kernel.addressable_shards
                      if (s.index[0].start or 0) <= k < (s.index[0].stop or len(SEEDS))})
              for k in range(len(SEEDS))]
    found[name] = {"losses": losses.tolist(), "placed": placed,
                   "weights": [np.asarray(v).tolist() for v in trainer.state[0][-2:]],
                   "predicted": np.asarray(trainer.predict(source[0])).tolist()}
for name, devices in (("three_on_one", jax.devices()[:1]), ("three_on_two", jax.devices())):
    trainer = GridTrainer(classifier(2), SEEDS[:3], RATES[:3], Schedule(len(rows), 2),
                          steps_per_dispatch=5, devices=devices)
    found[name] = {"losses": trainer.fit(source, rows[:, :3], weights[:, :3]).tolist(),
                   "predicted": np.asarray(trainer.predict(source[0])).tolist()}
print(json.dumps(found))
"""


@pytest.mark.jax
def test_members_spread_over_two_devices_train_as_on_one(tmp_path):
    """K = 4 over 2 devices (virtual CPU devices, XLA's host platform count): members 0-1
    on the first, 2-3 on the second, and the losses, the last weights and the predictions
    those of the same grid on one device. K = 3 over 2: a copy of the first member fills
    the second device, and the three members' losses and predictions are those on one."""
    env = {**os.environ, "KERAS_BACKEND": "jax",  # JAX alone (tests/no_tensorflow), as on a GPU
           "PYTHONPATH": os.pathsep.join([str(REPO / "tests" / "no_tensorflow"), str(REPO)]),
           "XLA_FLAGS": "--xla_force_host_platform_device_count=2"}
    done = subprocess.run([sys.executable, "-c", SPREAD], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
    found = json.loads(done.stdout.splitlines()[-1])
    assert found["one"]["placed"] == [[0]] * 4
    assert found["two"]["placed"] == [[0], [0], [1], [1]]
    for key in ("losses", "predicted"):
        np.testing.assert_allclose(found["two"][key], found["one"][key], atol=1e-5, err_msg=key)
    for two, one in zip(found["two"]["weights"], found["one"]["weights"]):
        np.testing.assert_allclose(two, one, atol=1e-5)
    for key in ("losses", "predicted"):
        np.testing.assert_allclose(found["three_on_two"][key], found["three_on_one"][key],
                                   atol=1e-5, err_msg=key)
    assert np.shape(found["three_on_two"]["losses"])[1] == 3
    assert len(found["three_on_two"]["predicted"]) == 3
