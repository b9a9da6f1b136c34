"""A newcomer's mistakes at the entry points: one line naming the problem, exit 2, nothing left.

Each case runs the entry point's `main(argv)` in-process (a subprocess only where the
process start itself is under test) and asserts the exact message and that no file or
folder was made.

The inputs at the edges (issue 38), each with its test here (all fail on the code before):

- `finetune_glue --tasks sst2 sst2` (or a repeated rate or seed):
  `test_repeated_tasks_rates_and_seeds_run_once_and_count_once`
- a `--vocab` with a repeated token (pretrain, finetune_glue, export preprocessor):
  `test_a_vocabulary_with_a_repeated_token_is_named`
- `pretrain --vocab` lacking a special token:
  `test_pretrain_names_the_users_vocabulary_not_the_runs_copy`
- `--init` on an unfinished pre-training run:
  `test_init_on_an_unfinished_run_says_how_to_finish_or_use_a_checkpoint`
- `TextClassifier.predict([None])`, `predict([])`, token-id lists:
  `test_classifier_predict_says_strings_are_expected`
- SIGTERM during vocabulary training, or before fine-tuning's first result:
  `test_sigterm_during_vocabulary_training_leaves_no_run_folder`,
  `test_sigterm_before_the_first_finetuning_result_leaves_no_results_folder`
- Ctrl-C in the first seconds of an entry point:
  `test_ctrl_c_while_starting_is_one_line_and_exit_130`
- a usage error (answered before TensorFlow's import):
  `test_usage_errors_come_before_tensorflow_is_imported`,
  `test_the_parsers_choices_are_the_librarys`
- `training.predict` with many sentences, from a file or standard input:
  `test_predict_reads_a_file_or_stdin_in_batches_and_streams`,
  `test_predict_names_a_bad_input_file_line`
- a preset `config.json` with `num_heads: 0` (was a ZeroDivisionError):
  `test_a_preset_config_with_zero_heads_is_named`
- a corpus on one enormous line: `test_one_enormous_line_is_read_in_bounded_pieces`,
  `test_the_pieces_of_a_line_pack_as_the_whole_line` (slow); the peak memory: the retired
  `benchmarks.edge_memory` (docs/benchmarks.md, "Retired benchmarks")
"""

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from keras_tupe import data
from keras_tupe_cli import common as cli
from keras_tupe_cli import predict
from keras_tupe_cli import pretrain as pretrain_cli

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI_VALID = DATA_DIR / "enwiki" / "valid.txt"


