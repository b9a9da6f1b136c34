"""The preset folder is the only artefact (issue 51 item 1).

Every kind the project writes (a pre-trained masked LM, a fine-tuned classifier, a
span-QA model, a converted checkpoint) is read back through keras-hub's base classes
in a fresh process; `--init` resolves by one rule and still takes an old run folder
or a `.keras` file; one writer holds the one overwrite policy.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest

import keras_tupe  # noqa: F401  (registers the family with keras-hub)
from keras_tupe.finetuning import (
    default_vocabulary,
    load_backbone,
    load_classifier,
    resolve_init,
    save_classifier,
)
from keras_tupe.models import (
    TupeBackbone,
    TupeMaskedLM,
    TupeMaskedLMPreprocessor,
    TupeSpanQA,
    TupeSpanQAPreprocessor,
    TupeTextClassifier,
    TupeTextClassifierPreprocessor,
    TupeTokenizer,
)
from keras_tupe.models.preset_folders import write_preset_folder
from keras_tupe_base.settings import FinetuneConfig, ProtocolConfig

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
HF_BERT = DATA_DIR / "reference_checkpoints" / "hf" / "absolute" / "bert_model"
VOCABULARY = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "a", "fine", "film", "the",
              "plot", "was", "long", "dull", "who", "made", "it", "?", "."]
SENTENCES = ["a fine film", "the plot was long", "a dull film ."]
V = len(VOCABULARY)

# Loads each folder with keras-hub's base classes only (no keras_tupe class named) and
# writes what it computes, for the parent to compare.
FRESH = """
import json, sys
import numpy as np
import keras, keras_hub
import keras_tupe  # registers the family, as `pip install keras-tupe` users import it
folders, out = json.loads(sys.argv[1]), sys.argv[2]
inputs = {k: np.asarray(v, "int32") for k, v in json.loads(sys.argv[3]).items()}
sentences = json.loads(sys.argv[4])
found = {}
pre = keras_hub.models.Backbone.from_preset(folders["pretrained"])
found["pretrained"] = keras.ops.convert_to_numpy(pre(inputs)["sequence_output"])
assert type(keras_hub.models.MaskedLM.from_preset(folders["pretrained"])).__name__ == \\
    "TupeMaskedLM"
clf = keras_hub.models.TextClassifier.from_preset(folders["classifier"])
found["classifier"] = keras.ops.convert_to_numpy(clf.predict(sentences, verbose=0))
# keras-hub has no span-QA base class (and refuses Task.from_preset): the class that
# task.json names, as keras-hub's loader finds it.
with open(folders["span_qa"] + "/task.json") as f:
    task_class = keras.saving.get_registered_object(json.load(f)["registered_name"])
qa = task_class.from_preset(folders["span_qa"])
assert type(qa).__name__ == "TupeSpanQA", type(qa)
assert type(qa.preprocessor).__name__ == "TupeSpanQAPreprocessor", type(qa.preprocessor)
outputs = qa(inputs)
found["span_qa"] = np.stack([keras.ops.convert_to_numpy(outputs[k])
                             for k in sorted(outputs)])
if "converted" in folders:
    converted = keras_hub.models.Backbone.from_preset(folders["converted"])
    converted_inputs = {k: np.asarray(v, "int32") for k, v in json.loads(sys.argv[5]).items()}
    found["converted"] = keras.ops.convert_to_numpy(
        converted(converted_inputs)["sequence_output"])
    task = keras_hub.models.TextClassifier.from_preset(folders["converted"], num_classes=2)
    assert task.predict(["hello world"], verbose=0).shape == (1, 2)
