"""What a corpus path is, told before anything reads it, and a pipe read once.

A corpus is a text file, a folder of `*.txt` files, or a stream: a pipe or named pipe
(FIFO), such as the `<(zcat corpus.txt.gz)` of a shell, which can be read once only.
Anything else (`/dev/zero`, a terminal, a socket) is refused before any reading, in one
line. Standard library only: a command checks its `--corpus` before Keras is imported.

A stream is opened in the main thread (`open_stream`), where Ctrl-C and SIGTERM stop the
wait for a writer, and read by `Stream.readline`, which a signal interrupts: the reading
thread of a `tf.data` pipeline would otherwise hold the main thread in TensorFlow's C++
code, where Python's signal handlers never run. A stream's line is bounded
(`MAX_LINE_BYTES`), since a stream need not end, and must be UTF-8; a stream that breaks
either rule ends, and `Stream.check()` raises the one-line refusal.
"""

import codecs
import os
import select
import signal
import stat
import sys

# A stream's longest line; a file's lines are read in pieces, a file has an end.
MAX_LINE_BYTES = 1 << 26  # 64 MiB
# How long a named pipe may wait for its writer before a line says so.
WAITING_NOTICE_SECONDS = 1.0

_OTHER_KINDS = ((stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                (stat.S_ISSOCK, "a socket"))


def corpus_kind(path, flag="--corpus"):
    """`"file"`, `"folder"` or `"stream"` (a pipe or FIFO: one reading only).

    Raises:
        FileNotFoundError: `path` does not exist.
        ValueError: `path` is neither (a device, a socket), in one line naming `flag`.
    """
    try:
        mode = os.stat(path).st_mode
    except FileNotFoundError:
        raise FileNotFoundError(f"{flag} {path} does not exist.") from None
    if stat.S_ISREG(mode):
        return "file"
    if stat.S_ISDIR(mode):
        return "folder"
    if stat.S_ISFIFO(mode):
        return "stream"
    what = next((name for test, name in _OTHER_KINDS if test(mode)), "not a file")
    raise ValueError(f"{flag} {path} is {what}, not text. Give a text file, a folder of .txt "
                     "files, or a pipe such as <(zcat corpus.txt.gz).")


def refuse_streams(paths, flag, reader):
    """Refuses the first stream among `paths`, for `reader`, a command that reads `flag`
    more than once (e.g. `"keras-tupe-pretrain reads it for the vocabulary and every
    epoch"`); points to `keras-tupe-shard-corpus`, which reads a stream once."""
    for path in paths or ():
        if not str(path).startswith("tfds:") and corpus_kind(path, flag) == "stream":
            raise ValueError(
                f"{flag} {path} is a pipe, which can be read once, and {reader}. Pack it into "
                f"shards first, reading it once: `keras-tupe-shard-corpus --corpus {path} "
                "--vocab VOCAB --out SHARDS`, then pass --shards SHARDS; or give a file.")


def open_stream(path, flag="--corpus"):
    """Opens the pipe `path` for one reading; call it in the main thread.

    Opening a named pipe waits for its writer: after `WAITING_NOTICE_SECONDS` a line on
    stderr says so; Ctrl-C and SIGTERM stop the wait as they stop anything else.
    """
    def waiting(signum, frame):
        print(f"{flag} {path} is a named pipe that nothing writes to yet: waiting for a "
              "writer (Ctrl-C stops).", file=sys.stderr, flush=True)

    previous = signal.signal(signal.SIGALRM, waiting)
    signal.setitimer(signal.ITIMER_REAL, WAITING_NOTICE_SECONDS)
    try:
        fd = os.open(path, os.O_RDONLY)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    return Stream(fd, str(path), flag)


class Stream:
    """A pipe opened by `open_stream`: read once, a line (or a piece of one) at a time.

    A signal for which Python has a handler (Ctrl-C, the commands' SIGTERM) ends the
    reading at once, so that the main thread returns to Python, where the handler runs.
    A context manager; closing it (in the main thread) restores the signal wake-up.
    """

    def __init__(self, fd, name, flag="--corpus"):
        self.fd, self.name, self.flag = fd, name, flag
        self.error = None  # the refusal `check` raises, once the stream has ended
        self._buffer, self._ended, self._lines, self._line_bytes = b"", False, 0, 0
        self._decoder = codecs.getincrementaldecoder("utf-8")()
        self._wakeup_read, wakeup_write = os.pipe()
        os.set_blocking(wakeup_write, False)
        self._previous_wakeup = signal.set_wakeup_fd(wakeup_write)
        self._wakeup_write = wakeup_write

    def __str__(self):
        return self.name

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def close(self):
        if self.fd is None:
            return
        signal.set_wakeup_fd(self._previous_wakeup)
        for fd in (self.fd, self._wakeup_read, self._wakeup_write):
            os.close(fd)
        self.fd = None

    def check(self):
        """Raises the stream's refusal (ValueError, one line), if its reading found one."""
        if self.error:
            raise ValueError(self.error)

    def readline(self, limit):
        """Up to `limit` bytes, to the end of a line included; `b""` once the stream ends."""
        while not self._ended and len(self._buffer) < limit and b"\n" not in self._buffer:
            ready, _, _ = select.select([self.fd, self._wakeup_read], [], [])
            if self._wakeup_read in ready:  # a signal: its handler unwinds the main thread
                self._end(f"{self.flag} {self.name}: reading was stopped by a signal.")
                return b""
            data = os.read(self.fd, 1 << 16)
            self._ended = not data
            self._buffer += data
        end = self._buffer.find(b"\n", 0, limit)
        size = end + 1 if end >= 0 else min(limit, len(self._buffer))
        data, self._buffer = self._buffer[:size], self._buffer[size:]
        return data if self._checked(data, final=self._ended and not self._buffer) else b""

    def _checked(self, data, final):
        """Whether `data` is UTF-8 and keeps its line within the bound; else ends the stream."""
        try:
            self._decoder.decode(data, final=final)
        except UnicodeDecodeError:
            self._end(f"{self.flag} {self.name} is not UTF-8 text: line {self._lines + 1} has "
                      "a byte that is not. Convert it first, e.g. `iconv -f latin1 -t utf-8`.")
            return False
        self._line_bytes += len(data)
        if self._line_bytes > MAX_LINE_BYTES:
            self._end(f"{self.flag} {self.name}: line {self._lines + 1} is longer than "
                      f"{MAX_LINE_BYTES:,} bytes with no newline; a corpus holds a paragraph "
                      "a line. Is it text?")
            return False
        if data.endswith(b"\n"):
            self._lines += 1
            self._line_bytes = 0
        return True

    def _end(self, error):
        self.error, self._ended, self._buffer = error, True, b""