def run_main(main, argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


# --- keras_tupe_cli.common--------------------------------------------------------------------


def test_user_errors_are_one_line_and_exit_2(capsys):
    def bad(argv):
        raise ValueError("--thing is wrong.\nand --other too.")

    code, _, err = run_main(lambda argv: cli.run(bad, argv), [], capsys)
    assert code == 2
    assert err == "error: --thing is wrong.\nerror: and --other too.\n"


def test_bugs_keep_their_traceback():
    def bug(argv):
        raise TypeError("a bug of ours")

    with pytest.raises(TypeError, match="a bug of ours"):
        cli.run(bug, [])


def test_traceback_flag_shows_user_errors_raw():
    def bad(argv):
        raise ValueError("wrong")

    with pytest.raises(ValueError, match="wrong"):
        cli.run(bad, ["--traceback"])


ENTRY_POINTS = ["training.pretrain", "training.finetune_glue", "training.finetune_squad",
                "training.export", "training.predict", "training.presets", "training.demo",
                "training.plot_metrics", "training.shard_corpus", "experiments.run",
                "benchmarks.encoders"]


def prog(module):
    """The command a user types: the console script, else the module."""
    name = module.removeprefix("training.")
    if name == module:  # no console script
        return f"python -m {module}"
    return f"keras-tupe-{name.replace('_', '-')}"


@pytest.mark.parametrize("module", ENTRY_POINTS)
def test_argument_errors_are_one_line_naming_the_flag_and_help(module, capsys, tmp_path,
                                                               monkeypatch):
    import importlib

    monkeypatch.chdir(tmp_path)
    entry = importlib.import_module(module)
    with pytest.raises(SystemExit) as exit:
        # argparse reports the unknown flag (after the missing required ones, if any).
        (getattr(entry, "parse_args", None) or entry.main)(["--no-such-flag", "x"])
    assert exit.value.code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "usage:" not in err
    assert err.endswith(f"(`{prog(module)} --help` lists the flags)\n")
    assert "--no-such-flag" in err or "required" in err or "invalid choice" in err
    assert list(tmp_path.iterdir()) == []


def test_a_wrong_value_names_the_flag_value_and_choices(capsys):
    with pytest.raises(SystemExit):
        pretrain_cli.parse_args(["--preset", "tupe_r_tiny", "--corpus", "c.txt", "--out", "o",
                                 "--precision", "float64"])
    assert capsys.readouterr().err == (
        "error: argument --precision: invalid choice: 'float64' (choose from 'float32', "
        "'mixed_bfloat16', 'mixed_float16') (`keras-tupe-pretrain --help` lists the "
        "flags)\n")


@pytest.mark.slow  # a fresh process importing TensorFlow: ~20 s on the 2-core CI machine
def test_entry_point_starts_quietly():
    """No cuInit probe, oneDNN notice or absl pre-init lines on a fresh `--help`."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES")}
    result = subprocess.run([sys.executable, "-m", "training.predict", "--help"], cwd=REPO,
                            env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0
    assert "--tf-logs" in result.stdout
    assert result.stderr == ""
    # TensorFlow is imported later, by whichever module needs it first: quietly too.
    script = ("import sys, keras_tupe_cli, keras_tupe\n"
              "import tensorflow as tf\n"
              "tf.constant(1.0) + 1\n"
              "assert 'exec_module' not in vars(tf.__spec__.loader)  # the hook left\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=120)
    assert (result.returncode, result.stderr) == (0, "")


def test_quiet_tensorflow_filters_the_jax_profiler_warning_once(monkeypatch):
    """Called again, the absl logger keeps one filter, which drops only that warning."""
    import logging

    from keras_tupe_cli import common

    absl = logging.getLogger("absl")
    monkeypatch.setattr(absl, "filters", [])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, os.environ.get(name, "3" if name.startswith("TF") else ""))
    common.quiet_tensorflow(verbose=False)
    common.quiet_tensorflow(verbose=False)
    assert len(absl.filters) == 1

    def record(message):
        return logging.LogRecord("absl", logging.WARNING, __file__, 1, message, None, None)

    assert not absl.filter(record("Failed to load jax profiler: no module named jax"))
    assert absl.filter(record("another warning"))


def test_the_quiet_import_hook_runs_the_loader_once_and_leaves_it_as_it_was(monkeypatch):
    """A loader with instance attributes runs patched once; one with __slots__ as it is."""
    import importlib.machinery
    import importlib.util

    from keras_tupe_cli import common

    calls = []

    class Loader:
        def exec_module(self, module):
            calls.append(module)

    class SlottedLoader:
        __slots__ = ()
        exec_module = Loader.exec_module

    for loader in (Loader(), SlottedLoader()):
        spec = importlib.machinery.ModuleSpec("tensorflow", loader)
        monkeypatch.setattr(importlib.util, "find_spec", lambda name: spec)
        assert common._QuietTensorFlowImport().find_spec("tensorflow") is spec
        assert ("exec_module" in getattr(loader, "__dict__", {})) == (type(loader) is Loader)
        loader.exec_module("tensorflow module")
        assert calls.pop() == "tensorflow module"
        assert "exec_module" not in getattr(loader, "__dict__", {})


# --- training.pretrain --------------------------------------------------------------------


def test_non_utf8_corpus_is_refused_naming_file_and_line(tmp_path, capsys):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("A first line.\nUne deuxième ligne.\n".encode("latin-1"))
    out = tmp_path / "run"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--steps", "10", "--verbose", "0"], capsys)
    assert code == 2
    assert err == (
        f"error: --corpus: Corpus file {corpus} is not UTF-8 text: line 2, column 10 has the "
        f"byte 0xe8. Convert it to UTF-8 first, e.g. `iconv -f latin1 -t utf-8 {corpus} > "
        f"{corpus}.utf8` for Latin-1 text.\n")
    assert not out.exists()


def test_every_flag_conflict_is_reported_at_once(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")
    out = tmp_path / "run"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out), "--steps", "300",
        "--eval-every", "7", "--seq-len", "512", "--batch-size", "0", "--verbose", "0"], capsys)
    assert code == 2
    assert err.splitlines() == [
        "error: --batch-size must be an int >= 1. Received: --batch-size 0",
        "error: --seq-len 512 is longer than the absolute position table of tupe_r_tiny "
        "(max_sequence_length=128). Use --seq-len <= 128, or a relative-only preset.",
        "error: --steps (300) must be a positive multiple of --eval-every (7): training runs, "
        "validates and backs up in blocks of --eval-every steps.",
    ]
    assert not out.exists()


@pytest.mark.parametrize("preset,steps,seq_len,eval_every", [
    ("tupe_r_tiny", 300, 128, 30),      # the tiny table; a tenth of the steps
    ("tupe_r_mini", 1_000_000, 512, 1000),  # the paper's values
    ("huang_m4_tiny", 7, 128, 1),
])
def test_defaults_fit_the_preset_and_the_steps(preset, steps, seq_len, eval_every):
    args = pretrain_cli.fit_to_preset(
        {"preset": preset, "steps": steps, "seq_len": None, "eval_every": None})
    assert (args["seq_len"], args["eval_every"]) == (seq_len, eval_every)


def test_effective_settings_are_printed_first(tmp_path, capsys):
    # A corpus the run itself refuses (a missing path is refused before the settings are
    # known, without TensorFlow: test_path_mistakes_are_reported_before_tensorflow_is_imported).
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "run"
    code, stdout, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(empty), "--out", str(out),
        "--steps", "300"], capsys)
    assert stdout == (
        "pretrain tupe_r_tiny: 300 steps of batch 256 x sequence 128, validation and backup "
        f"every 30 steps, peak LR 0.0001, float32, strategy default, XLA -> {out}\n")
    assert (code, err) == (
        2, f"error: --corpus: Corpus directory {empty} is empty: it holds no *.txt file.\n")
    assert not out.exists()


# --- training.predict ---------------------------------------------------------------------


def fake_export(folder, kind):
    """A version folder that looks like a keras_tupe export of `kind` (not loadable)."""
    (folder / "assets.extra").mkdir(parents=True)
    (folder / "variables").mkdir()
    (folder / "saved_model.pb").write_bytes(b"")
    (folder / "variables" / "variables.index").write_bytes(b"")
    (folder / "assets.extra" / "keras_tupe.json").write_text(json.dumps({"kind": kind}))
    return folder


def test_predict_takes_the_newest_version_of_a_model_folder(tmp_path):
    for version in (1, 3):
        fake_export(tmp_path / "sst2" / str(version), "classifier")
    (tmp_path / "sst2" / ".tmp-4-x").mkdir()  # a staging folder is not a version
    path, note = predict.resolve_saved_model(str(tmp_path / "sst2"))
    assert path == str(tmp_path / "sst2" / "3")
    assert note == f"(using the newest version of 2: {tmp_path / 'sst2' / '3'})"
    assert predict.resolve_saved_model(path) == (path, None)


def test_predict_skips_an_incomplete_newest_version_and_names_it(tmp_path):
    """A version folder holding only saved_model.pb (a copy cut short) is skipped with one
    note naming it and the version taken; passed itself, or alone, it is refused."""
    model = tmp_path / "sst2"
    for version in (1, 2, 3):
        fake_export(model / str(version), "classifier")
    shutil.rmtree(model / "3" / "variables")
    (model / "2" / "saved_model.pb").unlink()
    (model / "4").mkdir()  # an empty numbered folder: the start of a copy
    path, note = predict.resolve_saved_model(str(model))
    assert path == str(model / "1")
    assert note == ("(skipping the incomplete versions 4 (no saved_model.pb), 3 (no "
                    f"variables/variables.index), 2 (no saved_model.pb); using version 1: {path})")
    with pytest.raises(ValueError) as refused:
        predict.resolve_saved_model(str(model / "3"))
    assert str(refused.value) == (
        f"{model / '3'} is an incomplete SavedModel: it has no variables/variables.index (an "
        f"export or copy cut short). Export it again, or pass {model / '1'}.")
    shutil.rmtree(model / "1")
    with pytest.raises(ValueError, match=r"sst2 is not a SavedModel: it has only incomplete "
                                         r"version folders \(4, 3, 2: each lacks"):
        predict.resolve_saved_model(str(model))


@pytest.mark.parametrize("kind,message", [
    ("encoder", "is an encoder export (TF-Hub BERT encoder API: token ids in, vectors out), "
                "not a classifier; load it with keras_tupe.hub.load_encoder, or fine-tune it "
                "and pass the classifier export (keras-tupe-export classifier)."),
    ("preprocessor", "is a preprocessor export (strings in, token ids out), not a classifier; "
                     "pass a classifier export (keras-tupe-export classifier)."),
])
def test_predict_refuses_encoder_and_preprocessor_exports(tmp_path, capsys, kind, message):
    fake_export(tmp_path / kind / "1", kind)
    code, out, err = run_main(predict.main, [str(tmp_path / kind), "a film"], capsys)
    assert code == 2
    assert out == ""
    assert err == f"error: {tmp_path / kind / '1'} {message}\n"


def test_predict_names_a_missing_or_empty_folder(tmp_path, capsys):
    code, _, err = run_main(predict.main, [str(tmp_path / "nope"), "a film"], capsys)
    assert (code, err) == (2, (
        f"error: {tmp_path / 'nope'} does not exist. Pass a classifier export: a model folder "
        "such as saved_models/demo_tupe_r_tiny_sst2, or one of its version folders (.../1).\n"))
    code, _, err = run_main(predict.main, [str(tmp_path), "a film"], capsys)
    assert (code, err) == (2, (
        f"error: {tmp_path} is not a SavedModel: it has no saved_model.pb and no numbered "
        "version folder holding one. Pass a classifier export (keras-tupe-export classifier "
        "--out DIR writes DIR/<version>/).\n"))


# --- the vocabulary -----------------------------------------------------------------------


def test_space_separators_become_plain_spaces_before_pretokenizing():
    """The cause: keras-hub splits on " " but not on U+00A0 and kin, then NFKC makes them " "."""
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

    from keras_tupe.data.vocabulary import _plain_spaces

    text = ["a\u00a0b c\u2009d e\u3000f g\u202fh"]
    words = pretokenize(_plain_spaces(text), True, True, True, True)
    assert words.to_list() == [[b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]]
    # Spacing accents inside a word: NFKC gives a space and a combining mark, which
    # lowercasing strips after the split (the README walk's enwiki vocabulary had " ").
    accents = ["i\u00b4j x\u00a8y c\u00b8d e\u203ef"]
    words = pretokenize(_plain_spaces(accents), True, True, True, True)
    assert words.to_list() == [[b"i", b"j", b"x", b"y", b"c", b"d", b"e", b"f"]]
    words = pretokenize(_plain_spaces(accents, lowercase=False), False, False, True, True)
    assert not any(b" " in word for word in words.to_list()[0])


@pytest.mark.slow
@pytest.mark.skipif(not ENWIKI_VALID.exists(), reason="needs the enwiki data folder")
def test_vocabulary_has_no_whitespace_tokens(tmp_path):
    """Real text with no-break spaces (and other separators) gives no " " or "## " token."""
    odd = tmp_path / "odd.txt"
    odd.write_text("a\u00a0b c\u2009d e\u3000f g\u202fh 1\u00a0000 km i\u00b4j x\u00a8y\n" * 50,
                   encoding="utf-8")
    for lowercase in (True, False):
        vocabulary = tmp_path / f"vocab_{lowercase}.txt"
        data.train_vocabulary([str(odd), str(ENWIKI_VALID)], 300, vocabulary,
                              lowercase=lowercase, max_lines=300, verbose=False)
        tokens = vocabulary.read_text(encoding="utf-8").split("\n")[:-1]
        bad = [t for t in tokens if not t.removeprefix("##").strip()]
        assert bad == [], bad


# --- progress -----------------------------------------------------------------------------


def test_step_progress_counts_steps_not_epochs():
    import keras
    import numpy as np

    from keras_tupe.callbacks import StepProgress

    lines = []
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((12, 2), "float32")
    model.fit(x, x[:, :1], batch_size=2, epochs=2, verbose=0,
              callbacks=[StepProgress(12, 6, print_fn=lines.append)])
    assert lines[0] == ("starting at step 0/12: reading the first batches, building and "
                        "compiling the training step ...")
    assert [line.split(":")[0] for line in lines[1:]] == ["step 6/12", "step 12/12"]
    assert all("steps/s" in line and "loss" in line for line in lines[1:])


def test_step_progress_starts_a_resumed_run_at_its_restored_step():
    """A run resumed from a backup starts `fit` at a later epoch (BackupAndRestore sets it
    in its own on_train_begin, after the progress callback's): the line names that step."""
    import keras
    import numpy as np

    from keras_tupe.callbacks import StepProgress

    lines = []
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((12, 2), "float32")
    model.fit(x, x[:, :1], batch_size=2, epochs=2, initial_epoch=1, verbose=0,
              callbacks=[StepProgress(12, 6, print_fn=lines.append)])
    assert lines[0].startswith("starting at step 6/12: ")
    assert [line.split(":")[0] for line in lines[1:]] == ["step 12/12"]


# --- offline ------------------------------------------------------------------------------


def test_offline_tfds_corpus_fails_at_once_naming_the_local_alternative(tmp_path, monkeypatch,
                                                                        capsys):
    import socket
    import time

    def no_network(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
    out = tmp_path / "run"
    start = time.perf_counter()
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", "tfds:imdb_reviews:unsupervised",
        "--out", str(out), "--steps", "10", "--verbose", "0"], capsys)
    assert time.perf_counter() - start < 30
    assert code == 2
    assert err == (
        "error: tensorflow-datasets 'imdb_reviews' is not prepared locally and "
        "storage.googleapis.com cannot be reached to download it (OSError: Network is "
        "unreachable); nothing was downloaded. Pass a local corpus path instead, e.g. "
        "<data folder>/enwiki/train.txt.\n")
    assert not out.exists()
    assert not (tmp_path / "tfds").exists() or not any((tmp_path / "tfds").rglob("*.*"))


# --- nothing half-made --------------------------------------------------------------------


def pretrain_with_failing_vocabulary(tmp_path, monkeypatch, capsys, error, out):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(data, "train_vocabulary", fail)
    return run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--steps", "10", "--verbose", "0"], capsys)


@pytest.mark.parametrize("error,code,message", [
    (ValueError("the learner failed"), 2, "error: the learner failed\n"),
    (KeyboardInterrupt(), 130, "interrupted\n"),
])
def test_a_new_run_that_fails_before_its_first_backup_leaves_no_run_folder(
        tmp_path, monkeypatch, capsys, error, code, message):
    out = tmp_path / "runs" / "new"
    result = pretrain_with_failing_vocabulary(tmp_path, monkeypatch, capsys, error, out)
    assert (result[0], result[2]) == (code, message)
    assert not (tmp_path / "runs").exists()  # the parent it made too
    assert (tmp_path / "c.txt").exists()


def test_a_failed_run_never_removes_a_folder_that_was_there(tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()  # empty: a new run may use it
    code, _, err = pretrain_with_failing_vocabulary(
        tmp_path, monkeypatch, capsys, ValueError("the learner failed"), out)
    assert (code, err) == (2, "error: the learner failed\n")
    assert out.is_dir()


def test_a_failed_export_leaves_no_version_and_no_new_model_folder(tmp_path):
    from keras_tupe.export import write_version

    def fail(path):
        (Path(path) / "saved_model.pb").write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_version(str(tmp_path / "saved_models" / "sst2"), fail)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "sst2" / "1").mkdir(parents=True)  # a model folder with a version
    with pytest.raises(KeyboardInterrupt):
        write_version(str(tmp_path / "sst2"), fail)
    assert [p.name for p in (tmp_path / "sst2").iterdir()] == ["1"]


# --- training.export ----------------------------------------------------------------------


def test_export_says_what_it_does_and_the_next_command(tmp_path, monkeypatch, capsys):
    from keras_tupe_cli import export as export_cli

    out = tmp_path / "sst2"
    (tmp_path / "clf").mkdir()  # --init must exist (checked before TensorFlow's import)
    monkeypatch.setattr(export_cli, "export", lambda args: str(out / "1"))
    code, stdout, err = run_main(export_cli.main, [
        "classifier", "--init", str(tmp_path / "clf"), "--out", str(out)], capsys)
    predict = Path(sys.executable).parent / "keras-tupe-predict"
    predict = os.path.relpath(predict) if not os.path.relpath(predict).startswith("..") else predict
    assert (code, err) == (0, "")
    assert stdout == (f"Exporting the classifier to {out}/<version> ...\n"
                      f"Saved the classifier to {out / '1'}.\n"
                      f"Next: {predict} {out} \"a gripping film\"\n")


def test_a_scripts_system_exit_message_is_a_user_error(capsys):
    def bad(argv):
        raise SystemExit("results.json exists: pass --overwrite to replace it, or another --out.")

    code, _, err = run_main(lambda argv: cli.run(bad, argv), [], capsys)
    assert (code, err) == (2, "error: results.json exists: pass --overwrite to replace it, or "
                              "another --out.\n")
    with pytest.raises(SystemExit) as exit:  # argparse's exit(2) has already said why
        cli.run(lambda argv: sys.exit(2), [])
    assert exit.value.code == 2


# --- experiments.run and the benchmarks ---------------------------------------------------


def test_experiments_run_names_an_unknown_study_and_the_choices(tmp_path, capsys):
    from experiments import run as experiments_run
    from experiments.config import STUDIES_FILE, studies

    code, _, err = run_main(experiments_run.main, ["report", "--study", "nope"], capsys)
    assert (code, err) == (2, f"error: There is no study 'nope' in "
                              f"{os.path.relpath(STUDIES_FILE)}. Studies: "
                              f"{', '.join(sorted(studies()))}\n")
    code, _, err = run_main(experiments_run.main,
                            ["report", "--config", str(tmp_path / "x.json")], capsys)
    assert (code, err) == (2, f"error: Study config {tmp_path / 'x.json'} does not exist.\n")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("module,argv,message", [
    ("benchmarks.encoders", ["--batch-size", "0"], "error: --batch-size must be >= 1. "
     "Received: 0 (`python -m benchmarks.encoders --help` lists the flags)"),
])
def test_benchmark_entry_points_exit_2_and_the_encoders_parent_imports_no_framework(
        module, argv, message):
    """As `python -m <module>` runs it (its `__main__` block), in a fresh process."""
    script = ("import runpy, sys\n"
              f"sys.argv = ['{module}', *{argv!r}]\n"
              "try:\n"
              f"    runpy.run_module('{module}', run_name='__main__', alter_sys=True)\n"
              "except SystemExit as exit:\n"
              "    print(exit.code, 'tensorflow' in sys.modules, 'keras' in sys.modules)\n")
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert result.stderr.splitlines()[-1].endswith(message), result.stderr
    assert result.stdout == "2 False False\n"


@pytest.mark.parametrize("loader,what", [
    ("glue", "GLUE task 'sst2' (tensorflow-datasets 'glue/sst2')"),
    ("squad", "SQuAD v1.1 'validation' (tensorflow-datasets 'squad/v1.1')"),
])
def test_offline_glue_and_squad_fail_at_once_leaving_the_tfds_folder_empty(
        tmp_path, monkeypatch, loader, what):
    import socket

    from keras_tupe.data import glue, squad

    load = {"glue": lambda: glue.load_glue("sst2", "validation"),
            "squad": lambda: squad.load_squad("validation")}[loader]

    def no_network(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path))
    with pytest.raises(ConnectionError) as error:
        load()
    assert str(error.value).startswith(
        f"{what} is not prepared locally and storage.googleapis.com cannot be reached")
    assert list(tmp_path.rglob("*")) == []


