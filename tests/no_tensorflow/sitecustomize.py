"""Put this folder on PYTHONPATH and `import tensorflow` (or tensorflow_text) fails in the
process and in every Python process it starts: the lent GPU machine has no TensorFlow.
With IMPORTS_LOG set to a folder, each process writes there the modules it imported."""

import atexit
import os
import sys

for _name in ("tensorflow", "tensorflow_text"):
    sys.modules[_name] = None  # the import system raises ImportError for a None entry


def _log_imports():
    with open(os.path.join(os.environ["IMPORTS_LOG"], f"{os.getpid()}.txt"), "w") as f:
        f.write("\n".join(sorted({name.split(".")[0] for name, module in sys.modules.items()
                                  if module is not None})))


if os.environ.get("IMPORTS_LOG"):  # the top-level modules each process imported, at its end
    atexit.register(_log_imports)
