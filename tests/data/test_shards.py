"""Token-id shards: the sharder, the NumPy loader (no TensorFlow), pre-training from shards.

The shard path must give the token stream of `packed_sequences` and the masking
statistics of `mlm_dataset`, need no TensorFlow, and resume a run exactly. The
loader tests are fast (`make test`); the resumed run under TensorFlow is `slow`, under
JAX without TensorFlow tests/training/test_processes.py's.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from keras_tupe import data
from keras_tupe.data import shards
from keras_tupe.data.masking import MASK_ID, UNSELECTABLE_IDS
from keras_tupe.data.sharding import shard_corpus
from keras_tupe_base import shard_folders
from keras_tupe_cli import pretrain as pretrain_cli
from keras_tupe_cli import shard_corpus as shard_cli

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI_TRAIN = DATA_DIR / "enwiki" / "train.txt"
ENWIKI_VALID = DATA_DIR / "enwiki" / "valid.txt"
SEQ_LEN = 32
# 2,317 sequences (3 shards of 1,000): over 10,000 masked positions for the masking
# statistics (300 lines gave 9,920 once the vocabulary learner changed).
MAX_LINES = 340
# Under `--dist loadgroup` (Makefile): one worker makes the shard folders the tests share.
pytestmark = pytest.mark.xdist_group("test_shards")


@pytest.fixture(scope="module")
def vocab(tmp_path_factory):
    path = tmp_path_factory.mktemp("vocab") / "vocab.txt"
    return data.train_vocabulary(str(ENWIKI_TRAIN), 400, str(path), max_lines=300)


@pytest.fixture(scope="module")
def shard_dir(vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "train"
    shard_corpus(str(ENWIKI_TRAIN), vocab, str(out), SEQ_LEN, sequences_per_shard=1000,
                 max_lines=MAX_LINES, command="test")
    return out


def tf_stream(vocab):
    """The unmasked sequences of today's tf.data path, in corpus order."""
    tokenizer = data.load_tokenizer(vocab)
    sequences = data.packed_sequences(str(ENWIKI_TRAIN), tokenizer, SEQ_LEN, max_lines=MAX_LINES)
    return np.stack(list(sequences.as_numpy_iterator()))


def test_shards_hold_the_token_stream_of_packed_sequences(shard_dir, vocab):
    manifest = json.loads((shard_dir / shard_folders.MANIFEST).read_text())
    want = tf_stream(vocab)
    files = sorted(shard_dir.glob("shard_*.npy"))
    stored = [np.load(f) for f in files]
    assert all(array.dtype == np.uint16 for array in stored)
    assert [len(array) for array in stored[:-1]] == [1000] * (len(stored) - 1)
    np.testing.assert_array_equal(np.concatenate(stored), want)
    assert manifest["num_sequences"] == len(want) and len(files) == len(manifest["shards"]) > 1
    assert manifest["num_tokens"] == len(want) * SEQ_LEN
    assert manifest["vocabulary_sha256"] == data.vocabulary_fingerprint(vocab)
    assert manifest["sequence_length"] == SEQ_LEN and manifest["dtype"] == "uint16"
    assert manifest["corpus"] == [str(ENWIKI_TRAIN)] and manifest["command"] == "test"
    # The loader, unshuffled, reads the same stream back, batch by batch.
    loader = shards.MaskedLMShards(str(shard_dir), 64, shuffle=False, repeat=False)
    assert len(loader) == len(want) // 64
    got = np.concatenate([loader.unmasked(i) for i in range(len(loader))])
    np.testing.assert_array_equal(got, want[: len(got)])