# --- at the edges (issue 38) --------------------------------------------------------------


def write_vocabulary(path, tokens):
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return path


def test_repeated_tasks_rates_and_seeds_run_once_and_count_once(tmp_path, monkeypatch, capsys):
    """`--tasks sst2 sst2` ran every run twice and counted sst2 twice in the average."""
    from keras_tupe.finetuning import glue as protocol
    from keras_tupe.finetuning import summarize
    from keras_tupe_cli import finetune_glue

    runs = []

    def fake_run(config, splits):
        runs.append((config.task, config.learning_rate, config.seed))
        return {"task": config.task, "learning_rate": config.learning_rate,
                "seed": config.seed, "dev": {"validation": {"score": 0.5}}}

    # The checks and the splits they load (each once): none here.
    monkeypatch.setattr(protocol, "_preflight", lambda *args: {"sst2": {}})
    monkeypatch.setattr(protocol, "finetune_glue", fake_run)
    out = tmp_path / "glue"
    code, stdout, err = run_main(finetune_glue.main, [
        "--init", str(tmp_path / "run"), "--out", str(out), "--tasks", "sst2", "sst2",
        "--learning-rates", "2e-5", "2e-5", "3e-5", "--seeds", "0", "0", "0"], capsys)
    assert code == 0
    assert err.splitlines() == [
        "note: --tasks lists sst2 more than once (2 times); each runs once: --tasks sst2",
        "note: --learning-rates lists 2e-05 more than once (2 times); each runs once: "
        "--learning-rates 2e-05 3e-05",
        "note: --seeds lists 0 more than once (3 times); each runs once: --seeds 0",
    ]
    assert runs == [("sst2", 2e-5, 0), ("sst2", 3e-5, 0)]
    summary = (out / "summary.md").read_text().splitlines()
    assert [line for line in summary if line.startswith("| sst2")] == [
        "| sst2 | 50.00 | 2e-05 | 1 | 50.00 – 50.00 |"]
    assert stdout.count("sst2: ") == 1  # the table's line
    # A results.jsonl that holds a run twice (written by the old code) counts it once.
    row = {"task": "sst2", "learning_rate": 2e-5, "seed": 0,
           "dev": {"validation": {"score": 0.5}}}
    assert [(r["task"], r["seeds"]) for r in summarize([row, row], ["sst2", "sst2"])] == [
        ("sst2", 1)]