np.savez(out, **found)
"""


def tokenizer():
    return TupeTokenizer(vocabulary=VOCABULARY)


def small_backbone(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    return TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=V, **overrides)


def packed_inputs():
    return {"token_ids": np.array([[1, 5, 6, 7, 2, 0, 0, 0], [1, 8, 9, 10, 11, 2, 0, 0]]),
            "segment_ids": np.zeros((2, 8), "int32"),
            "padding_mask": np.array([[1] * 5 + [0] * 3, [1] * 6 + [0] * 2])}


def outputs_of(model, inputs):
    result = model(inputs)
    return np.stack([keras.ops.convert_to_numpy(result[k]) for k in sorted(result)])


def test_every_artefact_kind_round_trips_through_keras_hub_in_a_fresh_process(tmp_path):
    inputs = packed_inputs()
    expected = {}
    folders = {}

    # Pre-trained: the masked LM with its preprocessor, as `training.pretrain` writes it.
    masked_lm = TupeMaskedLM(small_backbone(1), preprocessor=TupeMaskedLMPreprocessor(
        tokenizer(), sequence_length=16))
    folders["pretrained"] = write_preset_folder(masked_lm, str(tmp_path / "run" / "preset"),
                                                "keras_tupe_training", {"steps": 1})
    expected["pretrained"] = keras.ops.convert_to_numpy(
        masked_lm.backbone(inputs)["sequence_output"])

    # Fine-tuned classifier: from the run folder (meaning its preset), as fine-tuning does.
    classifier = TupeTextClassifier(
        load_backbone(str(tmp_path / "run")), num_classes=3,
        preprocessor=TupeTextClassifierPreprocessor(tokenizer(), sequence_length=16))
    info = {"task": "x", "seq_len": 16, "lowercase": True, "num_segments": 1,
            "label_names": ["p", "q", "r"], "dev": {"validation": {"score": 0.5}}}
    folders["classifier"] = save_classifier(classifier, str(tmp_path / "clf"), None, info)
    expected["classifier"] = keras.ops.convert_to_numpy(classifier.predict(SENTENCES,
                                                                           verbose=0))

    # Span QA.
    qa = TupeSpanQA(small_backbone(2), preprocessor=TupeSpanQAPreprocessor(
        tokenizer(), sequence_length=16, doc_stride=4, max_query_length=4))
    folders["span_qa"] = str(tmp_path / "qa")
    qa.save_to_preset(folders["span_qa"])
    expected["span_qa"] = outputs_of(qa, inputs)

    # Converted (a Hugging Face BERT folder), where the reference checkpoints are.
    hf_inputs = {}
    if HF_BERT.is_dir():
        from keras_tupe.convert import convert_huggingface

        folders["converted"] = str(convert_huggingface(HF_BERT, tmp_path / "converted"))
        converted = TupeBackbone.from_preset(folders["converted"])
        hf_inputs = {"token_ids": np.array([[2, 5, 6, 3]]) % converted.vocabulary_size,
                     "segment_ids": np.zeros((1, 4), "int32"),
                     "padding_mask": np.ones((1, 4), "int32")}
        expected["converted"] = keras.ops.convert_to_numpy(
            converted(hf_inputs)["sequence_output"])

    out = tmp_path / "found.npz"
    subprocess.run(
        [sys.executable, "-c", FRESH, json.dumps(folders), str(out),
         json.dumps({k: v.tolist() for k, v in inputs.items()}), json.dumps(SENTENCES),
         json.dumps({k: v.tolist() for k, v in hf_inputs.items()})],
        check=True, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    found = np.load(out)
    assert sorted(found.files) == sorted(expected)
    for kind, value in expected.items():
        np.testing.assert_allclose(found[kind], value, atol=1e-5, rtol=0, err_msg=kind)
    # The fine-tuning record travels in the preset; load_classifier returns it.
    _, vocab, loaded_info = load_classifier(folders["classifier"])
    assert loaded_info == info
    assert Path(vocab).read_text().split() == VOCABULARY
    assert not os.path.exists(os.path.join(folders["classifier"], "classifier.keras"))


# A pre-training run's preset, reloaded through keras-hub's base classes only.
FRESH_RUN = """
import json, sys
import numpy as np
import keras, keras_hub
import keras_tupe  # registers the family
preset, out = sys.argv[1], sys.argv[2]
inputs = {k: np.asarray(v, "int32") for k, v in json.loads(sys.argv[3]).items()}
backbone = keras_hub.models.Backbone.from_preset(preset)
masked_lm = keras_hub.models.MaskedLM.from_preset(preset)
assert type(masked_lm.preprocessor).__name__ == "TupeMaskedLMPreprocessor"
packed = {k: v for k, v in inputs.items() if k != "mask_positions"}
np.savez(out, sequence=keras.ops.convert_to_numpy(backbone(packed)["sequence_output"]),
         logits=keras.ops.convert_to_numpy(masked_lm(inputs)))
