"""TupeBpeTokenizer against the reference tools (sacremoses, subword-nmt, a fairseq Dictionary).

`subword-nmt` and `sacremoses` are runtime dependencies of the tokenizer; the
reference here spells out the authors' steps from them independently of the class
(subword-nmt also learns the codes).
"""

import io
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import keras
import keras_hub
import numpy as np
import pytest
import tensorflow as tf

from keras_tupe.models.tupe_backbone import TupeBackbone
from keras_tupe.models.tupe_bpe_tokenizer import TupeBpeTokenizer
from keras_tupe.models.tupe_masked_lm import TupeMaskedLM
from keras_tupe.models.tupe_masked_lm_preprocessor import TupeMaskedLMPreprocessor
from keras_tupe.models.tupe_text_classifier_preprocessor import TupeTextClassifierPreprocessor

subword_nmt_apply = pytest.importorskip("subword_nmt.apply_bpe")
subword_nmt_learn = pytest.importorskip("subword_nmt.learn_bpe")
sacremoses = pytest.importorskip("sacremoses")

REPO = Path(__file__).resolve().parents[2]
DATA_DIR = Path(os.environ.get("KERAS_TUPE_DATA_DIR") or REPO.parent / "shared" / "data")
ENWIKI = DATA_DIR / "enwiki" / "valid.txt"
REFERENCE_DICT = DATA_DIR / "reference_checkpoints" / "tupe" / "dict.txt"
unpack = keras.utils.unpack_x_y_sample_weight
NUM_TRAIN, NUM_TEST, NUM_MERGES = 400, 300, 500
SPECIALS = ["<s>", "<pad>", "</s>", "<unk>", "<file>", "<email>", "<url>"]
# Lines the corpus may lack: `<unk>`/`</s>` (protected), hyphens, case, quotes, nothing.
EXTRA_LINES = ["The <UNK> of </s> Mr. Smith's state-of-the-art \"co-op\" -- 1990-1995!",
               "", "   ", "a", "Ünïcödé café naïve", "x" * 40]


class FairseqDictionary:
    """The fork's `fairseq.data.Dictionary` as far as ids go (written from its source)."""

    def __init__(self, path):
        self.symbols = list(SPECIALS)
        self.indices = {s: i for i, s in enumerate(self.symbols)}
        with open(path, encoding="utf-8") as f:
            for line in f.readlines():
                idx = line.rfind(" ")
                word, _ = line[:idx], int(line[idx + 1:])
                self.indices[word] = len(self.symbols)
                self.symbols.append(word)
        if "<mask>" not in self.indices:  # masked_lm: add_symbol('<mask>')
            self.indices["<mask>"] = len(self.symbols)
            self.symbols.append("<mask>")

    def encode_line(self, line):
        return [self.indices.get(w, self.indices["<unk>"]) for w in line.split()]


def reference_moses(moses, text):
    # The authors' steps 1-2 (lowercase, `replace_patterns.py` hyphens, tokenizer.perl
    # -no-escape -protected), spelled out independently of the class.
    text = text.lower().replace("-", " - ")
    return moses.tokenize(text, escape=False, aggressive_dash_splits=False, return_str=True,
                          protected_patterns=[re.escape(t) for t in SPECIALS + ["<mask>"]])


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Codes learned on enwiki paragraphs, a dict.txt of the BPE'd text, held-out lines."""
    if not ENWIKI.is_file():
        pytest.skip(f"{ENWIKI} not found (set KERAS_TUPE_DATA_DIR)")
    with open(ENWIKI, encoding="utf-8") as f:
        lines = [line.strip() for line in f if line.strip()][: NUM_TRAIN + NUM_TEST]
    train, test = lines[:NUM_TRAIN], lines[NUM_TRAIN:]
    assert len(test) == NUM_TEST
    moses = sacremoses.MosesTokenizer(lang="en")
    train_tok = [reference_moses(moses, line) for line in train]
    folder = tmp_path_factory.mktemp("tupe_bpe")
    codes = folder / "codes.txt"
    with open(codes, "w", encoding="utf-8") as out:
        subword_nmt_learn.learn_bpe(io.StringIO("\n".join(train_tok) + "\n"), out, NUM_MERGES)
    with open(codes, encoding="utf-8") as f:
        bpe = subword_nmt_apply.BPE(f)
    counts = Counter(w for line in train_tok for w in bpe.process_line(line).split())
    # Like `preprocess.py` (count order, ties by token); rare tokens left out -> `<unk>`.
    words = sorted((w for w, c in counts.items() if c >= 3), key=lambda w: (-counts[w], w))
    dict_txt = folder / "dict.txt"
    dict_txt.write_text("".join(f"{w} {counts[w]}\n" for w in words), encoding="utf-8")
    return {"codes": codes, "dict": dict_txt, "test": test + EXTRA_LINES, "moses": moses,
            "bpe": bpe, "dictionary": FairseqDictionary(dict_txt), "folder": folder}


