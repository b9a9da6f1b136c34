"""A corpus that is not a plain file (issue 67): a pipe read once, a device refused at once,
and no reading that Ctrl-C or SIGTERM cannot stop.

Before: `--corpus` a FIFO, `<(zcat corpus.gz)` or `/dev/zero` hung with nothing printed,
deaf to SIGTERM and Ctrl-C (a tf.data thread waited on the pipe), and `<(cat corpus.txt)`
was called empty (the UTF-8 check had read it first).
"""

import os
import signal
import threading

import pytest

from keras_tupe.data.corpus import line_dataset
from keras_tupe_base import corpus_files
from keras_tupe_base.corpus_files import Stream, corpus_kind, open_stream
from keras_tupe_cli import pretrain, shard_corpus

TEXT = "First paragraph here.\nAnd its second.\n\nAnother document.\n"


def stream_of(data, tmp_path):
    """A `Stream` of a named pipe that a thread fills with `data` (bytes), then closes."""
    fifo = tmp_path / "corpus.fifo"
    os.mkfifo(fifo)

    def write():
        with open(fifo, "wb") as f:
            f.write(data)

    threading.Thread(target=write, daemon=True).start()
    return open_stream(fifo)


def test_what_a_corpus_path_is(tmp_path):
    (tmp_path / "a.txt").write_text(TEXT)
    os.mkfifo(tmp_path / "fifo")
    assert corpus_kind(tmp_path / "a.txt") == "file"
    assert corpus_kind(tmp_path) == "folder"
    assert corpus_kind(tmp_path / "fifo") == "stream"
    with pytest.raises(ValueError) as refused:
        corpus_kind("/dev/zero")
    assert str(refused.value) == (
        "--corpus /dev/zero is a character device, not text. Give a text file, a folder of "
        ".txt files, or a pipe such as <(zcat corpus.txt.gz).")


@pytest.mark.parametrize("command", [pretrain, shard_corpus])
def test_a_device_is_refused_before_anything_reads_it(command, tmp_path, capsys):
    argv = ["--corpus", "/dev/zero", "--out", str(tmp_path / "out")]
    if command is pretrain:
        argv += ["--preset", "tupe_r_tiny"]
    assert command.main(argv) == 2
    assert capsys.readouterr().err == (
        "error: --corpus /dev/zero is a character device, not text. Give a text file, a folder "
        "of .txt files, or a pipe such as <(zcat corpus.txt.gz).\n")
    assert os.listdir(tmp_path) == []


def test_commands_that_read_a_corpus_twice_refuse_a_pipe_and_name_shard_corpus(tmp_path,
                                                                             capsys):
    os.mkfifo(tmp_path / "fifo")  # nothing writes to it: a refusal must not wait
    fifo, out = str(tmp_path / "fifo"), str(tmp_path / "out")
    assert pretrain.main(["--preset", "tupe_r_tiny", "--corpus", fifo, "--out", out]) == 2
    assert capsys.readouterr().err == (
        f"error: --corpus {fifo} is a pipe, which can be read once, and keras-tupe-pretrain "
        "reads it several times (for the vocabulary, then every epoch). Pack it into shards "
        f"first, reading it once: `keras-tupe-shard-corpus --corpus {fifo} --vocab VOCAB --out "
        "SHARDS`, then pass --shards SHARDS; or give a file.\n")
    assert shard_corpus.main(["--corpus", fifo, "--out", out]) == 2  # no --vocab: two readings
    assert capsys.readouterr().err.startswith(
        f"error: --corpus {fifo} is a pipe, which can be read once; without --vocab it would "
        "be read twice")
    assert sorted(os.listdir(tmp_path)) == ["fifo"]


def test_a_pipe_gives_the_lines_a_file_gives(tmp_path):
    (tmp_path / "corpus.txt").write_text(TEXT)
    expected = [line.decode() for line in line_dataset(tmp_path / "corpus.txt").as_numpy_iterator()]
    with stream_of(TEXT.encode(), tmp_path) as stream:
        lines = [line.decode() for line in line_dataset(stream).as_numpy_iterator()]
        stream.check()
    assert lines == expected == ["First paragraph here.", "And its second.", "",
                                 "Another document."]


def test_a_stream_that_is_not_utf8_or_has_no_newline_ends_with_one_line(tmp_path, monkeypatch):
    with stream_of(b"fine\ncaf\xe9\n", tmp_path) as stream:
        assert stream.readline(100) == b"fine\n"
        assert stream.readline(100) == b""
        with pytest.raises(ValueError, match="is not UTF-8 text: line 2 has a byte"):
            stream.check()
    monkeypatch.setattr(corpus_files, "MAX_LINE_BYTES", 10)
    os.remove(tmp_path / "corpus.fifo")
    with stream_of(b"short\n" + b"x" * 30, tmp_path) as stream:
        assert [stream.readline(8) for _ in range(3)] == [b"short\n", b"xxxxxxxx", b""]
        with pytest.raises(ValueError) as refused:
            stream.check()
    assert str(refused.value) == (f"--corpus {tmp_path / 'corpus.fifo'}: line 2 is longer than 10 "
                                  "bytes with no newline; a corpus holds a paragraph a line. Is it "
                                  "text?")


def test_a_signal_ends_a_read_that_waits_in_another_thread():
    """A tf.data thread waiting on the pipe let the main thread's handlers never run."""
    read, write = os.pipe()  # the writer keeps it open and writes nothing
    previous = signal.signal(signal.SIGUSR1, lambda *_: None)
    got = []
    try:
        with Stream(read, "slow-pipe") as stream:
            reader = threading.Thread(target=lambda: got.append(stream.readline(100)))
            reader.start()
            os.kill(os.getpid(), signal.SIGUSR1)
            reader.join(timeout=60)
            assert not reader.is_alive() and got == [b""]
            with pytest.raises(ValueError, match="slow-pipe: reading was stopped by a signal"):
                stream.check()
    finally:
        signal.signal(signal.SIGUSR1, previous)
        os.close(write)


def test_waiting_for_a_writer_is_said_and_ctrl_c_stops_it(tmp_path, monkeypatch):
    os.mkfifo(tmp_path / "fifo")  # nothing will ever write to it
    said = []

    def notice(line, **_):  # the notice's moment: the user presses Ctrl-C
        said.append(line)
        raise KeyboardInterrupt

    monkeypatch.setattr(corpus_files, "WAITING_NOTICE_SECONDS", 0.01)
    monkeypatch.setattr(corpus_files, "print", notice, raising=False)
    with pytest.raises(KeyboardInterrupt):
        open_stream(tmp_path / "fifo")
    assert said == [f"--corpus {tmp_path / 'fifo'} is a named pipe that nothing writes to yet: "
                    "waiting for a writer (Ctrl-C stops)."]
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
    assert signal.getsignal(signal.SIGALRM) in (signal.SIG_DFL, None)