class FakeEncoder:
    """What fine-tuning's preflight asks of the encoder before the vocabulary."""

    vocabulary_size = 9

    def check_sequence_length(self, length):
        pass


def glue_refusal(init, tmp_path, capsys):
    """`finetune_glue --init INIT --tasks sst2 --out OUT`: (status, stderr); OUT not made."""
    from keras_tupe_cli import finetune_glue

    out = tmp_path / "glue"
    code, _, err = run_main(finetune_glue.main, [
        "--init", str(init), "--tasks", "sst2", "--out", str(out)], capsys)
    assert not out.exists()
    return code, err


@pytest.mark.parametrize("entry", ["pretrain", "finetune_glue", "export preprocessor"])
def test_a_vocabulary_with_a_repeated_token_is_named(entry, tmp_path, monkeypatch, capsys):
    """Was a 30-line tensorflow-text traceback naming neither the file nor the token."""
    from keras_tupe.finetuning import glue as protocol
    from keras_tupe_cli import export, finetune_glue

    vocab = write_vocabulary(tmp_path / "my vocab.txt",
                             data.SPECIAL_TOKENS + ["the", "film", "the", "a"])
    out = tmp_path / "out"
    if entry == "pretrain":
        corpus = tmp_path / "c.txt"
        corpus.write_text("the film\n")
        main, argv = pretrain_cli.main, [
            "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
            "--vocab", str(vocab), "--steps", "10", "--verbose", "0"]
    elif entry == "finetune_glue":
        monkeypatch.setattr(protocol, "load_backbone", lambda init: FakeEncoder())
        main, argv = finetune_glue.main, [
            "--init", str(tmp_path / "run"), "--tasks", "sst2", "--out", str(out),
            "--vocab", str(vocab)]
    else:
        main, argv = export.main, ["preprocessor", "--vocab", str(vocab), "--out", str(out)]
    code, _, err = run_main(main, argv, capsys)
    message = (f"Vocabulary file {vocab} has the token 'the' twice, on lines 6 and 8: a "
               "token's line is its id, so each token may appear once. Remove line 8 (and "
               "any other repeat).")
    assert code == 2
    assert err.splitlines()[-1] == f"error: {'--vocab: ' if entry == 'pretrain' else ''}{message}"
    assert not out.exists()


def test_finetune_squad_names_the_flags_of_a_window_without_room_before_any_work(capsys):
    """`--seq-len 64` with the default `--max-query-length` (64): was
    "`sequence_length` (64) must leave room for the question (max_query_length=64)", the
    Python names, after loading the encoder and the data. Now the first thing checked (the
    --init given does not exist), in flags, with the fix; the Python API keeps its names."""
    from keras_tupe.finetuning import finetune_squad
    from keras_tupe_base.settings import SquadConfig
    from keras_tupe.models import tupe_span_qa_preprocessor
    from keras_tupe_cli import finetune_squad as squad_cli

    code, out, err = run_main(squad_cli.main, ["--init", "nowhere", "--seq-len", "64"], capsys)
    assert (code, out) == (2, "")
    assert err == ("error: `--seq-len` 64 leaves no room for a context window after the "
                   "question (`--max-query-length` 64 tokens) and the 3 special tokens: pass "
                   "`--seq-len` of at least 68, or `--max-query-length` of at most 60.\n")
    with pytest.raises(ValueError, match=r"^`seq_len=` 64 leaves .* \(`max_query_length=` 64 "
                                         r"tokens\) .* pass `seq_len=` of at least 68, or "):
        finetune_squad(SquadConfig(init="nowhere", seq_len=64))
    with pytest.raises(ValueError, match=r"^`sequence_length=` 4 leaves .*: pass "
                                         r"`sequence_length=` of at least 6\.$"):
        tupe_span_qa_preprocessor.check_question_room(4, 2)


def test_finetune_glue_on_a_fairseq_preset_without_bpe_codes_says_convert_with_them(
        tmp_path, monkeypatch, capsys):
    """Was "No vocabulary for ...; pass the vocabulary the encoder was pre-trained with",
    naming no flag; a --vocab cannot serve, converting again with --bpe-codes does."""
    from keras_tupe.finetuning import default_vocabulary
    from keras_tupe.finetuning import glue as protocol

    monkeypatch.setattr(protocol, "load_backbone", lambda init: FakeEncoder())
    preset = tmp_path / "converted"  # what convert_fairseq writes without bpe_codes
    preset.mkdir()
    (preset / "config.json").write_text("{}")
    (preset / "metadata.json").write_text(json.dumps({"keras_tupe_conversion": {
        "kind": "fairseq", "source": "/ckpt/checkpoint_best.pt", "tokenizer": None}}))
    assert glue_refusal(preset, tmp_path, capsys) == (2, (
        f"error: {preset} is a fairseq checkpoint converted without BPE codes: the preset has "
        "no tokenizer, so it cannot read text, and no `--vocab` can stand in (its token ids "
        "are the fairseq dictionary's BPE pieces). Convert /ckpt/checkpoint_best.pt again, "
        "giving the converter the BPE codes it was pre-trained with (`--bpe-codes`), and pass "
        "that preset.\n"))
    with pytest.raises(ValueError, match=r"no `vocab=` can stand in .*\(`bpe_codes=`\)"):
        default_vocabulary(str(preset))
    (preset / "metadata.json").unlink()  # any other preset without a vocabulary
    with pytest.raises(FileNotFoundError, match=r"pre-trained with as `vocab=`\.$"):
        default_vocabulary(str(preset))


def test_pretrain_names_the_users_vocabulary_not_the_runs_copy(tmp_path, capsys):
    vocab = write_vocabulary(tmp_path / "mine.txt", ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "the"])
    corpus = tmp_path / "c.txt"
    corpus.write_text("the film\n")
    out = tmp_path / "run"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--vocab", str(vocab), "--steps", "10", "--verbose", "0"], capsys)
    assert (code, err) == (2, (
        f"error: --vocab: Vocabulary file {vocab} must start with the special tokens "
        "['[PAD]', '[CLS]', '[SEP]', '[UNK]', '[MASK]'] (ids 0-4), in that order; it lacks "
        "[MASK]. Received first lines: ['[PAD]', '[CLS]', '[SEP]', '[UNK]', 'the']\n"))
    assert not out.exists()


def test_init_on_an_unfinished_run_says_how_to_finish_or_use_a_checkpoint(tmp_path, capsys):
    """Was "No encoder at ...", which did not say the run is unfinished."""
    run = tmp_path / "run"
    (run / "backup").mkdir(parents=True)
    (run / "checkpoints").mkdir()
    (run / "run_config.json").write_text(json.dumps(
        {"config": {"steps": 1000, "eval_every": 100}}))
    (run / "backup" / "training_metadata.json").write_text(json.dumps({"epoch": 3}))
    checkpoint = run / "checkpoints" / "step_0000300"  # a preset folder
    checkpoint.mkdir()
    (checkpoint / "config.json").write_text("{}")
    (run / "checkpoints" / "step_0000400.partial").mkdir()  # a killed writer's: never whole
    (run / "vocab.txt").write_text("")
    assert glue_refusal(run, tmp_path, capsys) == (2, (
        f"error: {run} is an unfinished pre-training run (step 300 of 1,000 backed up): the "
        "encoder is saved only after the last step. Finish it by running the same "
        f"`training.pretrain` command again (it resumes; the command is in "
        f"{run / 'run_config.json'}), or pass one of its checkpoints as --init, e.g. "
        f"{checkpoint}.\n"))


@pytest.fixture(scope="module")
def string_classifier():
    from keras_tupe import (
        TupeBackbone,
        TupeTextClassifier,
        TupeTextClassifierPreprocessor,
        TupeTokenizer,
    )

    vocabulary = data.SPECIAL_TOKENS + ["a", "fine", "film"]
    backbone = TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=len(vocabulary))
    preprocessor = TupeTextClassifierPreprocessor(TupeTokenizer(vocabulary=vocabulary),
                                                  sequence_length=16)
    return TupeTextClassifier(backbone, 2, preprocessor=preprocessor)


