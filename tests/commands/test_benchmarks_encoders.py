"""`python -m benchmarks.encoders`: a usage error exits 2, its parent process importing no
framework."""

import subprocess
import sys

import pytest

from tests.commands.entry_points import REPO


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
