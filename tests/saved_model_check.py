"""Checks exported encoders against saved reference outputs, in a fresh process.

Run as `python tests/saved_model_check.py CASES_DIR`: imports TensorFlow and NumPy
only (never keras_tupe), loads each `CASES_DIR/<name>/saved_model`, calls it on every
`inputs_*.npz` through `__call__(inputs, training=False)` and through the
`serving_default` signature, and prints one JSON line: name -> max |difference| to
`expected_*.npz`, plus whether keras_tupe was ever imported.
"""

import glob
import json
import os
import sys

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402
import tensorflow as tf  # noqa: E402


def check(case_dir):
    model = tf.saved_model.load(os.path.join(case_dir, "saved_model"))
    serving = model.signatures["serving_default"]
    errors, shapes = [], []
    for inputs_file in sorted(glob.glob(os.path.join(case_dir, "inputs_*.npz"))):
        inputs = dict(np.load(inputs_file))
        expected = dict(np.load(inputs_file.replace("inputs_", "expected_")))
        called = model(inputs, training=False)
        flat = {k: v for k, v in called.items() if k != "encoder_outputs"}
        flat.update({f"encoder_outputs_{i}": v for i, v in enumerate(called["encoder_outputs"])})
        signed = serving(**{k: tf.constant(v) for k, v in inputs.items()})
        if set(flat) != set(expected) or set(signed) != set(expected):
            raise AssertionError(f"{case_dir}: outputs {sorted(flat)} / {sorted(signed)}, "
                                 f"expected {sorted(expected)}")
        for key, value in expected.items():
            errors.append(float(np.max(np.abs(flat[key].numpy() - value))))
            errors.append(float(np.max(np.abs(signed[key].numpy() - value))))
        shapes.append(list(inputs["input_word_ids"].shape))
    return {"max_abs_error": max(errors), "input_shapes": shapes}


if __name__ == "__main__":
    results = {os.path.basename(d): check(d)
               for d in sorted(glob.glob(os.path.join(sys.argv[1], "*")))}
    results["__imported_keras_tupe__"] = any(m.startswith("keras_tupe") for m in sys.modules)
    print(json.dumps(results))