def _masking_counts(batches):
    """Per-sequence selection counts and pooled statistics of `(x, y, w)` batches."""
    counts, masked, unchanged, positions, random_ids = [], 0, 0, [], []
    for x, y, w in batches:
        x, y, w = ({k: np.asarray(v) for k, v in x.items()}, np.asarray(y), np.asarray(w))
        real = w > 0
        counts.append(real.sum(axis=1))
        at = np.take_along_axis(x["token_ids"], x["mask_positions"], axis=1)
        # Never a special token, never position 0; padded slots are all zeros.
        assert not np.isin(y[real], UNSELECTABLE_IDS).any()
        assert (x["mask_positions"][real] > 0).all()
        assert not x["mask_positions"][~real].any() and not y[~real].any()
        masked += int((at[real] == MASK_ID).sum())
        unchanged += int((at[real] == y[real]).sum())
        other = real & (at != MASK_ID) & (at != y)
        random_ids.append(at[other])
        positions.append(x["mask_positions"][real])
        for key in ("padding_mask", "segment_ids"):
            assert x[key].dtype == np.int32
        assert x["token_ids"].dtype == y.dtype == x["mask_positions"].dtype == np.int32
        assert w.dtype == np.float32
    return (np.concatenate(counts), masked, unchanged, np.concatenate(positions),
            np.concatenate(random_ids))


def test_masking_statistics_match_mlm_dataset(shard_dir, vocab):
    tokenizer = data.load_tokenizer(vocab)
    tf_batches = data.mlm_dataset(str(ENWIKI_TRAIN), tokenizer, SEQ_LEN, 64, seed=0,
                                  shuffle_buffer=0, repeat=False, max_lines=MAX_LINES)
    loader = shards.MaskedLMShards(str(shard_dir), 64, seed=0, shuffle=False, repeat=False)
    tf_stats = _masking_counts(tf_batches.as_numpy_iterator())
    np_stats = _masking_counts(loader[i] for i in range(len(loader)))

    # The same sequences in the same order: tf-text's exact count, sequence by sequence.
    np.testing.assert_array_equal(np_stats[0], tf_stats[0])
    selected = int(np_stats[0].sum())
    assert selected > 10_000

    def rate_close(a, b, p):
        tolerance = 4 * np.sqrt(p * (1 - p) * 2 / selected)  # 4 standard errors of a - b
        assert abs(a / selected - b / selected) < tolerance, (a / selected, b / selected)

    rate_close(np_stats[1], tf_stats[1], 0.8)   # [MASK]
    rate_close(np_stats[2], tf_stats[2], 0.1)   # unchanged (1/V more for random draws)
    random_np, random_tf = len(np_stats[4]), len(tf_stats[4])
    rate_close(random_np, random_tf, 0.1)       # another id
    assert abs(random_np / selected - 0.1) < 4 * np.sqrt(0.09 / selected)
    # Positions uniform over the selectable tokens; random ids uniform over the vocabulary.
    spread = np.std(tf_stats[3]) * np.sqrt(2 / selected)
    assert abs(np_stats[3].mean() - tf_stats[3].mean()) < 4 * spread
    vocabulary_size = tokenizer.vocabulary_size()
    for ids in (np_stats[4], tf_stats[4]):
        sd = vocabulary_size / np.sqrt(12 * len(ids))
        assert abs(ids.mean() - (vocabulary_size - 1) / 2) < 4 * sd


