"""`keras-tupe-predict`: which version of a model folder it loads, what it refuses (encoder
and preprocessor exports, missing folders, `--pairs` for a one-sentence model; with it
`keras-tupe-plot-metrics` over an existing file), its reading of a file or standard input in
batches; and the classifier's own `predict`, which takes strings.

The inputs at the edges (issue 38) tested here (all failed on the code before):

- `TextClassifier.predict([None])`, `predict([])`, token-id lists:
  `test_classifier_predict_says_strings_are_expected`
- `training.predict` with many sentences, from a file or standard input:
  `test_predict_reads_a_file_or_stdin_in_batches_and_streams`,
  `test_predict_names_a_bad_input_file_line`
"""

import json
import shutil
import sys

import pytest

from keras_tupe import data
from keras_tupe_cli import predict
from tests.commands.entry_points import run_main


def fake_export(folder, kind):
    """A version folder that looks like a keras_tupe export of `kind` (not loadable)."""
    (folder / "assets.extra").mkdir(parents=True)
    (folder / "variables").mkdir()
    (folder / "saved_model.pb").write_bytes(b"")
    (folder / "variables" / "variables.index").write_bytes(b"")
    (folder / "assets.extra" / "keras_tupe.json").write_text(json.dumps({"kind": kind}))
    return folder


def test_predict_takes_the_newest_version_of_a_model_folder(tmp_path):
    for version in (1, 3):
        fake_export(tmp_path / "sst2" / str(version), "classifier")
    (tmp_path / "sst2" / ".tmp-4-x").mkdir()  # a staging folder is not a version
    path, note = predict.resolve_saved_model(str(tmp_path / "sst2"))
    assert path == str(tmp_path / "sst2" / "3")
    assert note == f"(using the newest version of 2: {tmp_path / 'sst2' / '3'})"
    assert predict.resolve_saved_model(path) == (path, None)


def test_predict_skips_an_incomplete_newest_version_and_names_it(tmp_path):
    """A version folder holding only saved_model.pb (a copy cut short) is skipped with one
    note naming it and the version taken; passed itself, or alone, it is refused."""
    model = tmp_path / "sst2"
    for version in (1, 2, 3):
        fake_export(model / str(version), "classifier")
    shutil.rmtree(model / "3" / "variables")
    (model / "2" / "saved_model.pb").unlink()
    (model / "4").mkdir()  # an empty numbered folder: the start of a copy
    path, note = predict.resolve_saved_model(str(model))
    assert path == str(model / "1")
    assert note == ("(skipping the incomplete versions 4 (no saved_model.pb), 3 (no "
                    f"variables/variables.index), 2 (no saved_model.pb); using version 1: {path})")
    with pytest.raises(ValueError) as refused:
        predict.resolve_saved_model(str(model / "3"))
    assert str(refused.value) == (
        f"{model / '3'} is an incomplete SavedModel: it has no variables/variables.index (an "
        f"export or copy cut short). Export it again, or pass {model / '1'}.")
    shutil.rmtree(model / "1")
    with pytest.raises(ValueError, match=r"sst2 is not a SavedModel: it has only incomplete "
                                         r"version folders \(4, 3, 2: each lacks"):
        predict.resolve_saved_model(str(model))


@pytest.mark.parametrize("kind,message", [
    ("encoder", "is an encoder export (TF-Hub BERT encoder API: token ids in, vectors out), "
                "not a classifier; load it with keras_tupe.hub.load_encoder, or fine-tune it "
                "and pass the classifier export (keras-tupe-export classifier)."),
    ("preprocessor", "is a preprocessor export (strings in, token ids out), not a classifier; "
                     "pass a classifier export (keras-tupe-export classifier)."),
])
def test_predict_refuses_encoder_and_preprocessor_exports(tmp_path, capsys, kind, message):
    fake_export(tmp_path / kind / "1", kind)
    code, out, err = run_main(predict.main, [str(tmp_path / kind), "a film"], capsys)
    assert code == 2
    assert out == ""
    assert err == f"error: {tmp_path / kind / '1'} {message}\n"


