"""Thin scripts: `python -m training.<name>` runs the command `keras_tupe_cli.<name>` (the
console script `keras-tupe-<name>`); the code lives in `keras_tupe_cli/`.

Importing the package imports `keras_tupe_cli`, which starts TensorFlow quietly and makes
Ctrl-C one line; it sets nothing that `keras_tupe` reads.
"""

import importlib
import sys

import keras_tupe_cli  # noqa: F401


def thin_script(module_name, command_name):
    """Runs the command as `__main__`; imported, the script *is* the command's module (what a
    test patches on `training.<name>`, the command uses)."""
    command = importlib.import_module(f"keras_tupe_cli.{command_name}")
    if module_name == "__main__":
        sys.exit(command.main())
    sys.modules[module_name] = command
