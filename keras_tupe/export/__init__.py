"""Export for serving and reuse: SavedModels with the TF-Hub BERT APIs.

- `export_encoder`: the encoder (optionally with `.mlm`), callable with the dict of
  `input_word_ids`, `input_mask`, `input_type_ids` and `training`.
- `export_preprocessor`: strings to those inputs, with the vocabulary as an asset.
- `export_classifier`: a fine-tuned classifier answering raw strings (TensorFlow Serving).

Each writes `export_dir/<version>/` (TensorFlow Serving's layout), never replacing an
existing version unless asked (docs/export-and-serving.md).
"""

from keras_tupe_base.extras import require_tensorflow

require_tensorflow("SavedModel export (keras_tupe.export)")  # where it is missing: the extra

from keras_tupe.export.classifier import classifier_module, export_classifier  # noqa: E402
from keras_tupe.export.encoder import encoder_module, export_encoder  # noqa: E402
from keras_tupe.export.preprocessor import export_preprocessor, preprocessor_module  # noqa: E402
from keras_tupe.export.versions import existing_versions, next_version, write_version  # noqa: E402

__all__ = [
    "classifier_module",
    "encoder_module",
    "existing_versions",
    "export_classifier",
    "export_encoder",
    "export_preprocessor",
    "next_version",
    "preprocessor_module",
    "write_version",
]
