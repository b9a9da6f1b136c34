"""Task models: shapes, and `.keras` round trips with identical outputs and optimizer."""

import keras
import numpy as np
import pytest

from keras_tupe.models import TupeMaskedLM, TupeBackbone, TupeTextClassifier, TupeSpanQA
from tests.models.test_backbone import make_inputs

INPUTS = make_inputs(2, 16, real=12)


def _tasks():
    return {
        "mlm": (lambda: TupeMaskedLM(TupeBackbone.from_preset("tupe_r_tiny")),
                {**INPUTS, "mask_positions": np.array([[1, 3], [2, 5]], "int32")}),
        "classifier": (lambda: TupeTextClassifier(TupeBackbone.from_preset("bert_a_tiny"), 3), INPUTS),
        "regressor": (lambda: TupeTextClassifier(TupeBackbone.from_preset("shaw_tiny"), 1), INPUTS),
        "span_qa": (lambda: TupeSpanQA(TupeBackbone.from_preset("huang_m4_tiny")), INPUTS),
    }


# Keras's own `save`/`load_model` round trip: the task compiles itself when built, so the
# loaded optimizer meets the saved one unbuilt; Keras says so, as it should, for this path.
@pytest.mark.filterwarnings("ignore:Skipping variable loading for optimizer")
@pytest.mark.parametrize("name", sorted(_tasks()))
def test_task_round_trip(name, tmp_path):
    make, inputs = _tasks()[name]
    model = make()
    model.compile(optimizer=keras.optimizers.Adam(1e-3))
    want = keras.tree.map_structure(np.asarray, model(inputs))
    model.save(tmp_path / "task.keras")
    restored = keras.saving.load_model(tmp_path / "task.keras")
    assert type(restored) is type(model) and restored.optimizer is not None
    got = keras.tree.map_structure(np.asarray, restored(inputs))
    keras.tree.map_structure(np.testing.assert_array_equal, got, want)


def test_output_shapes_and_padding():
    assert TupeTextClassifier(TupeBackbone.from_preset("bert_a_tiny"), 3)(INPUTS).shape == (2, 3)
    assert TupeTextClassifier(TupeBackbone.from_preset("bert_a_tiny"), 1)(INPUTS).shape == (2,)
    spans = TupeSpanQA(TupeBackbone.from_preset("huang_m4_tiny"))(INPUTS)
    assert spans["start_positions"].shape == (2, 16)
    assert np.all(np.asarray(spans["end_positions"])[:, 12:] < -1e8)  # padding never wins


def test_classifier_refuses_bad_num_classes():
    with pytest.raises(ValueError, match="num_classes"):
        TupeTextClassifier(TupeBackbone.from_preset("bert_a_tiny"), 0)
