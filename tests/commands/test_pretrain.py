"""`keras-tupe-pretrain`'s refusals (one line, exit 2, no run folder left, none removed that
was there), its settings fitted to the preset, and the library pieces it reads a corpus with:
the vocabulary's training, the corpus read in bounded pieces, the step progress.

The inputs at the edges (issue 38) tested here (all failed on the code before):

- `pretrain --vocab` lacking a special token:
  `test_pretrain_names_the_users_vocabulary_not_the_runs_copy`
- SIGTERM during vocabulary training:
  `test_sigterm_during_vocabulary_training_leaves_no_run_folder`
- a corpus on one enormous line: `test_one_enormous_line_is_read_in_bounded_pieces`,
  `test_the_pieces_of_a_line_pack_as_the_whole_line` (slow); the peak memory: the retired
  `benchmarks.edge_memory` (docs/benchmarks.md, "Retired benchmarks")
"""

import os

import pytest

from keras_tupe import data
from keras_tupe_cli import pretrain as pretrain_cli
from tests.commands.entry_points import ENWIKI_VALID, run_main, write_vocabulary


def test_a_wrong_value_names_the_flag_value_and_choices(capsys):
    with pytest.raises(SystemExit):
        pretrain_cli.parse_args(["--preset", "tupe_r_tiny", "--corpus", "c.txt", "--out", "o",
                                 "--precision", "float64"])
    assert capsys.readouterr().err == (
        "error: argument --precision: invalid choice: 'float64' (choose from 'float32', "
        "'mixed_bfloat16', 'mixed_float16') (`keras-tupe-pretrain --help` lists the "
        "flags)\n")


def test_non_utf8_corpus_is_refused_naming_file_and_line(tmp_path, capsys):
    corpus = tmp_path / "latin1.txt"
    corpus.write_bytes("A first line.\nUne deuxième ligne.\n".encode("latin-1"))
    out = tmp_path / "run"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--steps", "10", "--verbose", "0"], capsys)
    assert code == 2
    assert err == (
        f"error: --corpus: Corpus file {corpus} is not UTF-8 text: line 2, column 10 has the "
        f"byte 0xe8. Convert it to UTF-8 first, e.g. `iconv -f latin1 -t utf-8 {corpus} > "
        f"{corpus}.utf8` for Latin-1 text.\n")
    assert not out.exists()


def test_every_flag_conflict_is_reported_at_once(tmp_path, capsys):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")
    out = tmp_path / "run"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out), "--steps", "300",
        "--eval-every", "7", "--seq-len", "512", "--batch-size", "0", "--verbose", "0"], capsys)
    assert code == 2
    assert err.splitlines() == [
        "error: --batch-size must be an int >= 1. Received: --batch-size 0",
        "error: --seq-len 512 is longer than the absolute position table of tupe_r_tiny "
        "(max_sequence_length=128). Use --seq-len <= 128, or a relative-only preset.",
        "error: --steps (300) must be a positive multiple of --eval-every (7): training runs, "
        "validates and backs up in blocks of --eval-every steps.",
    ]
    assert not out.exists()


@pytest.mark.parametrize("preset,steps,seq_len,eval_every", [
    ("tupe_r_tiny", 300, 128, 30),      # the tiny table; a tenth of the steps
    ("tupe_r_mini", 1_000_000, 512, 1000),  # the paper's values
    ("huang_m4_tiny", 7, 128, 1),
])
def test_defaults_fit_the_preset_and_the_steps(preset, steps, seq_len, eval_every):
    args = pretrain_cli.fit_to_preset(
        {"preset": preset, "steps": steps, "seq_len": None, "eval_every": None})
    assert (args["seq_len"], args["eval_every"]) == (seq_len, eval_every)


def test_effective_settings_are_printed_first(tmp_path, capsys):
    # A corpus the run itself refuses (a missing path is refused before the settings are
    # known, without TensorFlow: test_path_mistakes_are_reported_before_tensorflow_is_imported).
    empty = tmp_path / "empty"
    empty.mkdir()
    out = tmp_path / "run"
    code, stdout, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(empty), "--out", str(out),
        "--steps", "300"], capsys)
    assert stdout == (
        "pretrain tupe_r_tiny: 300 steps of batch 256 x sequence 128, validation and backup "
        f"every 30 steps, peak LR 0.0001, float32, strategy default, XLA -> {out}\n")
    assert (code, err) == (
        2, f"error: --corpus: Corpus directory {empty} is empty: it holds no *.txt file.\n")
    assert not out.exists()


def test_space_separators_become_plain_spaces_before_pretokenizing():
    """The cause: keras-hub splits on " " but not on U+00A0 and kin, then NFKC makes them " "."""
    from keras_hub.src.tokenizers.word_piece_tokenizer import pretokenize

    from keras_tupe.data.vocabulary import _plain_spaces

    text = ["a\u00a0b c\u2009d e\u3000f g\u202fh"]
    words = pretokenize(_plain_spaces(text), True, True, True, True)
    assert words.to_list() == [[b"a", b"b", b"c", b"d", b"e", b"f", b"g", b"h"]]
    # Spacing accents inside a word: NFKC gives a space and a combining mark, which
    # lowercasing strips after the split (the README walk's enwiki vocabulary had " ").
    accents = ["i\u00b4j x\u00a8y c\u00b8d e\u203ef"]
    words = pretokenize(_plain_spaces(accents), True, True, True, True)
    assert words.to_list() == [[b"i", b"j", b"x", b"y", b"c", b"d", b"e", b"f"]]
    words = pretokenize(_plain_spaces(accents, lowercase=False), False, False, True, True)
    assert not any(b" " in word for word in words.to_list()[0])


