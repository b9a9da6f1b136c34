"""Training under the JAX backend: pre-training, fine-tuning, DataParallel, and the
same optimizer step (clipping, weight decay) as TensorFlow.

Each case runs in a fresh process with `KERAS_BACKEND` set, so the suite can run
under either backend; `make test-jax` runs this file (jax[cpu] installed).
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.jax

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI_TRAIN = DATA_DIR / "enwiki" / "train.txt"


def run(args, backend, devices=1, cwd=None):
    env = {**os.environ, "KERAS_BACKEND": backend, "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(REPO)}
    if devices > 1:
        env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={devices}"
    result = subprocess.run([sys.executable, *args], env=env, cwd=cwd or REPO,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]
    return result.stdout


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    from keras_tupe import data

    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return data.train_vocabulary(str(ENWIKI_TRAIN), 400, str(path), max_lines=1500)


def pretrain_args(out, vocab, *extra):
    return ["-m", "training.pretrain", "--preset", "tupe_r_tiny", "--corpus", str(ENWIKI_TRAIN),
            "--out", str(out), "--vocab", str(vocab), "--max-lines", "1500", "--seq-len", "32",
            "--batch-size", "8", "--steps", "6", "--eval-every", "2", "--learning-rate", "1e-3",
            "--verbose", "0", "--shuffle-buffer", "64", *extra]


def losses(run_dir):
    rows = (Path(run_dir) / "metrics.csv").read_text().splitlines()[1:]
    return np.array([float(row.split(",")[1]) for row in rows])


@pytest.fixture(scope="module")
def jax_run(vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("jax") / "run"
    run(pretrain_args(out, vocab), "jax")
    return out


def test_pretraining_under_jax_learns_and_writes_a_preset_folder(jax_run):
    curve = losses(jax_run)
    assert len(curve) == 3 and curve[-1] < curve[0]  # 6 steps at 1e-3: the loss falls
    preset = jax_run / "preset"
    for name in ("config.json", "model.weights.h5", "tokenizer.json", "preprocessor.json",
                 "task.json", "task.weights.h5", "metadata.json"):
        assert (preset / name).is_file(), name
    metadata = json.loads((preset / "metadata.json").read_text())
    assert metadata["keras_tupe_training"]["steps"] == 6
    assert metadata["keras_tupe_training"]["tokens"] == 6 * 8 * 32
    assert json.loads((jax_run / "run_config.json").read_text())["replicas"] == 1


def test_data_parallel_over_two_devices_equals_one_device(jax_run, vocab, tmp_path):
    """keras.distribution.DataParallel: the same global batch, sharded; the same curve."""
    out = tmp_path / "dp"
    run(pretrain_args(out, vocab, "--strategy", "mirrored"), "jax", devices=2)
    assert json.loads((out / "run_config.json").read_text())["replicas"] == 2
    np.testing.assert_allclose(losses(out), losses(jax_run), rtol=1e-4)


def test_fine_tuning_under_jax_from_the_preset_folder(jax_run, tmp_path):
    out = tmp_path / "glue"
    run(["-m", "training.finetune_glue", "--init", str(jax_run / "preset"), "--tasks", "rte",
         "--out", str(out), "--data-dir", str(DATA_DIR), "--learning-rates", "1e-4",
         "--seeds", "0", "--epochs", "1", "--max-train-examples", "32", "--seq-len", "32",
         "--verbose", "0"], "jax")
    result = json.loads((out / "results.jsonl").read_text().splitlines()[0])
    assert result["task"] == "rte" and result["train_examples"] == 32
    assert 0 <= result["dev"]["validation"]["accuracy"] <= 1


ONE_STEP = """
import sys, numpy as np, keras
from keras_tupe.models import TupeBackbone, TupeMaskedLM
from keras_tupe.optimization import create_optimizer
weights, batch, mode, *steps = sys.argv[1:]
model = TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny", dropout=0.0))
data = dict(np.load(batch))
x = {k: data[k] for k in ("token_ids", "padding_mask", "segment_ids", "mask_positions")}
model(x)
if mode == "save":
    model.save_weights(weights)