HINT = ("To feed token ids instead, set the task's `preprocessor = None` and pass a dict of "
        "token_ids, padding_mask and segment_ids.")
EXAMPLE = ('e.g. predict(["a fine film", "a dull film"]); for sentence pairs a tuple of two '
           'such lists')


@pytest.mark.parametrize("x,message", [
    ([None], f"takes strings, but item 0 of the batch is None. {HINT}"),
    (["a film", None], f"takes strings, but item 1 of the batch is None. {HINT}"),
    ([], f"received an empty batch: pass at least one string ({EXAMPLE})."),
    ([[5, 6, 7], [5]], "takes strings, but item 0 of the batch is a list of 3 int (token "
                       f"ids?). {HINT}"),
    (None, f"takes a batch of strings ({EXAMPLE}). Received None."),
    ("a fine film", f"takes a batch of strings ({EXAMPLE}). Received a single string: wrap "
                    "it in a list."),
    ((["a fine film"], ["a", "film"]), ": the sentence-pair batches differ in length (1, 2): "
                                       "pass one second sentence for each first sentence."),
])
def test_classifier_predict_says_strings_are_expected(string_classifier, x, message):
    """Were TensorFlow's conversion errors ("`element` should not be empty", ...)."""
    with pytest.raises(ValueError) as error:
        string_classifier.predict(x, verbose=0)
    assert str(error.value) == "TupeTextClassifier.predict" + (
        message if message.startswith(":") else " " + message)


def test_sigterm_during_vocabulary_training_leaves_no_run_folder(tmp_path, monkeypatch,
                                                                 capsys):
    """SIGTERM (a job scheduler's stop) cleans up as Ctrl-C does: one line, status 143."""
    import signal
    import time

    def terminated_while_learning(*args, **kwargs):
        # Without a handler SIGTERM would end this test process: refuse to send it.
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this

    before = signal.getsignal(signal.SIGTERM)
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")
    monkeypatch.setattr(data, "train_vocabulary", terminated_while_learning)
    out = tmp_path / "runs" / "new"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--steps", "10", "--verbose", "0"], capsys)
    assert (code, err) == (143, "terminated\n")
    assert not (tmp_path / "runs").exists()
    assert signal.getsignal(signal.SIGTERM) == before  # put back


def test_sigterm_before_the_first_finetuning_result_leaves_no_results_folder(
        tmp_path, monkeypatch, capsys):
    import signal
    import time

    from keras_tupe.finetuning import glue as protocol
    from keras_tupe_cli import finetune_glue

    def terminated_while_finetuning(config, splits):
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)

    monkeypatch.setattr(protocol, "_preflight", lambda *args: {"sst2": {}})
    monkeypatch.setattr(protocol, "finetune_glue", terminated_while_finetuning)
    out = tmp_path / "glue" / "sst2"
    code, _, err = run_main(finetune_glue.main, [
        "--init", str(tmp_path / "run"), "--tasks", "sst2", "--out", str(out)], capsys)
    assert (code, err) == (143, "terminated\n")
    assert list(tmp_path.iterdir()) == []


def run_entry_point(module, argv, before="", cwd=None):
    """`python -m module argv` in a fresh process, after `before` (Python source) runs, in
    `cwd` or else a folder of its own holding only README.md and pyproject.toml (files that
    exist): relative paths such as `--out o` of tests on other workers never meet."""
    script = (f"import runpy, sys\nsys.path.insert(0, {str(REPO)!r})\n" + before +
              f"sys.argv = ['{module}', *{argv!r}]\n"
              f"runpy.run_module('{module}', run_name='__main__', alter_sys=True)\n")
    with tempfile.TemporaryDirectory() as own:
        cwd = Path(cwd or own)
        for name in ("README.md", "pyproject.toml"):
            if not (cwd / name).exists():
                shutil.copyfile(REPO / name, cwd / name)
        return subprocess.run([sys.executable, "-c", script], cwd=cwd, capture_output=True,
                              text=True, timeout=120)


CTRL_C_AT_TENSORFLOW = """
class CtrlC:  # the user presses Ctrl-C while TensorFlow is being imported
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            raise KeyboardInterrupt
sys.meta_path.insert(0, CtrlC())
"""


@pytest.mark.parametrize("module,argv", [
    # Any file that exists: --corpus is checked before TensorFlow's import, read after it.
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "o"]),
    ("training.finetune_glue", ["--init", "r", "--tasks", "sst2", "--out", "o"]),
    # Any file that exists: --vocab is checked before TensorFlow's import, read after it.
    ("training.export", ["preprocessor", "--vocab", "pyproject.toml", "--out", "o"]),
])
def test_ctrl_c_while_starting_is_one_line_and_exit_130(module, argv, tmp_path):
    """Was a 40-line KeyboardInterrupt traceback (TensorFlow was imported before `run`)."""
    result = run_entry_point(module, argv, CTRL_C_AT_TENSORFLOW, cwd=tmp_path)
    assert (result.returncode, result.stderr) == (130, "interrupted\n")
    assert not (tmp_path / "o").exists()
    # Before `run` (while the entry point's modules import): one line too; Python then
    # ends by SIGINT, status 130 as the shell reports it.
    script = "import keras_tupe_cli\nraise KeyboardInterrupt\n"
    result = subprocess.run([sys.executable, "-c", script], cwd=REPO, capture_output=True,
                            text=True, timeout=120)
    assert (result.returncode, result.stderr) in ((-2, "interrupted\n"), (130, "interrupted\n"))


@pytest.mark.parametrize("module,argv", [
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "c.txt", "--out", "o",
                           "--precision", "float64"]),
    ("training.finetune_glue", ["--init", "r", "--tasks", "sst2", "--out", "o",
                                "--seeds", "zero"]),
    ("training.finetune_squad", ["--init", "r", "--epochs", "two"]),
    ("training.export", ["encoder", "--out", "o"]),
    ("training.predict", ["saved_models/x"]),
    ("training.presets", ["--sizes", "huge"]),
    ("training.shard_corpus", ["--corpus", "c.txt"]),
    ("training.demo", ["--steps", "many"]),
    ("training.plot_metrics", []),
])
def test_usage_errors_come_before_tensorflow_is_imported(module, argv):
    """Was 4.5 s: `training/__init__.py` imported TensorFlow before the flags were read."""
    report = ("import atexit\n"  # after the entry point's exit: was TensorFlow imported?
              "atexit.register(lambda: sys.stdout.write(str('tensorflow' in sys.modules)))\n")
    result = run_entry_point(module, argv, report)
    assert result.returncode == 2
    assert result.stderr.startswith("error: ") and len(result.stderr.splitlines()) == 1
    assert result.stdout == "False"


def test_the_commands_defaults_are_their_settings_defaults(tmp_path):
    """A command's flags are its dataclass's fields, read before Keras: left out, each is the
    field's default (pre-training's sequence length and evaluation interval then fitted to
    the preset and the steps)."""
    import dataclasses

    from keras_tupe_base.settings import (PAPER_LEARNING_RATES, PAPER_SEEDS, FinetuneConfig,
                                          GlueProtocolConfig, PretrainConfig, ShardConfig,
                                          SquadConfig)
    from keras_tupe_cli import finetune_glue, finetune_squad, shard_corpus

    protocol, run = finetune_glue.parse_configs(["--init", "r", "--tasks", "sst2", "--out", "o"])
    assert run == FinetuneConfig(task="sst2", init="r")
    assert protocol == GlueProtocolConfig(tasks=["sst2"], out="o")
    assert (protocol.learning_rates, protocol.seeds) == (
        list(PAPER_LEARNING_RATES), list(PAPER_SEEDS))
    corpus, out = str(tmp_path / "c"), str(tmp_path / "o")  # the corpus must exist
    (tmp_path / "c").write_text("")
    config = pretrain_cli.parse_config(["--preset", "tupe_r_tiny", "--corpus", corpus,
                                        "--out", out])
    assert dataclasses.replace(config, seq_len=512, eval_every=1000) == PretrainConfig(
        preset="tupe_r_tiny", corpus=[corpus], out=out)
    assert (config.seq_len, config.eval_every) == (128, 1000)  # tiny's table; 1000 | 1M steps
    assert finetune_squad.parse_config(["--init", "r"]) == SquadConfig(init="r")
    assert shard_corpus.parse_config(["--corpus", corpus, "--out", out]) == ShardConfig(
        corpus=[corpus], out=out)


SAMPLES = {str: "x", int: "9", float: "0.5"}  # 9: at least every least value


