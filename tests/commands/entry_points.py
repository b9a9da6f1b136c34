"""What the tests of the commands share (a plain module, not a test module).

Each test runs an entry point's `main(argv)` in-process with `run_main` (a fresh process,
`run_entry_point`, only where the process start itself is under test), and asserts the exact
message and that no file or folder was made. `CTRL_C_AT_TENSORFLOW`, `NO_TENSORFLOW` and
`KERAS_AT_EXIT` are Python source a fresh process runs first; `_held_by_another_process`
holds an `--out` as a running command would; `write_vocabulary` and `FakeEncoder` stand in
for a user's vocabulary file and a loaded encoder.
"""

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI_VALID = DATA_DIR / "enwiki" / "valid.txt"


def run_main(main, argv, capsys):
    code = main(argv)
    captured = capsys.readouterr()
    return code, captured.out, captured.err


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


NO_TENSORFLOW = """
class NoTensorFlow:  # the checks of paths must come before TensorFlow's import
    def find_spec(self, name, path=None, target=None):
        if name == "tensorflow":
            raise SystemExit("tensorflow was imported")
sys.meta_path.insert(0, NoTensorFlow())
"""


KERAS_AT_EXIT = ("import atexit, os\n"  # after the entry point's exit: was Keras imported?
                 "atexit.register(lambda: sys.stdout.write(str('keras' in sys.modules)))\n"
                 # As in a user's shell (export asks Keras for the backend where it is unset).
                 "os.environ.pop('KERAS_BACKEND', None)\n")


def _held_by_another_process(out):
    """A process holding `out`'s lock (`keras_tupe_base.output_lock`), as a running command would."""
    from tests.base.test_output_lock import hold

    return hold(out, 120)


def write_vocabulary(path, tokens):
    path.write_text("".join(token + "\n" for token in tokens), encoding="utf-8")
    return path


class FakeEncoder:
    """What fine-tuning's preflight asks of the encoder before the vocabulary."""

    vocabulary_size = 9

    def check_sequence_length(self, length):
        pass
