"""Thin scripts: `python -m training.<name>` runs the command `keras_tupe_cli.<name>` (the
console script `keras-tupe-<name>`); the code lives in `keras_tupe_cli/`.

Importing the package makes this process a command's: `import keras_tupe` then defers the
model family (and TensorFlow) to its first use, and `keras_tupe_cli` starts TensorFlow
quietly and makes Ctrl-C one line. The studies and the benchmarks import it first for that.
"""

import importlib
import sys

RUNS_KERAS_TUPE_COMMANDS = True  # read by keras_tupe/__init__.py, imported next

import keras_tupe_cli  # noqa: E402,F401


def thin_script(module_name, command_name):
    """Runs the command as `__main__`; imported, the script *is* the command's module (what a
    test patches on `training.<name>`, the command uses)."""
    command = importlib.import_module(f"keras_tupe_cli.{command_name}")
    if module_name == "__main__":
        sys.exit(command.main())
    sys.modules[module_name] = command