def flag_cases():
    """(command, argv that parses, settings class, skipped fields) of every command whose
    flags are a dataclass's fields."""
    from keras_tupe_base.settings import (FinetuneConfig, GlueProtocolConfig, PretrainConfig,
                                          ShardConfig, SquadConfig)
    from keras_tupe_cli import finetune_glue

    glue = ["--init", "r", "--tasks", "sst2", "--out", "o"]
    return [("finetune_squad", ["--init", "r"], SquadConfig, ()),
            ("finetune_glue", glue, FinetuneConfig, finetune_glue.RUN_SKIP),
            ("finetune_glue", glue, GlueProtocolConfig, ()),
            ("pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "o"],
             PretrainConfig, ()),
            ("shard_corpus", ["--corpus", "README.md", "--out", "o"], ShardConfig, ())]


@pytest.mark.parametrize("case", range(5))
def test_every_setting_is_a_flag_of_its_type(case, monkeypatch):
    """Each field of the command's dataclass but those it sets otherwise (and those made
    `flag=False`) has its flag, `--seq-len` for `seq_len`, which parses to the field's type;
    a bool field is a switch turning its default around. A field without a flag, or a flag
    of another type than its field, fails here."""
    import dataclasses
    import importlib

    monkeypatch.chdir(REPO)  # README.md: a corpus that exists
    monkeypatch.setenv("KERAS_BACKEND", "jax")  # where --grid is allowed
    name, argv, settings_class, skip = flag_cases()[case]
    command = importlib.import_module(f"keras_tupe_cli.{name}")
    parse = getattr(command, "parse_configs", None) or command.parse_config

    def parsed(given):
        configs = parse([*argv, *given])
        configs = configs if isinstance(configs, tuple) else (configs,)
        config, = [c for c in configs if isinstance(c, settings_class)]
        return config

    flagged = [f for f in dataclasses.fields(settings_class)
               if f.metadata.get("flag") and f.name not in skip]
    assert len(flagged) >= 7
    for field in flagged:
        meta = field.metadata
        if field.type is bool:
            given, value = [meta["switch"]], not field.default
        elif field.name in ("corpus", "tasks", "preset", "init", "out"):
            continue  # given above
        else:
            flag = "--" + field.name.replace("_", "-")
            if meta["choices"]:
                text = str(meta["choices"][-1])
            elif field.name == "save_steps":
                text = "0,14"
            elif field.name.endswith("shards"):
                text = "docs"  # a folder that exists
            elif field.name in ("vocab", "valid_corpus"):
                text = "README.md"  # a file that exists
            else:
                text = SAMPLES[meta["parse"] or (str if field.type is list else field.type)]
            given = [flag, text]
            kind = meta["parse"] or (str if field.type is list else field.type)
            value = [0, 14] if field.name == "save_steps" else (
                [kind(text)] if field.type is list else kind(text))
            if name == "pretrain" and field.name in ("steps", "eval_every"):
                given += ["--steps", "9", "--eval-every", "9"]  # a multiple of each other
            if name == "pretrain" and field.name == "steps_per_execution":
                given += ["--eval-every", "18", "--steps", "18000"]  # 9 divides 18
            if field.name == "selection_seed":
                given += ["--seeds", "9"]
            if field.name == "edge_learning_rates":
                given += ["--selection-seed", "0"]
            if name == "finetune_glue" and field.name in ("precision", "steps_per_dispatch"):
                given += ["--grid"]
        config = parsed(given)
        assert getattr(config, field.name) == value, field.name
        if field.type is not list:
            assert type(getattr(config, field.name)) is field.type, field.name


class FakeClassifier:
    """What `training.predict` asks of a loaded classifier SavedModel; records its calls."""

    def __init__(self, stdout):
        self.stdout, self.calls = stdout, []
        self.signatures = {"serving_default": self}
        self.structured_input_signature = ((), {"sentence": None})

    def __call__(self, sentence):
        import tensorflow as tf

        # (batch size, answers already printed): the lines of a batch come out before the
        # next batch is read.
        self.calls.append((int(sentence.shape[0]), self.stdout.getvalue().count("\n")))
        lengths = tf.strings.length(sentence)
        positive = tf.cast(lengths % 2, tf.float32)
        return {"probabilities": tf.stack([1 - positive, positive], axis=1),
                "label": tf.where(lengths % 2 == 1, b"positive", b"negative")}


def test_predict_and_plot_metrics_refuse_in_one_line(tmp_path, monkeypatch, capsys):
    """--pairs for a one-sentence model; a plot over an existing file without --overwrite."""
    import tensorflow as tf

    from keras_tupe_cli import plot_metrics

    fake_export(tmp_path / "sst2" / "1", "classifier")
    monkeypatch.setattr(tf.saved_model, "load", lambda path: FakeClassifier(None))
    version = str(tmp_path / "sst2" / "1")
    code, out, err = run_main(predict.main, [version, "a", "b", "--pairs"], capsys)
    assert (code, out, err) == (2, "", "error: this model takes ['sentence']; drop --pairs.\n")
    (tmp_path / "loss.png").write_bytes(b"png")
    code, _, err = run_main(plot_metrics.main, [str(tmp_path), "--out",
                                                str(tmp_path / "loss.png")], capsys)
    assert (code, err) == (2, f"error: {tmp_path / 'loss.png'} exists; pass --overwrite to "
                              "replace it\n")
    assert (tmp_path / "loss.png").read_bytes() == b"png"


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_predict_reads_a_file_or_stdin_in_batches_and_streams(source, tmp_path, monkeypatch):
    """Was: sentences only as arguments, all in one call (3.7 GB for 10,000)."""
    import io

    import tensorflow as tf

    fake_export(tmp_path / "sst2" / "1", "classifier")
    stdout = io.StringIO()
    model = FakeClassifier(stdout)
    monkeypatch.setattr(tf.saved_model, "load", lambda path: model)
    monkeypatch.setattr(sys, "stdout", stdout)
    lines = ["a film", "dull", "", "une œuvre", "odd one"]
    if source == "file":
        (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        where = str(tmp_path / "in.txt")
    else:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
            ("\n".join(lines) + "\n").encode()), encoding="utf-8"))
        where = "-"
    code = predict.main([str(tmp_path / "sst2"), "first", "second", "--file", where,
                         "--batch-size", "3", "--json"])
    assert code == 0
    assert model.calls == [(3, 0), (3, 3), (1, 6)]
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a["sentence"] for a in answers] == ["first", "second", *lines]
    # The fake's label: an odd number of bytes (œ is two) is positive.
    assert [a["label"] for a in answers] == ["positive", "negative", "negative", "negative",
                                             "negative", "negative", "positive"]
    assert answers[0]["probabilities"] == [0.0, 1.0]


def test_predict_names_a_bad_input_file_line(tmp_path, monkeypatch, capsys):
    import tensorflow as tf

    fake_export(tmp_path / "sst2" / "1", "classifier")
    monkeypatch.setattr(tf.saved_model, "load", lambda path: FakeClassifier(io_stub()))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("fine\ntrès bien\n".encode("latin-1"))
    code, out, err = run_main(predict.main, [str(tmp_path / "sst2" / "1"), "--file", str(bad),
                                             "--batch-size", "1"], capsys)
    assert code == 2
    # The first line was answered before line 2 was read.
    assert out == "negative   (probabilities 1.000 0.000)  'fine'\n"
    assert err == (f"error: --file {bad}: line 2 is not UTF-8 text (byte 0xe8 at column 3). "
                   "Convert it first, e.g. `iconv -f latin1 -t utf-8`.\n")
    with pytest.raises(SystemExit) as exit:  # a usage error, as argparse's own
        predict.main([str(tmp_path / "sst2")])
    code, err = exit.value.code, capsys.readouterr().err
    assert (code, err) == (2, "error: give sentences as arguments, or --file FILE (- for "
                              "standard input) (`keras-tupe-predict --help` lists "
                              "the flags)\n")


def io_stub():
    import io

    return io.StringIO()


def one_line_corpus(tmp_path):
    """A corpus whose first document is one line of 1,500 words (é: two-byte characters)."""
    words = [f"w{i % 97}{'é' * (i % 3)}" for i in range(1500)]
    text = tmp_path / "one_line.txt"
    text.write_text(" ".join(words) + "\n\nnext document\n", encoding="utf-8")
    return text, words


def corpus_stream(text, monkeypatch, piece_bytes, **kwargs):
    from keras_tupe.data import corpus

    monkeypatch.setattr(corpus, "_PIECE_BYTES", piece_bytes)
    return [line for batch in corpus.line_batches(str(text), **kwargs).as_numpy_iterator()
            for line in batch.tolist()]