@pytest.mark.slow
@pytest.mark.skipif(not ENWIKI_VALID.exists(), reason="needs the enwiki data folder")
def test_vocabulary_has_no_whitespace_tokens(tmp_path):
    """Real text with no-break spaces (and other separators) gives no " " or "## " token."""
    odd = tmp_path / "odd.txt"
    odd.write_text("a\u00a0b c\u2009d e\u3000f g\u202fh 1\u00a0000 km i\u00b4j x\u00a8y\n" * 50,
                   encoding="utf-8")
    for lowercase in (True, False):
        vocabulary = tmp_path / f"vocab_{lowercase}.txt"
        data.train_vocabulary([str(odd), str(ENWIKI_VALID)], 300, vocabulary,
                              lowercase=lowercase, max_lines=300, verbose=False)
        tokens = vocabulary.read_text(encoding="utf-8").split("\n")[:-1]
        bad = [t for t in tokens if not t.removeprefix("##").strip()]
        assert bad == [], bad


def test_step_progress_counts_steps_not_epochs():
    import keras
    import numpy as np

    from keras_tupe.callbacks import StepProgress

    lines = []
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((12, 2), "float32")
    model.fit(x, x[:, :1], batch_size=2, epochs=2, verbose=0,
              callbacks=[StepProgress(12, 6, print_fn=lines.append)])
    assert lines[0] == ("starting at step 0/12: reading the first batches, building and "
                        "compiling the training step ...")
    assert [line.split(":")[0] for line in lines[1:]] == ["step 6/12", "step 12/12"]
    assert all("steps/s" in line and "loss" in line for line in lines[1:])


def test_step_progress_starts_a_resumed_run_at_its_restored_step():
    """A run resumed from a backup starts `fit` at a later epoch (BackupAndRestore sets it
    in its own on_train_begin, after the progress callback's): the line names that step."""
    import keras
    import numpy as np

    from keras_tupe.callbacks import StepProgress

    lines = []
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x = np.ones((12, 2), "float32")
    model.fit(x, x[:, :1], batch_size=2, epochs=2, initial_epoch=1, verbose=0,
              callbacks=[StepProgress(12, 6, print_fn=lines.append)])
    assert lines[0].startswith("starting at step 6/12: ")
    assert [line.split(":")[0] for line in lines[1:]] == ["step 12/12"]


def test_offline_tfds_corpus_fails_at_once_naming_the_local_alternative(tmp_path, monkeypatch,
                                                                        capsys):
    import socket
    import time

    def no_network(*args, **kwargs):
        raise OSError("Network is unreachable")

    monkeypatch.setattr(socket, "create_connection", no_network)
    monkeypatch.setenv("TFDS_DATA_DIR", str(tmp_path / "tfds"))
    out = tmp_path / "run"
    start = time.perf_counter()
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", "tfds:imdb_reviews:unsupervised",
        "--out", str(out), "--steps", "10", "--verbose", "0"], capsys)
    assert time.perf_counter() - start < 30
    assert code == 2
    assert err == (
        "error: tensorflow-datasets 'imdb_reviews' is not prepared locally and "
        "storage.googleapis.com cannot be reached to download it (OSError: Network is "
        "unreachable); nothing was downloaded. Pass a local corpus path instead, e.g. "
        "<data folder>/enwiki/train.txt.\n")
    assert not out.exists()
    assert not (tmp_path / "tfds").exists() or not any((tmp_path / "tfds").rglob("*.*"))


def pretrain_with_failing_vocabulary(tmp_path, monkeypatch, capsys, error, out):
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")

    def fail(*args, **kwargs):
        raise error

    monkeypatch.setattr(data, "train_vocabulary", fail)
    return run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--steps", "10", "--verbose", "0"], capsys)


@pytest.mark.parametrize("error,code,message", [
    (ValueError("the learner failed"), 2, "error: the learner failed\n"),
    (KeyboardInterrupt(), 130, "interrupted\n"),
])
def test_a_new_run_that_fails_before_its_first_backup_leaves_no_run_folder(
        tmp_path, monkeypatch, capsys, error, code, message):
    out = tmp_path / "runs" / "new"
    result = pretrain_with_failing_vocabulary(tmp_path, monkeypatch, capsys, error, out)
    assert (result[0], result[2]) == (code, message)
    assert not (tmp_path / "runs").exists()  # the parent it made too
    assert (tmp_path / "c.txt").exists()