"""


@pytest.mark.slow
def test_pretraining_leaves_one_preset_that_keras_hub_reloads_in_a_fresh_process(tmp_path):
    from keras_tupe.finetuning.loading import unfinished_run
    from keras_tupe.models.preset_folders import run_checkpoint, run_model
    from keras_tupe.pretraining import pretrain
    from keras_tupe_base.settings import PretrainConfig

    vocab = tmp_path / "vocab.txt"
    vocab.write_text("".join(t + "\n" for t in VOCABULARY))
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("\n".join(SENTENCES * 40) + "\n")
    run = tmp_path / "run"
    # Without XLA: what is checked is what the run leaves and what it reloads to.
    history = pretrain(PretrainConfig(
        preset="tupe_r_tiny", corpus=[str(corpus)], out=str(run), vocab=str(vocab),
        steps=4, eval_every=2, batch_size=4, seq_len=16, learning_rate=1e-3,
        shuffle_buffer=8, save_steps=[0, 2], verbose=0, xla=False))

    # Only preset folders: no .keras anywhere, no backup left.
    assert sorted(os.listdir(run)) == ["checkpoints", "metrics.csv", "preset",
                                       "run_config.json", "tensorboard", "vocab.txt"]
    assert sorted(os.listdir(run / "checkpoints")) == ["step_0000000", "step_0000002"]
    assert not [p for p in run.rglob("*") if p.name.endswith((".keras", ".partial"))]
    assert run_model(run) == str(run / "preset")
    assert run_checkpoint(run, 2) == str(run / "checkpoints" / "step_0000002")
    assert resolve_init(str(run)) == str(run / "preset")
    assert unfinished_run(str(run)) is None  # finished: its preset is there
    assert default_vocabulary(str(run)) == str(run / "preset" / "assets" / "tokenizer" /
                                               "vocabulary.txt")
    metadata = json.loads((run / "preset" / "metadata.json").read_text())
    assert metadata["keras_tupe_training"]["steps"] == 4

    # A fresh process: keras-hub's Backbone and MaskedLM give the trained model's outputs.
    model = history.model
    inputs = packed_inputs()
    inputs["token_ids"] = inputs["token_ids"][:, :8] % V
    masked = dict(inputs, mask_positions=np.array([[1, 2], [3, 4]]))
    out = tmp_path / "found.npz"
    subprocess.run([sys.executable, "-c", FRESH_RUN, str(run / "preset"), str(out),
                    json.dumps({k: v.tolist() for k, v in masked.items()})],
                   check=True, cwd=REPO, env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "2"})
    found = np.load(out)
    np.testing.assert_allclose(
        found["sequence"], keras.ops.convert_to_numpy(model.backbone(inputs)["sequence_output"]),
        atol=1e-5, rtol=0)
    np.testing.assert_allclose(found["logits"], keras.ops.convert_to_numpy(model(masked)),
                               atol=1e-5, rtol=0)

    # A step checkpoint is a whole preset too: the untrained encoder at step 0 differs.
    step_0 = keras_hub.models.MaskedLM.from_preset(run_checkpoint(run, 0))
    assert isinstance(step_0.preprocessor, TupeMaskedLMPreprocessor)
    assert json.loads((run / "checkpoints" / "step_0000000" / "metadata.json").read_text())[
        "keras_tupe_checkpoint"] == {"step": 0}
    assert not np.allclose(keras.ops.convert_to_numpy(step_0(masked)),
                           keras.ops.convert_to_numpy(model(masked)), atol=1e-3)
    assert resolve_init(run_checkpoint(run, 2)) == run_checkpoint(run, 2)


def test_init_takes_a_preset_folder_or_a_run_folder_holding_one(tmp_path):
    inputs = packed_inputs()
    backbone = small_backbone(3)
    reference = keras.ops.convert_to_numpy(backbone(inputs)["pooled_output"])

    def pooled(init):
        return keras.ops.convert_to_numpy(load_backbone(str(init))(inputs)["pooled_output"])

    # A run folder means its preset/.
    run = tmp_path / "run"
    backbone.save_to_preset(str(run / "preset"))
    assert resolve_init(str(run)) == str(run / "preset")
    np.testing.assert_allclose(pooled(run), reference, atol=1e-6)

    with pytest.raises(FileNotFoundError, match="No vocabulary"):
        default_vocabulary(str(run))  # a backbone-only preset has no tokenizer
    # Anything else, a .keras file included: one error that lists what is accepted.
    (tmp_path / "empty").mkdir()
    backbone.save(tmp_path / "backbone.keras")
    for wrong, what in ((tmp_path / "empty", "is a folder without config.json"),
                        (tmp_path / "missing", "does not exist"),
                        (tmp_path / "backbone.keras", "is a file, not a preset folder")):
        with pytest.raises(FileNotFoundError, match=rf"\({what}\): give a preset folder "
                                                    r"\(with config\.json.*\) or a pre-training "
                                                    r"run folder \(its preset/\)\.$"):
            resolve_init(str(wrong))


def test_a_runs_model_and_checkpoints_are_named_in_one_place(tmp_path):
    from keras_tupe.finetuning.loading import unfinished_run
    from keras_tupe.models.preset_folders import run_checkpoint, run_model

    run, new = tmp_path / "run", tmp_path / "new"
    # Nothing yet: where the layout will put them.
    assert run_model(run) == str(run / "preset")
    assert run_checkpoint(run, 30) == str(run / "checkpoints" / "step_0000030")
    # A run is finished once its preset is there, unfinished before.
    (new / "checkpoints" / "step_0000010").mkdir(parents=True)
    (new / "checkpoints" / "step_0000010" / "config.json").write_text("{}")
    (new / "run_config.json").write_text(json.dumps({"config": {"steps": 20,
                                                                "eval_every": 10}}))
    assert f"e.g. {new / 'checkpoints' / 'step_0000010'}." in unfinished_run(str(new))
    small_backbone(8).save_to_preset(str(new / "preset"))
    assert unfinished_run(str(new)) is None
    assert resolve_init(str(new)) == str(new / "preset")


def test_one_policy_adds_beside_refuses_a_clash_and_overwrites_whole(tmp_path):
    folder = tmp_path / "preset"
    folder.mkdir()
    (folder / "README.md").write_text("mine")
    small_backbone(4).save_to_preset(str(folder))  # added beside the user's file
    tokenizer().save_to_preset(str(folder))  # keras-hub's idiom: the tokenizer beside
    assert (folder / "README.md").read_text() == "mine"
    assert isinstance(keras_hub.tokenizers.Tokenizer.from_preset(str(folder)), TupeTokenizer)
    before = {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()}
    with pytest.raises(FileExistsError, match=r"already holds \['config.json', "
                                              r"'metadata.json', 'model.weights.h5'\]"):
        small_backbone(5).save_to_preset(str(folder))
    # Refused as a whole: nothing changed, nothing staged left beside.
    assert {p: p.read_bytes() for p in folder.rglob("*") if p.is_file()} == before
    assert sorted(os.listdir(tmp_path)) == ["preset"]
    new = small_backbone(5)
    new.save_to_preset(str(folder), overwrite=True)
    assert sorted(os.listdir(folder)) == ["config.json", "metadata.json", "model.weights.h5"]
    inputs = packed_inputs()
    np.testing.assert_allclose(
        keras.ops.convert_to_numpy(TupeBackbone.from_preset(str(folder))(inputs)["pooled_output"]),
        keras.ops.convert_to_numpy(new(inputs)["pooled_output"]), atol=1e-6)


def test_save_classifier_refuses_a_folder_with_files_before_writing(tmp_path):
    classifier = TupeTextClassifier(small_backbone(6), num_classes=2,
                                    preprocessor=TupeTextClassifierPreprocessor(tokenizer(), 16))
    folder = tmp_path / "clf"
    folder.mkdir()
    (folder / "notes.txt").write_text("keep")
    with pytest.raises(FileExistsError, match="already exists"):
        save_classifier(classifier, str(folder), None, {"task": "x"})
    assert sorted(os.listdir(folder)) == ["notes.txt"]


def test_glue_protocol_holds_its_out_lock(tmp_path, monkeypatch):
    from keras_tupe.finetuning import glue
    from keras_tupe_base.output_lock import OutputLockedError
    from tests.base.test_output_lock import hold

    monkeypatch.setattr(glue, "_preflight", lambda *args: None)
    out = tmp_path / "glue"
    holder = hold(out, 30)
    try:
        with pytest.raises(OutputLockedError, match="holder-test"):
            glue.run_protocol(ProtocolConfig(tasks=["sst2"], out=str(out)),
                              FinetuneConfig(task="sst2", init=str(tmp_path)))
    finally:
        holder.kill()
        holder.wait()
    assert not out.exists()


def test_keras_hub_loading_a_truncated_weights_file_names_it(tmp_path):
    folder = str(tmp_path / "preset")
    small_backbone(7).save_to_preset(folder)
    weights = os.path.join(folder, "model.weights.h5")
    with open(weights, "r+b") as f:
        f.truncate(os.path.getsize(weights) // 2)
    # keras-hub's own entry point (not TupeBackbone.from_preset's folder check).
    with pytest.raises(ValueError, match=rf"{weights} is truncated or corrupt"):
        keras_hub.models.Backbone.from_preset(folder)
