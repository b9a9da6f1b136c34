"""`keras_tupe_base.command_line`, what every command (and the studies' and benchmarks'
programs) runs in: a user's mistake is one line and exit 2 (a script's `SystemExit` message and
a write error too), a bug keeps its traceback (and `--traceback` shows a user error raw),
warnings and library notices are plain `warning:` lines, and TensorFlow starts quietly.
"""

import os
import subprocess
import sys

import pytest

from keras_tupe_base import command_line as cli
from tests.commands.entry_points import REPO, run_main


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

    absl = logging.getLogger("absl")
    monkeypatch.setattr(absl, "filters", [])
    monkeypatch.setattr(sys, "meta_path", list(sys.meta_path))
    for name in ("TF_CPP_MIN_LOG_LEVEL", "CUDA_VISIBLE_DEVICES"):
        monkeypatch.setenv(name, os.environ.get(name, "3" if name.startswith("TF") else ""))
    cli.quiet_tensorflow(verbose=False)
    cli.quiet_tensorflow(verbose=False)
    assert len(absl.filters) == 1

    def record(message):
        return logging.LogRecord("absl", logging.WARNING, __file__, 1, message, None, None)

    assert not absl.filter(record("Failed to load jax profiler: no module named jax"))
    assert absl.filter(record("another warning"))


def test_the_quiet_import_hook_runs_the_loader_once_and_leaves_it_as_it_was(monkeypatch):
    """A loader with instance attributes runs patched once; one with __slots__ as it is."""
    import importlib.machinery
    import importlib.util

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
        assert cli._QuietTensorFlowImport().find_spec("tensorflow") is spec
        assert ("exec_module" in getattr(loader, "__dict__", {})) == (type(loader) is Loader)
        loader.exec_module("tensorflow module")
        assert calls.pop() == "tensorflow module"
        assert "exec_module" not in getattr(loader, "__dict__", {})


def test_a_scripts_system_exit_message_is_a_user_error(capsys):
    def bad(argv):
        raise SystemExit("results.json exists: pass --overwrite to replace it, or another --out.")

    code, _, err = run_main(lambda argv: cli.run(bad, argv), [], capsys)
    assert (code, err) == (2, "error: results.json exists: pass --overwrite to replace it, or "
                              "another --out.\n")
    with pytest.raises(SystemExit) as exit:  # argparse's exit(2) has already said why
        cli.run(lambda argv: sys.exit(2), [])
    assert exit.value.code == 2


@pytest.mark.parametrize("code", ["ENOSPC", "EROFS", "EACCES", "EPERM"])
def test_a_write_error_of_a_forbidden_or_full_folder_is_one_line(code, capsys):
    import errno

    from keras_tupe_base.staging import WriteError

    def writes(argv):  # what `staging.staged` raises for a folder it may not write
        raise WriteError("/runs/x", "the reason", getattr(errno, code))

    assert run_main(lambda argv: cli.run(writes, argv), [], capsys)[1:] == (
        "", "error: could not write /runs/x: the reason\n")


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