def test_a_failed_run_never_removes_a_folder_that_was_there(tmp_path, monkeypatch, capsys):
    out = tmp_path / "mine"
    out.mkdir()  # empty: a new run may use it
    code, _, err = pretrain_with_failing_vocabulary(
        tmp_path, monkeypatch, capsys, ValueError("the learner failed"), out)
    assert (code, err) == (2, "error: the learner failed\n")
    assert out.is_dir()


def test_pretrain_names_the_users_vocabulary_not_the_runs_copy(tmp_path, capsys):
    vocab = write_vocabulary(tmp_path / "mine.txt", ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "the"])
    corpus = tmp_path / "c.txt"
    corpus.write_text("the film\n")
    out = tmp_path / "run"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--vocab", str(vocab), "--steps", "10", "--verbose", "0"], capsys)
    assert (code, err) == (2, (
        f"error: --vocab: Vocabulary file {vocab} must start with the special tokens "
        "['[PAD]', '[CLS]', '[SEP]', '[UNK]', '[MASK]'] (ids 0-4), in that order; it lacks "
        "[MASK]. Received first lines: ['[PAD]', '[CLS]', '[SEP]', '[UNK]', 'the']\n"))
    assert not out.exists()


def test_sigterm_during_vocabulary_training_leaves_no_run_folder(tmp_path, monkeypatch,
                                                                 capsys):
    """SIGTERM (a job scheduler's stop) cleans up as Ctrl-C does: one line, status 143."""
    import signal
    import time

    def terminated_while_learning(*args, **kwargs):
        # Without a handler SIGTERM would end this test process: refuse to send it.
        assert signal.getsignal(signal.SIGTERM) not in (signal.SIG_DFL, None)
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(5)  # the handler interrupts this

    before = signal.getsignal(signal.SIGTERM)
    corpus = tmp_path / "c.txt"
    corpus.write_text("some text\n")
    monkeypatch.setattr(data, "train_vocabulary", terminated_while_learning)
    out = tmp_path / "runs" / "new"
    code, _, err = run_main(pretrain_cli.main, [
        "--preset", "tupe_r_tiny", "--corpus", str(corpus), "--out", str(out),
        "--steps", "10", "--verbose", "0"], capsys)
    assert (code, err) == (143, "terminated\n")
    assert not (tmp_path / "runs").exists()
    assert signal.getsignal(signal.SIGTERM) == before  # put back


def one_line_corpus(tmp_path):
    """A corpus whose first document is one line of 1,500 words (é: two-byte characters)."""
    words = [f"w{i % 97}{'é' * (i % 3)}" for i in range(1500)]
    text = tmp_path / "one_line.txt"
    text.write_text(" ".join(words) + "\n\nnext document\n", encoding="utf-8")
    return text, words


def corpus_stream(text, monkeypatch, piece_bytes, **kwargs):
    from keras_tupe.data import corpus

    monkeypatch.setattr(corpus, "_PIECE_BYTES", piece_bytes)
    return [line for batch in corpus.line_batches(str(text), **kwargs).as_numpy_iterator()
            for line in batch.tolist()]


def test_one_enormous_line_is_read_in_bounded_pieces(tmp_path, monkeypatch):
    """A corpus on one 50 MB line took 4.26 GB to pack and gave no progress figure.

    Pieces of at most ~2 x `_PIECE_BYTES`, cut after a space (the same words); a line's
    pieces count as one line; the progress callback counts lines and bytes as read.
    """
    from keras_tupe.data import vocabulary

    text, words = one_line_corpus(tmp_path)
    counted = []
    pieces = corpus_stream(text, monkeypatch, 64,
                           progress=lambda lines, size: counted.append((lines, size)))
    assert len(pieces) > 100 and max(len(piece) for piece in pieces) <= 2 * 64
    assert b" ".join(pieces[:-2]).split() == " ".join(words).encode().split()
    assert pieces[-2:] == [b"", b"next document"]  # the blank line still ends the document
    assert tuple(map(sum, zip(*counted))) == (3, text.stat().st_size - 3)  # all but "\n"s
    assert corpus_stream(text, monkeypatch, 64, max_lines=1) == pieces[:-2]
    figure = vocabulary._Progress(max_lines=None, total_bytes=10_000_000, print_fn=print)
    figure(0, 5_000_000)
    assert figure.line(10.0) == ("  vocabulary: 0 lines, 5.0 MB read (50%), about 10s left, "
                                 "0.5 MB/s")


@pytest.mark.slow  # two packing pipelines and the tokenizer's first use: ~11 s here
def test_the_pieces_of_a_line_pack_as_the_whole_line(tmp_path, monkeypatch):
    from keras_tupe.data import corpus

    text, words = one_line_corpus(tmp_path)
    vocab = write_vocabulary(tmp_path / "vocab.txt", data.SPECIAL_TOKENS + sorted(set(words)))
    tokenizer = data.load_tokenizer(vocab)

    def packed(piece_bytes):
        monkeypatch.setattr(corpus, "_PIECE_BYTES", piece_bytes)
        return [ids.tolist() for ids in
                data.packed_sequences(str(text), tokenizer, 16).as_numpy_iterator()]

    assert packed(64) == packed(1 << 20)