def test_any_batch_is_computed_directly(shard_dir):
    """Batch k is the same whether read as index k or as index 0 of `start_batch=k`
    (resume seeks), and with or without threads computing ahead. Each pass over the
    shards is a fresh permutation of all sequences."""
    loader = shards.MaskedLMShards(str(shard_dir), 48, seed=5, threads=2)
    for i in range(4):  # in order, as `fit` asks: the threads work ahead
        loader[i]
    again = shards.MaskedLMShards(str(shard_dir), 48, seed=5, threads=0)
    total = len(loader.sequences)
    far = 3 * total // 48 + 7  # in the fourth pass
    seeked = shards.MaskedLMShards(str(shard_dir), 48, seed=5, start_batch=far)
    for a, b in [(loader[far], seeked[0]), (loader[2], again[2])]:
        for key in a[0]:
            np.testing.assert_array_equal(a[0][key], b[0][key])
        np.testing.assert_array_equal(a[1], b[1])
        np.testing.assert_array_equal(a[2], b[2])
    other_seed = shards.MaskedLMShards(str(shard_dir), 48, seed=6)
    assert not np.array_equal(other_seed[2][0]["token_ids"], loader[2][0]["token_ids"])
    batches = -(-2 * total // 48)
    order = np.concatenate([loader.sequence_indices(b) for b in range(batches)])
    first, second = order[:total], order[total:2 * total]
    assert sorted(first) == list(range(total)) == sorted(second)
    assert not np.array_equal(first, second) and not np.array_equal(first, np.arange(total))


@pytest.mark.jax
def test_the_loader_and_pretraining_import_without_tensorflow(shard_dir):
    """The GPU machine of the issue: Keras on JAX, no TensorFlow, no tensorflow-text."""
    pytest.importorskip("jax")
    script = (
        "import sys\n"
        "sys.modules['tensorflow'] = None\n"
        "sys.modules['tensorflow_text'] = None\n"
        "import keras, keras_tupe, keras_tupe.pretraining\n"
        "from keras_tupe.data.shards import MaskedLMShards\n"
        f"x, y, w = MaskedLMShards({str(shard_dir)!r}, 16, seed=1)[3]\n"
        "assert keras.backend.backend() == 'jax'\n"
        "assert sys.modules['tensorflow'] is None\n"
        "print(x['token_ids'].shape, x['mask_positions'].shape, y.shape, w.shape)\n"
    )
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "KERAS_BACKEND": "jax", "PYTHONPATH": str(REPO)})
    assert result.returncode == 0, result.stderr[-3000:]
    assert result.stdout.split("\n")[-2] == "(16, 32) (16, 5) (16, 5) (16, 5)"


def test_the_sharder_refuses_a_non_empty_out_and_leaves_nothing_half_made(
        vocab, tmp_path, capsys):
    out = tmp_path / "shards"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    args = ["--corpus", str(ENWIKI_VALID), "--vocab", vocab, "--seq-len", "16",
            "--max-lines", "40", "--out", str(out)]
    assert shard_cli.main(args) == 2
    assert "--out" in capsys.readouterr().err and (out / "notes.txt").exists()
    assert shard_cli.main([*args, "--overwrite", "--sequences-per-shard", "50"]) == 0
    manifest = json.loads((out / shard_folders.MANIFEST).read_text())
    assert manifest["sequence_length"] == 16 and not (out / "notes.txt").exists()

    def crashing():
        yield np.ones((4, 16), np.int32)
        raise RuntimeError("killed")

    crashed = tmp_path / "crashed"
    with pytest.raises(RuntimeError):
        shards.write_shard_folder(str(crashed), crashing(), vocab, True, 16, 2)
    assert not crashed.exists()


def tiny_shard_args(out, shard_dir, *extra):
    return ["--preset", "tupe_r_tiny", "--shards", str(shard_dir), "--out", str(out),
            "--seq-len", str(SEQ_LEN), "--batch-size", "8", "--steps", "6", "--eval-every", "2",
            "--verbose", "0", *extra]


@pytest.mark.parametrize("change, message", [
    (["--shards", "/nonexistent/shards"], "--shards /nonexistent/shards does not exist.*"
                                          "keras-tupe-shard-corpus"),
    (["--shards", str(ENWIKI_VALID)], f"--shards {ENWIKI_VALID} is not a folder.*"
                                      "keras-tupe-shard-corpus"),
    (["--seq-len", "64"], "--seq-len 64 does not match --shards .*sequence_length=32.*"
                          "Pass --seq-len 32"),
    (["--corpus", str(ENWIKI_TRAIN)], "exactly one of --corpus .* and --shards.*both"),
    (["--valid-corpus", str(ENWIKI_VALID)], "--valid-corpus goes with --corpus"),
    (["--cased"], "lowercase=True.*--cased"),
])
def test_bad_shard_input_is_refused_before_training(shard_dir, tmp_path, capsys, change, message):
    import re

    # A repeated flag: argparse keeps the last value.
    assert pretrain_cli.main(tiny_shard_args(tmp_path / "run", shard_dir) + change) == 2
    assert re.search(message, capsys.readouterr().err, re.S)
    assert not (tmp_path / "run").exists()