def test_one_enormous_line_is_read_in_bounded_pieces(tmp_path, monkeypatch):
    """A corpus on one 50 MB line took 4.26 GB to pack and gave no progress figure.

    Pieces of at most ~2 x `_PIECE_BYTES`, cut after a space (the same words); a line's
    pieces count as one line; the progress callback counts lines and bytes as read.
    """
    from keras_tupe.data import vocabulary

    text, words = one_line_corpus(tmp_path)
    counted = []
    pieces = corpus_stream(text, monkeypatch, 64,
                           progress=lambda lines, size: counted.append((lines, size)))
    assert len(pieces) > 100 and max(len(piece) for piece in pieces) <= 2 * 64
    assert b" ".join(pieces[:-2]).split() == " ".join(words).encode().split()
    assert pieces[-2:] == [b"", b"next document"]  # the blank line still ends the document
    assert tuple(map(sum, zip(*counted))) == (3, text.stat().st_size - 3)  # all but "\n"s
    assert corpus_stream(text, monkeypatch, 64, max_lines=1) == pieces[:-2]
    figure = vocabulary._Progress(max_lines=None, total_bytes=10_000_000, print_fn=print)
    figure(0, 5_000_000)
    assert figure.line(10.0) == ("  vocabulary: 0 lines, 5.0 MB read (50%), about 10s left, "
                                 "0.5 MB/s")


@pytest.mark.slow  # two packing pipelines and the tokenizer's first use: ~11 s here
def test_the_pieces_of_a_line_pack_as_the_whole_line(tmp_path, monkeypatch):
    from keras_tupe.data import corpus

    text, words = one_line_corpus(tmp_path)
    vocab = write_vocabulary(tmp_path / "vocab.txt", data.SPECIAL_TOKENS + sorted(set(words)))
    tokenizer = data.load_tokenizer(vocab)

    def packed(piece_bytes):
        monkeypatch.setattr(corpus, "_PIECE_BYTES", piece_bytes)
        return [ids.tolist() for ids in
                data.packed_sequences(str(text), tokenizer, 16).as_numpy_iterator()]

    assert packed(64) == packed(1 << 20)


def test_a_preset_config_with_zero_heads_is_named(tmp_path):
    import keras_hub

    from keras_tupe import TupeBackbone

    folder = tmp_path / "preset"
    TupeBackbone.from_preset("bert_a_tiny").save_to_preset(str(folder))
    config = json.loads((folder / "config.json").read_text())
    config["config"]["num_heads"] = 0
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"`num_heads` must be a positive int. Received: num_heads=0"):
        keras_hub.models.Backbone.from_preset(str(folder))


# --- issue 49: one writer per --out, corrupt inputs, messages in the interface's words ----


def _held_by_another_process(out):
    """A process holding `out`'s lock (`keras_tupe_base.output_lock`), as a running command would."""
    from tests.base.test_output_lock import hold

    return hold(out, 120)


@pytest.mark.parametrize("module, argv", [
    ("export", ["encoder", "--init", "{tmp}", "--out", "{out}"]),
    ("convert", ["fairseq", "{tmp}/model.pt", "--out", "{out}"]),
    ("shard_corpus", ["--corpus", "{tmp}/model.pt", "--vocab", "{tmp}/model.pt",
                      "--out", "{out}"]),
])
def test_a_second_command_on_a_held_out_is_refused_naming_the_holder(
        tmp_path, capsys, module, argv):
    import importlib

    (tmp_path / "model.pt").write_text("x")
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path, out=out) for a in argv]
    holder = _held_by_another_process(out)
    try:
        main = importlib.import_module(f"training.{module}").main
        code, _, err = run_main(main, argv, capsys)
    finally:
        holder.kill()
        holder.wait()
    assert code == 2 and err.count("\n") == 1, err
    assert err.startswith(f"error: --out {out} is being written by process {holder.pid} on "), err
    assert not out.exists()


KERAS_AT_EXIT = ("import atexit, os\n"  # after the entry point's exit: was Keras imported?
                 "atexit.register(lambda: sys.stdout.write(str('keras' in sys.modules)))\n"
                 # As in a user's shell (export asks Keras for the backend where it is unset).
                 "os.environ.pop('KERAS_BACKEND', None)\n")


@pytest.mark.parametrize("module, argv", [
    ("pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "{out}"]),
    ("finetune_glue", ["--init", "{tmp}", "--tasks", "sst2", "--out", "{out}"]),
    ("finetune_squad", ["--init", "{tmp}", "--out", "{out}"]),
    ("export", ["encoder", "--init", "{tmp}", "--out", "{out}"]),
    ("convert", ["huggingface", "{tmp}", "--out", "{out}"]),
    ("shard_corpus", ["--corpus", "README.md", "--out", "{out}"]),
])
def test_a_held_out_is_refused_before_keras_is_imported(tmp_path, module, argv):
    """Issue 59, item 5: was refused only after Keras's import (5.6 s on an idle machine,
    35 s on a busy one; finetune-glue after loading the encoder and the data, finetune-squad
    after the whole training)."""
    out = tmp_path / "out"
    argv = [a.format(tmp=tmp_path, out=out) for a in argv]
    holder = _held_by_another_process(out)
    try:
        result = run_entry_point(f"training.{module}", argv, KERAS_AT_EXIT)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith(
        f"error: --out {out} is being written by process {holder.pid} on "), result.stderr
    assert result.stdout == "False"  # Keras (and with it TensorFlow or JAX) never imported


def test_convert_without_dict_txt_names_the_flag_not_the_argument(tmp_path, capsys):
    from keras_tupe_cli import convert as convert_cli

    (tmp_path / "model.pt").write_bytes(b"x")
    code, _, err = run_main(convert_cli.main, [
        "fairseq", str(tmp_path / "model.pt"), "--out", str(tmp_path / "out")], capsys)
    assert code == 2 and "pass it as `--dictionary`" in err and "dictionary=" not in err, err


def test_export_under_another_backend_says_it_needs_tensorflow(tmp_path, monkeypatch, capsys):
    from keras_tupe_cli import export as export_cli

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.setattr(export_cli, "export", lambda args: pytest.fail("exported under JAX"))
    argv = ["encoder", "--init", str(tmp_path), "--out", str(tmp_path / "enc")]
    code, _, err = run_main(export_cli.main, argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "needs the TensorFlow backend, not jax" in err
    assert f"KERAS_BACKEND=tensorflow keras-tupe-export {' '.join(argv)}" in err


NO_TENSORFLOW = """
class NoTensorFlow:  # the checks of paths must come before TensorFlow's import
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            raise SystemExit("tensorflow was imported")
sys.meta_path.insert(0, NoTensorFlow())
"""


@pytest.mark.parametrize("module, argv, message", [
    ("training.convert", ["fairseq", "missing.pt", "--out", "o"], "SOURCE missing.pt does not exist"),
    ("training.convert", ["huggingface", ".", "--out", "README.md"],
     "--out README.md already exists and is not an empty folder"),
    ("training.export", ["encoder", "--init", "missing_run", "--out", "o"],
     "--init missing_run does not exist"),
    ("training.shard_corpus", ["--corpus", "missing.txt", "--out", "o"],
     "--corpus missing.txt does not exist"),
    ("training.shard_corpus", ["--corpus", "README.md", "--vocab", "missing.txt", "--out", "o"],
     "--vocab missing.txt does not exist"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "missing.txt", "--out", "o"],
     "--corpus missing.txt does not exist"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out", "o",
                           "--vocab", "missing.txt"], "--vocab missing.txt does not exist"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--corpus", "README.md", "--out",
                           "README.md"], "--out README.md is a file"),
    ("training.finetune_glue", ["--init", "r", "--tasks", "rte", "--out", "README.md"],
     "--out README.md is a file; keras-tupe-finetune-glue writes a results folder there"),
    ("training.pretrain", ["--preset", "tupe_r_tiny", "--shards", "README.md", "--out", "o"],
     "--shards README.md is not a folder. Make it with `keras-tupe-shard-corpus"),
])
def test_path_mistakes_are_reported_before_tensorflow_is_imported(module, argv, message):
    result = run_entry_point(module, argv, NO_TENSORFLOW)
    assert result.returncode == 2 and result.stderr.startswith(f"error: {message}"), result.stderr
    assert result.stderr.count("\n") == 1


def test_a_truncated_preset_weights_file_is_named(tmp_path, capsys):
    from keras_tupe.models import TupeBackbone
    from keras_tupe_cli import export as export_cli

    preset = tmp_path / "preset"
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=64).save_to_preset(str(preset))
    weights = preset / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"{weights} is truncated or corrupt"):
        TupeBackbone.from_preset(str(preset))
    code, _, err = run_main(export_cli.main, [
        "encoder", "--init", str(preset), "--out", str(tmp_path / "enc")], capsys)
    assert code == 2 and err.startswith(f"error: {weights} is truncated or corrupt"), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("damage", ["truncated", "empty", "corrupt member"])