def test_predict_names_a_missing_or_empty_folder(tmp_path, capsys):
    code, _, err = run_main(predict.main, [str(tmp_path / "nope"), "a film"], capsys)
    assert (code, err) == (2, (
        f"error: {tmp_path / 'nope'} does not exist. Pass a classifier export: a model folder "
        "such as saved_models/demo_tupe_r_tiny_sst2, or one of its version folders (.../1).\n"))
    code, _, err = run_main(predict.main, [str(tmp_path), "a film"], capsys)
    assert (code, err) == (2, (
        f"error: {tmp_path} is not a SavedModel: it has no saved_model.pb and no numbered "
        "version folder holding one. Pass a classifier export (keras-tupe-export classifier "
        "--out DIR writes DIR/<version>/).\n"))


@pytest.fixture(scope="module")
def string_classifier():
    from keras_tupe import (
        TupeBackbone,
        TupeTextClassifier,
        TupeTextClassifierPreprocessor,
        TupeTokenizer,
    )

    vocabulary = data.SPECIAL_TOKENS + ["a", "fine", "film"]
    backbone = TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=len(vocabulary))
    preprocessor = TupeTextClassifierPreprocessor(TupeTokenizer(vocabulary=vocabulary),
                                                  sequence_length=16)
    return TupeTextClassifier(backbone, 2, preprocessor=preprocessor)


HINT = ("To feed token ids instead, set the task's `preprocessor = None` and pass a dict of "
        "token_ids, padding_mask and segment_ids.")
EXAMPLE = ('e.g. predict(["a fine film", "a dull film"]); for sentence pairs a tuple of two '
           'such lists')


@pytest.mark.parametrize("x,message", [
    ([None], f"takes strings, but item 0 of the batch is None. {HINT}"),
    (["a film", None], f"takes strings, but item 1 of the batch is None. {HINT}"),
    ([], f"received an empty batch: pass at least one string ({EXAMPLE})."),
    ([[5, 6, 7], [5]], "takes strings, but item 0 of the batch is a list of 3 int (token "
                       f"ids?). {HINT}"),
    (None, f"takes a batch of strings ({EXAMPLE}). Received None."),
    ("a fine film", f"takes a batch of strings ({EXAMPLE}). Received a single string: wrap "
                    "it in a list."),
    ((["a fine film"], ["a", "film"]), ": the sentence-pair batches differ in length (1, 2): "
                                       "pass one second sentence for each first sentence."),
])
def test_classifier_predict_says_strings_are_expected(string_classifier, x, message):
    """Were TensorFlow's conversion errors ("`element` should not be empty", ...)."""
    with pytest.raises(ValueError) as error:
        string_classifier.predict(x, verbose=0)
    assert str(error.value) == "TupeTextClassifier.predict" + (
        message if message.startswith(":") else " " + message)


class FakeClassifier:
    """What `training.predict` asks of a loaded classifier SavedModel; records its calls."""

    def __init__(self, stdout):
        self.stdout, self.calls = stdout, []
        self.signatures = {"serving_default": self}
        self.structured_input_signature = ((), {"sentence": None})

    def __call__(self, sentence):
        import tensorflow as tf

        # (batch size, answers already printed): the lines of a batch come out before the
        # next batch is read.
        self.calls.append((int(sentence.shape[0]), self.stdout.getvalue().count("\n")))
        lengths = tf.strings.length(sentence)
        positive = tf.cast(lengths % 2, tf.float32)
        return {"probabilities": tf.stack([1 - positive, positive], axis=1),
                "label": tf.where(lengths % 2 == 1, b"positive", b"negative")}