def test_read_manifest_tells_a_missing_folder_from_a_file(tmp_path):
    """The library says what `training.pretrain` says before TensorFlow's import."""
    import re

    missing, file = tmp_path / "x", tmp_path / "f"
    file.write_text("")
    hint = pretrain_cli.SHARDS_HINT
    with pytest.raises(shard_folders.ShardError,
                       match=re.escape(f"--shards {missing} does not exist. {hint}")):
        shard_folders.read_manifest(str(missing))
    with pytest.raises(shard_folders.ShardError,
                       match=re.escape(f"--valid-shards {file} is not a folder. {hint}")):
        shard_folders.read_manifest(str(file), flag="--valid-shards")


def test_seq_len_defaults_to_the_shards_length(shard_dir):
    args = pretrain_cli.fit_to_preset(vars(pretrain_cli.parse_args(
        ["--preset", "tupe_r_mini", "--shards", str(shard_dir), "--out", "unused"])))
    assert args["seq_len"] == SEQ_LEN  # not the preset's 512


def test_a_folder_without_manifest_and_a_foreign_vocabulary_are_named(
        shard_dir, vocab, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    argv = tiny_shard_args(tmp_path / "run", empty)
    assert pretrain_cli.main(argv) == 2
    assert f"--shards {empty} has no manifest.json" in capsys.readouterr().err
    other = tmp_path / "other_vocab.txt"
    other.write_text(Path(vocab).read_text() + "extra\n")
    argv = tiny_shard_args(tmp_path / "run", shard_dir, "--vocab", str(other))
    assert pretrain_cli.main(argv) == 2
    assert f"--vocab {other} is not the vocabulary of --shards" in capsys.readouterr().err


def test_a_damaged_shard_folder_is_named(shard_dir, tmp_path):
    import shutil

    damaged = tmp_path / "damaged"
    shutil.copytree(shard_dir, damaged)
    np.save(damaged / "shard_00001.npy", np.ones((3, SEQ_LEN), np.uint16))
    with pytest.raises(shard_folders.ShardError, match="shard_00001.npy holds an array of shape "
                                                 r"\(3, 32\), where manifest.json says \(1000, 32\)"):
        shards.MaskedLMShards(str(damaged), 8)
    (damaged / "shard_00002.npy").unlink()
    with pytest.raises(shard_folders.ShardError, match="shard_00002.npy, listed in manifest.json, is "
                                                 "missing"):
        shard_folders.read_manifest(str(damaged))


def test_resuming_with_shards_made_again_with_another_vocabulary_is_refused(
        shard_dir, tmp_path):
    from keras_tupe.pretraining import RUN_CONFIG, PretrainError, pretrain
    from keras_tupe_base.settings import PretrainConfig

    out = tmp_path / "run"
    config = PretrainConfig(preset="tupe_r_tiny", corpus=None, shards=str(shard_dir),
                            out=str(out), seq_len=SEQ_LEN, batch_size=8, steps=6, eval_every=2)
    out.mkdir()
    (out / RUN_CONFIG).write_text(json.dumps({"config": config.resume_key()}))
    (out / "vocab.txt").write_text("[PAD]\n[CLS]\n[SEP]\n[UNK]\n[MASK]\nother\n")
    with pytest.raises(PretrainError, match="--shards .* holds another vocabulary .* than the "
                                            "unfinished run in --out"):
        pretrain(config)


RUN_SCRIPT = """
import sys
if {until_step} is None:  # the command line, as a user runs it
    from keras_tupe_cli.pretrain import main

    sys.exit(main({argv!r}))
from keras_tupe.pretraining import pretrain
from keras_tupe_base.settings import PretrainConfig

# The settings `argv` gives (a difference would be refused on resume).
config = PretrainConfig(
    preset="tupe_r_tiny", corpus=None, shards={shards!r}, valid_shards={valid!r}, out={out!r},
    seq_len={seq_len}, batch_size=8, steps=6, eval_every=2, learning_rate=1e-3, verbose=0,
    valid_batches=2, save_steps=[0, 4], xla={xla})
pretrain(config, until_step={until_step})
"""


def run_pretraining(shard_dir, valid_dir, out, until_step=None):
    # Under TensorFlow without XLA: the shards' resume is checked here, and a resume to the
    # same weights under XLA, the default, is tests/training/test_pretrain.py's (from a corpus).
    argv = tiny_shard_args(out, shard_dir, "--valid-shards", str(valid_dir), "--valid-batches",
                           "2", "--save-steps", "0,4", "--learning-rate", "1e-3", "--no-xla")
    script = RUN_SCRIPT.format(argv=argv, shards=str(shard_dir), valid=str(valid_dir),
                               out=str(out), seq_len=SEQ_LEN, until_step=until_step, xla=False)
    env = {**os.environ, "KERAS_BACKEND": "tensorflow", "TF_CPP_MIN_LOG_LEVEL": "3",
           "PYTHONPATH": str(REPO)}
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-3000:]