for step in steps:  # OUT=CLIP_NORM: one step from the saved weights, a new optimizer
    out, clip_norm = step.split("=")
    model.load_weights(weights)
    before = [keras.ops.convert_to_numpy(w) for w in model.weights]
    # Adam's first step is scale-free (m / sqrt(v)) unless the gradient is small next to
    # epsilon (1e-6): a clip norm of 1e-5 over ~100k weights makes the clipped step
    # depend on the clipping; weight decay 0.1 at rate 1e-2 moves every decayed weight.
    optimizer = create_optimizer(model, 1e-2, total_steps=10, warmup_steps=0,
                                 weight_decay=0.1, clip_norm=float(clip_norm))
    model.compile(optimizer=optimizer)
    model.train_on_batch(x, data["y"], sample_weight=data["w"])
    np.savez(out, *[keras.ops.convert_to_numpy(w) - b for w, b in zip(model.weights, before)])
"""


def test_one_step_is_the_same_on_tensorflow_and_jax(tmp_path):
    """Aggregated clipping and the decay exclusions act identically on both backends."""
    rng = np.random.default_rng(0)
    batch = tmp_path / "batch.npz"
    np.savez(batch, token_ids=rng.integers(5, 1024, (4, 16)).astype("int32"),
             padding_mask=np.ones((4, 16), "int32"), segment_ids=np.zeros((4, 16), "int32"),
             mask_positions=rng.integers(1, 16, (4, 3)).astype("int32"),
             y=rng.integers(5, 1024, (4, 3)).astype("int32"), w=np.ones((4, 3), "float32"))
    weights = tmp_path / "init.weights.h5"
    script = tmp_path / "one_step.py"
    script.write_text(ONE_STEP)
    run([str(script), str(weights), str(batch), "save", f"{tmp_path / 'tf.npz'}=1e-5"],
        "tensorflow")
    # JAX's clipped step, then (in the same process, from the same weights) its unclipped one.
    run([str(script), str(weights), str(batch), "load", f"{tmp_path / 'jax.npz'}=1e-5",
         f"{tmp_path / 'loose.npz'}=1e9"], "jax")
    # The steps (weights after minus before) of each variable.
    tf_step, jax_step = np.load(tmp_path / "tf.npz"), np.load(tmp_path / "jax.npz")
    unclipped = np.load(tmp_path / "loose.npz")
    assert tf_step.files == jax_step.files == unclipped.files
    moved = 0
    for name in tf_step.files:
        # The whole variable's step within 10% (L2) of TensorFlow's, plus two float32 ulps at
        # 1.0 an element (a step is a difference of rounded weights). Here the clipped
        # gradient is far below Adam's epsilon, so a step is ~ lr * g / epsilon: elements
        # whose gradient is a near-cancelling sum differ between the backends' float32 passes
        # by several % (element-wise tolerances of 2%, then 4%, of the largest step each
        # failed once, on 3 to 17 of the 65,536 token-embedding steps), and a LayerNorm
        # vector's steps of ~1e-5 on weights near 1 are a few ulps each: over 53 variables the
        # largest difference measured was 2.1% (then 1.5% in another run). A wrong clip moves
        # a step by the unclipped/clipped ratio (over 2,500x here, checked below) and decay
        # on an excluded LayerNorm gamma by lr * decay * 1 = 1e-3 an element, where its step
        # is ~1e-5: each far past 10%.
        scale = np.linalg.norm(tf_step[name])
        error = np.linalg.norm(jax_step[name] - tf_step[name])
        assert error <= 0.1 * scale + 2.4e-7 * np.sqrt(tf_step[name].size), (name, error, scale)
        # Without the clip the step is several times larger: the comparison sees it.
        if scale > 0:
            moved += 1
            assert np.linalg.norm(unclipped[name]) > 2 * scale, name
    assert moved > len(tf_step.files) // 2
