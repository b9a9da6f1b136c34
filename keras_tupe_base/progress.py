"""Heartbeat lines while a blocking call runs, so no wait is silent for long (the WordPiece
learner's merges, XLA's compilation of the first training step, an export's tracing).

    with Heartbeat("vocabulary: learning the word pieces"):
        learn()  # blocks; a line every 5 s of silence
"""

import threading
import time


def _print(line):
    print(line, flush=True)


class Heartbeat:
    """Prints `<what>: still working, N s elapsed` every `every` s of silence.

    Usable as a context manager (stops on exceptions too) or with `start()`/`stop()`
    (a Keras callback's hooks). Stopping joins the thread: none is left behind.

    Args:
        what: str. What is being waited for (the line's start).
        every: float. Seconds of silence before a line. Defaults to 5.
        print_fn: callable taking a line. Defaults to `print` (flushed).
    """

    def __init__(self, what, every=5.0, print_fn=None):
        if not every > 0:
            raise ValueError(f"`every` must be > 0 seconds. Received: every={every!r}")
        self.what, self.every = what, every
        self.print_fn = print_fn or _print
        self._stop = threading.Event()
        self._thread = None
        self.start_time = self.last = None

    def start(self):
        if self._thread is not None:
            return self
        self.start_time = self.last = time.perf_counter()
        self._stop.clear()
        self._thread = threading.Thread(target=self._beat, name=f"heartbeat: {self.what}",
                                        daemon=True)
        self._thread.start()
        return self

    def touch(self):
        """Something else was just printed: the next line comes `every` s from now."""
        self.last = time.perf_counter()

    def stop(self):
        if self._thread is None:
            return
        self._stop.set()
        self._thread.join()
        self._thread = None

    @property
    def running(self):
        return self._thread is not None

    def _beat(self):
        while not self._stop.wait(max(self.last + self.every - time.perf_counter(), 0.01)):
            now = time.perf_counter()
            if now - self.last >= self.every:
                self.last = now
                self.print_fn(f"{self.what}: still working, "
                              f"{now - self.start_time:.0f}s elapsed")

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc_info):
        self.stop()
