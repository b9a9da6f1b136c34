"""Put this folder on PYTHONPATH and `import tensorflow` (or tensorflow_text) fails in the
process and in every Python process it starts: the lent GPU machine has no TensorFlow.
With LENT_MACHINE=1, so does every other package that machine lacks: a module of an
installed distribution that is neither in its image (experiments/stage/gpu_image.txt) nor
among the wheels a stage carries (experiments/stage/stages.json), as there (an optional import then
takes its fallback, a needed one fails)."""

import importlib.abc
import json
import os
import sys

for _name in ("tensorflow", "tensorflow_text"):
    sys.modules[_name] = None  # the import system raises ImportError for a None entry


class _LentMachine(importlib.abc.MetaPathFinder):
    """Refuses the top-level modules of the distributions the lent machine lacks."""

    def __init__(self):
        window = os.path.join(os.path.dirname(__file__), "..", "..", "experiments", "stage")
        with open(os.path.join(window, "gpu_image.txt")) as f:
            there = [line.split("==")[0] for line in f if line.strip() and line[0] != "#"]
        with open(os.path.join(window, "stages.json")) as f:
            there += json.load(f)["wheels"] + ["keras-tupe"]  # and the checkout itself
        self.there = {_canonical(name) for name in there}
        self.owners = None

    def find_spec(self, name, path=None, target=None):
        if "." in name or name in sys.stdlib_module_names:
            return None
        if self.owners is None:
            from importlib.metadata import packages_distributions

            self.owners = packages_distributions()
        owners = self.owners.get(name)
        if owners and not any(_canonical(owner) in self.there for owner in owners):
            raise ModuleNotFoundError(f"No module named {name!r} (the lent GPU machine has "
                                      f"no {', '.join(owners)})", name=name)
        return None


def _canonical(name):
    return name.lower().replace("_", "-").replace(".", "-")


if os.environ.get("LENT_MACHINE"):
    sys.meta_path.insert(0, _LentMachine())