@pytest.fixture(scope="module")
def tokenizer(corpus):
    return TupeBpeTokenizer(vocabulary=str(corpus["dict"]), bpe_codes=str(corpus["codes"]))


def reference_ids(corpus, text, bpe=None):
    bpe = bpe or corpus["bpe"]
    return corpus["dictionary"].encode_line(bpe.process_line(reference_moses(corpus["moses"],
                                                                             text)))


def test_ids_equal_sacremoses_subword_nmt_fairseq(corpus, tokenizer):
    got = tokenizer(corpus["test"])
    want = [reference_ids(corpus, text) for text in corpus["test"]]
    mismatches = [(i, text[:60]) for i, (text, g, w) in enumerate(zip(corpus["test"], got, want))
                  if list(g) != w]
    assert not mismatches, f"{len(mismatches)} lines differ, first: {mismatches[:3]}"
    # The comparison exercises what it should: multi-piece words, `<unk>`, the specials.
    flat = [i for row in want for i in row]
    assert len(flat) > 20_000 and flat.count(3) > 20
    pieces = sum(tokenizer.id_to_token(i).endswith("@@") for i in flat)
    assert pieces > 2_000
    # Moses keeps the specials whole (tokenizer.perl -protected); BPE then splits them
    # unless the codes merge them, as the authors' codes (learned on text full of them) do.
    assert tokenizer.pretokenize(EXTRA_LINES[0])[:4] == ["the", "<unk>", "of", "</s>"]
    assert want[NUM_TEST + 1] == [] and want[NUM_TEST + 2] == []


def test_fastbpe_and_version_0_1_codes(corpus, tokenizer):
    lines = corpus["codes"].read_text(encoding="utf-8").splitlines()
    assert lines[0] == "#version: 0.2"
    texts = corpus["test"][:40]
    # fastBPE's `bpe-code` (the authors' format): `left right count`, no header, 0.2 rules.
    fastbpe = corpus["folder"] / "fastbpe-codes"
    fastbpe.write_text("".join(f"{m} {1000 - i}\n" for i, m in enumerate(lines[1:])))
    from_fastbpe = TupeBpeTokenizer(str(corpus["dict"]), str(fastbpe))
    assert from_fastbpe(texts) == tokenizer(texts)
    # No header: subword-nmt reads version 0.1 (`</w>` a separate symbol); so must we.
    v01 = corpus["folder"] / "v01-codes"
    v01.write_text("\n".join(lines[1:]) + "\n")
    with open(v01, encoding="utf-8") as f:
        bpe01 = subword_nmt_apply.BPE(f)
    assert bpe01.version == (0, 1)
    got = TupeBpeTokenizer(str(corpus["dict"]), str(v01))(texts)
    assert got == [reference_ids(corpus, text, bpe01) for text in texts]
    assert got != tokenizer(texts)  # the version matters on this text


def test_reference_dictionary_ids():
    if not REFERENCE_DICT.is_file():
        pytest.skip(f"{REFERENCE_DICT} not found")
    tokenizer = TupeBpeTokenizer(str(REFERENCE_DICT), ["#version: 0.2", "t h", "th e</w>"])
    assert tokenizer.vocabulary_size() == 113
    assert [tokenizer.token_to_id(t) for t in ["<s>", "<pad>", "</s>", "<unk>", "<mask>"]] == \
        [0, 1, 2, 3, 112]
    assert (tokenizer.cls_token_id, tokenizer.start_token_id, tokenizer.pad_token_id,
            tokenizer.sep_token_id, tokenizer.end_token_id, tokenizer.mask_token_id) == \
        (0, 0, 1, 2, 2, 112)
    vocabulary = tokenizer.get_vocabulary()
    first = REFERENCE_DICT.read_text(encoding="utf-8").splitlines()[0].rsplit(" ", 1)[0]
    assert vocabulary[:7] == SPECIALS and vocabulary[7] == first == "the"
    assert vocabulary[-1] == "<mask>" and vocabulary[-2].startswith("madeupword")
    assert tokenizer.id_to_token(7) == "the" and tokenizer.token_to_id("no-such-word") == 3
    np.testing.assert_array_equal(tokenizer("The the"), [7, 7])
    with pytest.raises(ValueError, match=r"range \[0, 112\]"):
        tokenizer.id_to_token(113)


