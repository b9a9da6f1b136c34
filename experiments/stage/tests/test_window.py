"""The window runner (`experiments/stage/window.py`): jobs N at once, each once it is ready, every
end heard of, stopped at the deadline with SIGTERM, then SIGKILL. Jobs that must overlap
meet at a barrier of files; none of these tests times anything."""

import os
import signal
import sys

import pytest

from experiments.stage import window

# A job of steps on files: `make PATH`, `remove PATH`, `need PATH` (exit 2 if absent) and
# `wait PATH` (until it exists; after 120 s, exit 1).
STEPS = ("import os, sys, time\n"
         "for step, path in zip(sys.argv[1::2], sys.argv[2::2]):\n"
         "    if step == 'make':\n        open(path, 'w').close()\n"
         "    elif step == 'remove':\n        os.remove(path)\n"
         "    elif step == 'need' and not os.path.exists(path):\n        sys.exit(2)\n"
         "    elif step == 'wait':\n"
         "        end = time.time() + 120\n"
         "        while not os.path.exists(path):\n"
         "            if time.time() > end:\n                sys.exit(1)\n"
         "            time.sleep(0.02)\n")


def _job(*steps):
    return [sys.executable, "-c", STEPS, *map(str, steps)]


@pytest.fixture(autouse=True)
def quick_ticks(monkeypatch):
    monkeypatch.setattr(window, "TICK", 0.05)


def test_n_jobs_run_at_once_and_no_more(tmp_path):
    """Three jobs, two at a time: each waits for `go`, which the tick makes once two markers
    exist, so the run ends well only if two ran at once; a job's marker goes as it ends, so
    the tick never counts more markers than jobs running."""
    markers, go, counts = tmp_path / "markers", tmp_path / "go", []
    markers.mkdir()

    def tick():
        counts.append(len(os.listdir(markers)))
        if counts[-1] >= 2:
            go.touch()
    jobs = [(label, _job("make", markers / label, "wait", go, "remove", markers / label))
            for label in "abc"]
    ended = window.run(jobs, 2, float("inf"), str(tmp_path / "logs"), dict(os.environ),
                       tick=tick)
    assert [record["exit"] for record in ended] == [0, 0, 0]
    assert max(counts) == 2  # never three at once


def test_a_job_starts_once_the_file_it_waits_for_exists_and_each_end_is_heard(tmp_path):
    """`tune` waits for the checkpoint that `train` writes (and fails if it is not there as
    it starts); `train` then waits for `tune`'s marker: both end well only if `tune` started
    after the checkpoint, while `train` ran."""
    checkpoint, release, heard, ticks = tmp_path / "checkpoint", tmp_path / "release", [], []
    # train: once released (five ticks in), the checkpoint; then it waits for tune's marker.
    train = _job("wait", release, "make", checkpoint, "wait", tmp_path / "tuned")
    tune = _job("need", checkpoint, "make", tmp_path / "tuned")

    def tick():
        ticks.append(1)
        if len(ticks) == 5:
            release.touch()
    ended = window.run([window.Job("train", train), window.Job("tune", tune, checkpoint.exists)],
                       2, float("inf"), str(tmp_path / "logs"), dict(os.environ), tick=tick,
                       on_end=lambda record, log: heard.append((record, log)))
    assert {record["run"]: record["exit"] for record in ended} == {"train": 0, "tune": 0}
    assert [record for record, _ in heard] == ended  # each heard of as it ended
    assert all(not record["stopped"] for record in ended)
    assert sorted(os.path.basename(log) for _, log in heard) == ["train.log", "tune.log"]


def test_at_the_stop_a_running_job_gets_sigterm_and_a_waiting_one_is_not_started(tmp_path):
    jobs = [("hang", _job("make", tmp_path / "hang", "wait", tmp_path / "never")),
            ("blocked", [sys.executable, "-c", "pass"], lambda: False)]
    ended = window.run(jobs, 2, 0, str(tmp_path / "logs"), dict(os.environ))
    assert [(r["run"], r["stopped"]) for r in ended] == [  # a deadline past: nothing starts
        ("hang", "not started"), ("blocked", "not started")]
    ended = window.run(jobs, 2, float("inf"), str(tmp_path / "logs"), dict(os.environ),
                       stop_when=(tmp_path / "hang").exists)  # stopped once it runs
    assert [(r["run"], r["exit"], r["stopped"]) for r in ended] == [
        ("hang", -signal.SIGTERM, True), ("blocked", None, "not started")]


def test_a_job_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    ignore = ("import signal, sys, time\n"
              "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
              "open(sys.argv[1], 'w').close()\n"
              "while True:\n    time.sleep(1)\n")
    marker = tmp_path / "ignoring"  # made once SIGTERM is ignored: the stop comes after it
    ended = window.run([("stubborn", [sys.executable, "-c", ignore, str(marker)])], 1,
                       float("inf"), str(tmp_path / "logs"), dict(os.environ),
                       stop_when=marker.exists, grace=0.2)
    assert [(r["run"], r["exit"], r["stopped"]) for r in ended] == [
        ("stubborn", -signal.SIGKILL, True)]