def test_predict_and_plot_metrics_refuse_in_one_line(tmp_path, monkeypatch, capsys):
    """--pairs for a one-sentence model; a plot over an existing file without --overwrite."""
    import tensorflow as tf

    from keras_tupe_cli import plot_metrics

    fake_export(tmp_path / "sst2" / "1", "classifier")
    monkeypatch.setattr(tf.saved_model, "load", lambda path: FakeClassifier(None))
    version = str(tmp_path / "sst2" / "1")
    code, out, err = run_main(predict.main, [version, "a", "b", "--pairs"], capsys)
    assert (code, out, err) == (2, "", "error: this model takes ['sentence']; drop --pairs.\n")
    (tmp_path / "loss.png").write_bytes(b"png")
    code, _, err = run_main(plot_metrics.main, [str(tmp_path), "--out",
                                                str(tmp_path / "loss.png")], capsys)
    assert (code, err) == (2, f"error: {tmp_path / 'loss.png'} exists; pass --overwrite to "
                              "replace it\n")
    assert (tmp_path / "loss.png").read_bytes() == b"png"


@pytest.mark.parametrize("source", ["file", "stdin"])
def test_predict_reads_a_file_or_stdin_in_batches_and_streams(source, tmp_path, monkeypatch):
    """Was: sentences only as arguments, all in one call (3.7 GB for 10,000)."""
    import io

    import tensorflow as tf

    fake_export(tmp_path / "sst2" / "1", "classifier")
    stdout = io.StringIO()
    model = FakeClassifier(stdout)
    monkeypatch.setattr(tf.saved_model, "load", lambda path: model)
    monkeypatch.setattr(sys, "stdout", stdout)
    lines = ["a film", "dull", "", "une œuvre", "odd one"]
    if source == "file":
        (tmp_path / "in.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
        where = str(tmp_path / "in.txt")
    else:
        monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(
            ("\n".join(lines) + "\n").encode()), encoding="utf-8"))
        where = "-"
    code = predict.main([str(tmp_path / "sst2"), "first", "second", "--file", where,
                         "--batch-size", "3", "--json"])
    assert code == 0
    assert model.calls == [(3, 0), (3, 3), (1, 6)]
    answers = [json.loads(line) for line in stdout.getvalue().splitlines()]
    assert [a["sentence"] for a in answers] == ["first", "second", *lines]
    # The fake's label: an odd number of bytes (œ is two) is positive.
    assert [a["label"] for a in answers] == ["positive", "negative", "negative", "negative",
                                             "negative", "negative", "positive"]
    assert answers[0]["probabilities"] == [0.0, 1.0]


def test_predict_names_a_bad_input_file_line(tmp_path, monkeypatch, capsys):
    import tensorflow as tf

    fake_export(tmp_path / "sst2" / "1", "classifier")
    monkeypatch.setattr(tf.saved_model, "load", lambda path: FakeClassifier(io_stub()))
    bad = tmp_path / "latin1.txt"
    bad.write_bytes("fine\ntrès bien\n".encode("latin-1"))
    code, out, err = run_main(predict.main, [str(tmp_path / "sst2" / "1"), "--file", str(bad),
                                             "--batch-size", "1"], capsys)
    assert code == 2
    # The first line was answered before line 2 was read.
    assert out == "negative   (probabilities 1.000 0.000)  'fine'\n"
    assert err == (f"error: --file {bad}: line 2 is not UTF-8 text (byte 0xe8 at column 3). "
                   "Convert it first, e.g. `iconv -f latin1 -t utf-8`.\n")
    with pytest.raises(SystemExit) as exit:  # a usage error, as argparse's own
        predict.main([str(tmp_path / "sst2")])
    code, err = exit.value.code, capsys.readouterr().err
    assert (code, err) == (2, "error: give sentences as arguments, or --file FILE (- for "
                              "standard input) (`keras-tupe-predict --help` lists "
                              "the flags)\n")


def io_stub():
    import io

    return io.StringIO()