def test_detokenize_removes_bpe_markers(corpus, tokenizer):
    text = "Anarchism holds the state to be undesirable."
    ids = tokenizer(text)
    assert any(tokenizer.id_to_token(i).endswith("@@") for i in ids)
    assert tokenizer.detokenize(ids) == "anarchism holds the state to be undesirable ."
    assert tokenizer.detokenize([list(ids), [7]]) == [tokenizer.detokenize(ids), "the"]


def test_tf_data_map_and_tf_function(corpus, tokenizer):
    texts = corpus["test"][:8]
    eager = tokenizer(texts)
    dataset = tf.data.Dataset.from_tensor_slices(texts).batch(4).map(tokenizer)
    got = [row for batch in dataset for row in batch.to_list()]
    assert got == eager
    unbatched = tf.data.Dataset.from_tensor_slices(texts).map(tokenizer)
    assert [t.numpy().tolist() for t in unbatched] == eager
    traced = tf.function(lambda x: tokenizer.detokenize(tokenizer(x)))(tf.constant(texts[:2]))
    assert [t.decode() for t in traced.numpy()] == tokenizer.detokenize(eager[:2])


def test_preprocessors_in_dataset_map(tokenizer):
    mlm = TupeMaskedLMPreprocessor(tokenizer, sequence_length=16)
    texts = ["The state of anarchism.", "A short one", "x"]
    x, y, w = next(iter(tf.data.Dataset.from_tensor_slices(texts).batch(3).map(mlm)))
    ids = x["token_ids"].numpy()
    assert ids.shape == (3, 16) and x["mask_positions"].shape == (3, mlm.mask_selection_length)
    assert (ids[:, 0] == 0).all() and ids[2, 3:].tolist() == [1] * 13  # <s> x </s> <pad>...
    assert (x["padding_mask"].numpy() == (ids != 1)).all()
    assert y.shape == w.shape == (3, mlm.mask_selection_length)

    classifier = TupeTextClassifierPreprocessor(tokenizer, sequence_length=12)
    pairs = tf.data.Dataset.from_tensor_slices((["A film", "b"], ["It is", "c d"])).batch(2)
    # x=: a bare 2-tuple would be read as (x, y), a single segment and labels.
    x, _, _ = unpack(next(iter(pairs.map(lambda a, b: classifier(x=(a, b))))))
    ids = x["token_ids"].numpy()
    first = tokenizer(["A film", "b"])
    assert ids.shape == (2, 12) and (ids[:, 0] == 0).all()
    second = tokenizer(["It is", "c d"])
    # The fork's sentence_prediction packing: <s> a </s> </s> b </s>, then <pad>.
    assert ids[0, : len(first[0]) + len(second[0]) + 4].tolist() == [
        0, *first[0], 2, 2, *second[0], 2]
    assert ids[1, -1] == 1 and (x["padding_mask"].numpy() == (ids != 1)).all()
    eager, _, _ = unpack(classifier(x=(["A film", "b"], ["It is", "c d"])))
    np.testing.assert_array_equal(np.asarray(eager["token_ids"]), ids)


