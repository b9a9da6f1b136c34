"""Put this folder on PYTHONPATH and `import tensorflow` (or tensorflow_text) fails in the
process and in every Python process it starts: the lent GPU machine has no TensorFlow."""

import sys

for _name in ("tensorflow", "tensorflow_text"):
    sys.modules[_name] = None  # the import system raises ImportError for a None entry