def test_a_damaged_keras_file_is_named(tmp_path, capsys, damage):
    import zipfile

    from keras_tupe.models import TupeBackbone
    from keras_tupe.models.saving import load_saved_model
    from keras_tupe_cli import export as export_cli

    path = tmp_path / "encoder.keras"
    TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=64).save(str(path))
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a whole archive whose weights member is flipped: its CRC no longer matches
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("model.weights.h5")
        offset = info.header_offset + 30 + len(info.filename) + len(info.extra) + 100
        path.write_bytes(data[:offset] + bytes(b ^ 0xFF for b in data[offset:offset + 64])
                         + data[offset + 64:])
    # Keras itself says "File not found" for a file that is there.
    with pytest.raises(ValueError, match=f"{path} is not a readable .keras file"):
        load_saved_model(str(path))
    code, _, err = run_main(export_cli.main, [
        "encoder", "--init", str(path), "--out", str(tmp_path / "enc")], capsys)
    # --init takes a preset folder or a run folder holding one: a .keras file is refused.
    assert code == 2 and err.startswith(f"error: No encoder at {path} (is a file, not a "
                                        "preset folder): give a preset folder"), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("code", ["ENOSPC", "EROFS", "EACCES", "EPERM"])
def test_a_write_error_of_a_forbidden_or_full_folder_is_one_line(code, capsys):
    import errno

    from keras_tupe_base.staging import WriteError

    def writes(argv):  # what `staging.staged` raises for a folder it may not write
        raise WriteError("/runs/x", "the reason", getattr(errno, code))

    assert run_main(lambda argv: cli.run(writes, argv), [], capsys)[1:] == (
        "", "error: could not write /runs/x: the reason\n")


# --- issue 59: refusals in the user's terms -----------------------------------------------


@pytest.fixture(params=["read-only", "immutable", "a file"])
def unwritable(request, tmp_path):
    """(kind, folder, why): a place this process cannot create files in, as a user meets one.

    Read-only: a tmpfs mounted read-only where this process may mount (root), else a
    folder without write permission; immutable: `chattr +i` (root, a file system that has
    the flag); a file: `--out` under a regular file. Skipped where the machine cannot make it.
    """
    kind, folder = request.param, tmp_path / "place"
    if kind == "a file":
        folder.write_text("a regular file\n")
        yield kind, folder, f"{folder} is a file, not a folder"
        return
    folder.mkdir()
    if kind == "read-only" and os.geteuid() != 0:
        folder.chmod(0o555)
        yield kind, folder, f"this process cannot create files in {folder} (Permission denied)"
        folder.chmod(0o755)
        return
    make, undo, why = {
        "read-only": (["mount", "-t", "tmpfs", "-o", "ro,size=64k", "tmpfs", str(folder)],
                      ["umount", str(folder)], "Read-only file system"),
        "immutable": (["chattr", "+i", str(folder)], ["chattr", "-i", str(folder)],
                      "Operation not permitted"),
    }[kind]
    if os.geteuid() != 0 or subprocess.run(make, capture_output=True).returncode != 0:
        pytest.skip(f"this machine cannot make a {kind} folder here")
    try:
        yield kind, folder, f"this process cannot create files in {folder} ({why})"
    finally:
        subprocess.run(undo, check=True)


@pytest.fixture(scope="module")
def tiny_preset(tmp_path_factory):
    """A preset folder an encoder export reads (the old code got as far as its writing)."""
    from keras_tupe.models import TupeBackbone

    folder = tmp_path_factory.mktemp("encoder") / "preset"
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=64).save_to_preset(str(folder))
    return folder


def unwritable_out_argv(command, tmp_path, out, request, monkeypatch):
    """The command line of `command` writing `out`, everything else fine up to the writing."""
    if command == "export":
        preset = request.getfixturevalue("tiny_preset")
        return ["encoder", "--init", str(preset), "--out", str(out)]
    if command == "convert":
        return ["huggingface", str(tmp_path), "--out", str(out)]
    if command == "pretrain":
        corpus = tmp_path / "c.txt"
        corpus.write_text("some text\n")
        return ["--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
                "--steps", "10", "--verbose", "0"]
    from keras_tupe.finetuning import glue as protocol

    monkeypatch.setattr(protocol, "_preflight", lambda *args: None)  # an encoder and data
    return ["--init", str(tmp_path), "--tasks", "sst2", "--out", str(out)]


@pytest.mark.parametrize("command", ["export", "convert", "pretrain", "finetune_glue"])
@pytest.mark.parametrize("where", ["inside", "itself"])
def test_an_out_that_cannot_be_written_is_named_as_given_with_the_fix(
        command, where, unwritable, tmp_path, request, monkeypatch, capsys):
    """Was `Read-only file system: .../.out.lock` (the hidden lock file), `Operation not
    permitted: ...` or `Not a directory: ...`, or for an unwritable --out itself the export's
    staging folder `.../1.partial`: never --out, never the fix."""
    import importlib

    kind, folder, why = unwritable
    if where == "itself" and kind == "a file":
        pytest.skip("an --out that is a file is refused by each command as such")
    out = folder / "out" if where == "inside" else folder
    if command == "convert" and where == "itself":
        pytest.skip("convert takes an empty --out folder only; a read-only one stays empty")
    main = importlib.import_module(f"training.{command}").main
    argv = unwritable_out_argv(command, tmp_path, out, request, monkeypatch)
    code, _, err = run_main(main, argv, capsys)
    assert code == 2, err
    assert err.splitlines()[-1] == (
        f"error: --out {out} cannot be written: {why}. Choose another --out, in a folder this "
        "process can write."), err
    assert err.count("error:") == 1 and ".lock" not in err and ".partial" not in err
    assert not (folder.is_dir() and where == "inside" and out.exists())
    assert not list(tmp_path.glob("*.lock")) and not list(tmp_path.glob(".*.lock"))


def test_the_python_api_names_the_argument_of_an_out_that_cannot_be_written(tmp_path):
    from keras_tupe.convert import convert
    from keras_tupe_base.output_lock import OutputNotWritableError
    from keras_tupe.pretraining import pretrain
    from keras_tupe_base.settings import PretrainConfig

    (tmp_path / "file").write_text("x")
    out = tmp_path / "file" / "preset"
    with pytest.raises(OutputNotWritableError) as refused:
        convert("huggingface", str(tmp_path), str(out))
    assert str(refused.value) == (
        f"`out=` {out} cannot be written: {tmp_path / 'file'} is a file, not a folder. Choose "
        "another `out=`, in a folder this process can write.")
    # Was "--out ...", a flag the Python caller never gave.
    with pytest.raises(OutputNotWritableError, match=r"^`out=` .* Choose another `out=`, "):
        pretrain(PretrainConfig(preset="tupe_r_tiny", corpus=[str(tmp_path / "file")],
                                out=str(out)))


def test_warnings_and_library_notices_reach_the_user_as_one_plain_line(capsys):
    """Issue 67: `keras_tupe_base/jsonl.py:34: UserWarning: ...` with its source line, and
    `WARNING:keras_tupe.models.span_windows:featurize: ...`, both in Python's words."""
    import logging
    import warnings

    def body(argv):
        warnings.warn("results.jsonl line 3 is cut short\n  (skipped)")
        logging.getLogger("keras_tupe.models.span_windows").warning("SQuAD: moved %d", 4)
        return 0

    assert cli.run(body, []) == 0
    assert capsys.readouterr().err == ("warning: results.jsonl line 3 is cut short (skipped)\n"
                                       "warning: SQuAD: moved 4\n")
    assert logging.getLogger("keras_tupe").handlers == []  # as before, once the command ends


@pytest.mark.parametrize("value", ["0", "-3"])
@pytest.mark.parametrize("command", ["finetune_glue", "finetune_squad"])
def test_steps_per_execution_below_one_is_refused_as_the_flag(command, value, capsys, tmp_path):
    """Issue 67: 0 reached Keras (`range() arg 3 must not be zero`), -3 too (`Cannot get
    result() since the metric has not yet been built.`)."""
    import importlib

    main = importlib.import_module(f"training.{command}").main
    argv = ["--init", "run", "--out", str(tmp_path / "out"), f"--steps-per-execution={value}"]
    argv += ["--tasks", "rte"] if command == "finetune_glue" else []
    assert main(argv) == 2
    assert capsys.readouterr().err == (
        f"error: --steps-per-execution must be an int >= 1. Received: --steps-per-execution "
        f"{value}\n")
    assert not (tmp_path / "out").exists()
    assert os.listdir(tmp_path) == []
