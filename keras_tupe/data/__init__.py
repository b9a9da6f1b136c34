"""Data: corpora, WordPiece vocabularies, the masked-LM pipeline (`data.mlm_dataset`, ...:
`keras_tupe.data.pretraining.__all__`, imported on first use, as it needs TensorFlow);
GLUE, SQuAD and the TensorFlow-free token-id shards in their submodules.
"""

import importlib
import importlib.util

from keras_tupe_base.extras import require_tensorflow


def __getattr__(name):
    # Other dunders (probed by tools) must not import TensorFlow.
    if name.startswith("__") and name != "__all__":
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    if importlib.util.find_spec(f"{__name__}.{name}") is not None:
        # `from keras_tupe.data import glue` asks for the attribute before importing the
        # submodule: import it alone, not the TensorFlow pipeline.
        return importlib.import_module(f"{__name__}.{name}")
    require_tensorflow("The tf.data masked-LM pipeline (keras_tupe.data.pretraining)")
    pipeline = importlib.import_module("keras_tupe.data.pretraining")
    if name == "__all__":
        return list(pipeline.__all__)
    if name in pipeline.__all__:
        return getattr(pipeline, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