def test_preset_round_trip(corpus, tokenizer, tmp_path):
    texts = corpus["test"][:20]
    folder = str(tmp_path / "tokenizer")
    backbone = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=tokenizer.vocabulary_size())
    backbone.save_to_preset(folder)
    tokenizer.save_to_preset(folder)
    assets = Path(folder) / "assets" / "tokenizer"
    assert sorted(os.listdir(assets)) == ["bpe_codes.txt", "vocabulary.txt"]
    restored = TupeBpeTokenizer.from_preset(folder)
    assert restored(texts) == tokenizer(texts)
    assert restored.get_vocabulary() == tokenizer.get_vocabulary()
    assert restored.get_config()["vocabulary"] is None  # the vocabulary is an asset

    task_folder = str(tmp_path / "mlm")
    preprocessor = TupeMaskedLMPreprocessor(tokenizer, sequence_length=16)
    TupeMaskedLM(backbone, preprocessor=preprocessor).save_to_preset(task_folder)
    task = keras_hub.models.MaskedLM.from_preset(task_folder)
    assert type(task.preprocessor.tokenizer) is TupeBpeTokenizer
    assert task.preprocessor.tokenizer(texts) == tokenizer(texts)


def test_errors_name_file_problem_and_form(corpus, tmp_path):
    codes, dict_txt = str(corpus["codes"]), str(corpus["dict"])
    missing = str(tmp_path / "nope.txt")
    with pytest.raises(FileNotFoundError, match=r"Vocabulary file .*nope\.txt does not exist"
                       r".*fairseq `dict\.txt`"):
        TupeBpeTokenizer(missing, codes)
    with pytest.raises(FileNotFoundError, match=r"BPE codes file .*nope\.txt does not exist"):
        TupeBpeTokenizer(dict_txt, missing)

    bad_dict = tmp_path / "bad_dict.txt"
    bad_dict.write_text("the 10\nof\nand 5\n")
    with pytest.raises(ValueError, match=r"bad_dict\.txt, line 2: expected `<token> <count>`"
                       r".*Received: 'of'"):
        TupeBpeTokenizer(str(bad_dict), codes)
    bad_dict.write_text("the 10\nof many\n")
    with pytest.raises(ValueError, match=r"line 2: .*Received: 'of many'"):
        TupeBpeTokenizer(str(bad_dict), codes)

    with pytest.raises(ValueError, match=r"dict\.txt: every line is `<token> <integer>`.*"
                       r"not of BPE codes"):
        TupeBpeTokenizer(dict_txt, dict_txt)
    prose = tmp_path / "prose.txt"
    prose.write_text("this is not a codes file at all\n")
    with pytest.raises(ValueError, match=r"prose\.txt, line 1: 'this is not.*' is not a merge"
                       r".*subword-nmt codes file"):
        TupeBpeTokenizer(dict_txt, str(prose))
    empty = tmp_path / "empty.txt"
    empty.write_text("#version: 0.2\n")
    with pytest.raises(ValueError, match=r"empty\.txt hold no merges"):
        TupeBpeTokenizer(dict_txt, str(empty))
    with pytest.raises(ValueError, match="No vocabulary or BPE codes have been set"):
        TupeBpeTokenizer()("text")


@pytest.mark.jax
def test_a_pair_tokenizes_without_tensorflow():
    # Fine-tuning on Grain (JAX) runs the tokenizer's pure-Python path; the
    # sitecustomize in tests/no_tensorflow makes `import tensorflow` fail.
    script = (
        "import sys\n"
        "from keras_tupe.models.tupe_bpe_tokenizer import TupeBpeTokenizer\n"
        "from keras_tupe.models.tupe_text_classifier_preprocessor import "
        "TupeTextClassifierPreprocessor\n"
        f"words = {SPECIALS + ['the', 'fi@@', 'lm', '<mask>']!r}\n"
        "tokenizer = TupeBpeTokenizer(words, ['#version: 0.2', 't h', 'th e</w>', 'f i'])\n"
        "packer = TupeTextClassifierPreprocessor(tokenizer, sequence_length=10)\n"
        "x = packer(x=(['The film'], ['the']))\n"
        "print(x['token_ids'].tolist())\n"
        "assert sys.modules.get('tensorflow') is None\n"
    )
    env = dict(os.environ, KERAS_BACKEND="jax",
               PYTHONPATH=os.pathsep.join([str(REPO / "tests" / "no_tensorflow"), str(REPO)]))
    result = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                            text=True, timeout=300)
    assert result.returncode == 0, result.stderr[-2000:]
    # <s> the fi@@ l@@ m </s> </s> the </s> <pad>: no merge makes `lm`, so `l@@` and `m` are <unk>.
    assert result.stdout.split("\n")[-2] == "[[0, 7, 8, 3, 3, 2, 2, 7, 2, 1]]"
