"""`keras-tupe-export`: what it says it does and the next command, no half-made version
folder, the TensorFlow backend it needs, and the damaged presets and `.keras` files it names.

The input at the edges (issue 38) tested here (it failed on the code before):

- a preset `config.json` with `num_heads: 0` (was a ZeroDivisionError):
  `test_a_preset_config_with_zero_heads_is_named`
"""

import json
import os
import sys
from pathlib import Path

import pytest

from tests.commands.entry_points import run_main


def test_a_failed_export_leaves_no_version_and_no_new_model_folder(tmp_path):
    from keras_tupe.export import write_version

    def fail(path):
        (Path(path) / "saved_model.pb").write_bytes(b"half")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        write_version(str(tmp_path / "saved_models" / "sst2"), fail)
    assert list(tmp_path.iterdir()) == []
    (tmp_path / "sst2" / "1").mkdir(parents=True)  # a model folder with a version
    with pytest.raises(KeyboardInterrupt):
        write_version(str(tmp_path / "sst2"), fail)
    assert [p.name for p in (tmp_path / "sst2").iterdir()] == ["1"]


def test_export_says_what_it_does_and_the_next_command(tmp_path, monkeypatch, capsys):
    from keras_tupe_cli import export as export_cli

    out = tmp_path / "sst2"
    (tmp_path / "clf").mkdir()  # --init must exist (checked before TensorFlow's import)
    monkeypatch.setattr(export_cli, "export", lambda args: str(out / "1"))
    code, stdout, err = run_main(export_cli.main, [
        "classifier", "--init", str(tmp_path / "clf"), "--out", str(out)], capsys)
    predict = Path(sys.executable).parent / "keras-tupe-predict"
    predict = os.path.relpath(predict) if not os.path.relpath(predict).startswith("..") else predict
    assert (code, err) == (0, "")
    assert stdout == (f"Exporting the classifier to {out}/<version> ...\n"
                      f"Saved the classifier to {out / '1'}.\n"
                      f"Next: {predict} {out} \"a gripping film\"\n")


def test_a_preset_config_with_zero_heads_is_named(tmp_path):
    import keras_hub

    from keras_tupe import TupeBackbone

    folder = tmp_path / "preset"
    TupeBackbone.from_preset("bert_a_tiny").save_to_preset(str(folder))
    config = json.loads((folder / "config.json").read_text())
    config["config"]["num_heads"] = 0
    (folder / "config.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match=r"`num_heads` must be a positive int. Received: num_heads=0"):
        keras_hub.models.Backbone.from_preset(str(folder))


def test_export_under_another_backend_says_it_needs_tensorflow(tmp_path, monkeypatch, capsys):
    from keras_tupe_cli import export as export_cli

    monkeypatch.setenv("KERAS_BACKEND", "jax")
    monkeypatch.setattr(export_cli, "export", lambda args: pytest.fail("exported under JAX"))
    argv = ["encoder", "--init", str(tmp_path), "--out", str(tmp_path / "enc")]
    code, _, err = run_main(export_cli.main, argv, capsys)
    assert code == 2 and err.count("\n") == 1, err
    assert "needs the TensorFlow backend, not jax" in err
    assert f"KERAS_BACKEND=tensorflow keras-tupe-export {' '.join(argv)}" in err


def test_a_truncated_preset_weights_file_is_named(tmp_path, capsys):
    from keras_tupe.models import TupeBackbone
    from keras_tupe_cli import export as export_cli

    preset = tmp_path / "preset"
    TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=64).save_to_preset(str(preset))
    weights = preset / "model.weights.h5"
    weights.write_bytes(weights.read_bytes()[: weights.stat().st_size // 2])
    with pytest.raises(ValueError, match=f"{weights} is truncated or corrupt"):
        TupeBackbone.from_preset(str(preset))
    code, _, err = run_main(export_cli.main, [
        "encoder", "--init", str(preset), "--out", str(tmp_path / "enc")], capsys)
    assert code == 2 and err.startswith(f"error: {weights} is truncated or corrupt"), err
    assert err.count("\n") == 1


@pytest.mark.parametrize("damage", ["truncated", "empty", "corrupt member"])
def test_a_damaged_keras_file_is_named(tmp_path, capsys, damage):
    import zipfile

    from keras_tupe.models import TupeBackbone
    from keras_tupe.models.saving import load_saved_model
    from keras_tupe_cli import export as export_cli

    path = tmp_path / "encoder.keras"
    TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=64).save(str(path))
    data = path.read_bytes()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "empty":
        path.write_bytes(b"")
    else:  # a whole archive whose weights member is flipped: its CRC no longer matches
        with zipfile.ZipFile(path) as archive:
            info = archive.getinfo("model.weights.h5")
        offset = info.header_offset + 30 + len(info.filename) + len(info.extra) + 100
        path.write_bytes(data[:offset] + bytes(b ^ 0xFF for b in data[offset:offset + 64])
                         + data[offset + 64:])
    # Keras itself says "File not found" for a file that is there.
    with pytest.raises(ValueError, match=f"{path} is not a readable .keras file"):
        load_saved_model(str(path))
    code, _, err = run_main(export_cli.main, [
        "encoder", "--init", str(path), "--out", str(tmp_path / "enc")], capsys)
    # --init takes a preset folder or a run folder holding one: a .keras file is refused.
    assert code == 2 and err.startswith(f"error: No encoder at {path} (is a file, not a "
                                        "preset folder): give a preset folder"), err
    assert err.count("\n") == 1