def weights_of(run_dir):
    """The run's last step (its metrics.csv: the preset holds no optimizer state) and weights."""
    from keras_tupe.models.preset_folders import run_model
    from keras_tupe.models import TupeMaskedLM

    rows = (Path(run_dir) / "metrics.csv").read_text().splitlines()[1:]
    model = TupeMaskedLM.from_preset(run_model(run_dir))
    return int(rows[-1].split(",")[0]), [np.asarray(w) for w in model.weights]


@pytest.fixture(scope="module")
def valid_shard_dir(vocab, tmp_path_factory):
    out = tmp_path_factory.mktemp("shards") / "valid"
    shard_corpus(str(ENWIKI_VALID), vocab, str(out), SEQ_LEN, max_lines=200)
    return out


@pytest.mark.slow
def test_pretraining_from_shards_resumes_like_an_uninterrupted_run(
        shard_dir, valid_shard_dir, tmp_path):
    """`training.pretrain --shards DIR`, stopped after step 2 and run again: the weights
    of a run never stopped. Under JAX, without TensorFlow (the GPU machine's), the shards'
    runs killed and resumed are tests/training/test_processes.py's (1 and 2 processes)."""
    straight, stopped = tmp_path / "straight", tmp_path / "stopped"
    run_pretraining(shard_dir, valid_shard_dir, straight)
    run_pretraining(shard_dir, valid_shard_dir, stopped, until_step=2)
    assert not (stopped / "preset").exists()
    # The backup is kept: the second call resumes after step 2 rather than starting over.
    assert json.loads((stopped / "backup" / "training_metadata.json").read_text())["step"] == 2
    run_pretraining(shard_dir, valid_shard_dir, stopped)

    steps, got = weights_of(stopped)
    want_steps, want = weights_of(straight)
    assert steps == want_steps == 6
    for a, b in zip(got, want):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)
    rows = (stopped / "metrics.csv").read_text().splitlines()[1:]
    assert [int(row.split(",")[0]) for row in rows] == [2, 4, 6]
    assert (stopped / "checkpoints" / "step_0000004" / "config.json").exists()
    # Step 0, the initialization: the same in both runs (one seed), not the trained model.
    from keras_tupe.models import TupeMaskedLM

    initial = [[np.asarray(w) for w in TupeMaskedLM.from_preset(
        str(run / "checkpoints" / "step_0000000")).weights] for run in (straight, stopped)]
    for a, b in zip(*initial, strict=True):
        np.testing.assert_array_equal(a, b)
    assert not all(np.array_equal(a, t) for a, t in zip(initial[0], want))
    assert (straight / "preset" / "config.json").exists()
    config = json.loads((straight / "run_config.json").read_text())
    assert config["vocabulary_sha256"] == json.loads(
        (shard_dir / shard_folders.MANIFEST).read_text())["vocabulary_sha256"]
