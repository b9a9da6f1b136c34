"""A window runner: commands run at most N at once, each as soon as it is ready, until they
have all ended or the deadline comes; then SIGTERM to what still runs, SIGKILL after a
grace. It knows nothing of what the commands do: the caller gives it the jobs and hears of
each one as it ends (`experiments/stage/run.py` streams its records from there).

    from experiments import window
    window.run([("train", ["python", "-m", "x"]),
                ("tune", ["python", "-m", "y"], lambda: os.path.exists("ckpt"))],
               parallel=2, deadline=time.time() + 600, logs="logs", env=dict(os.environ),
               on_end=lambda record, log: print(record))
"""

import os
import signal
import subprocess
import time
from typing import Callable, NamedTuple, Optional

TICK = 1  # seconds between looks at the jobs (who ended, who is ready) and `tick` calls
GRACE = 8  # seconds between SIGTERM and SIGKILL at the deadline
STATUS_EVERY = 60  # seconds between the "running ...; N waiting" lines


class Job(NamedTuple):
    """One command: `label` (unique; its log is `logs/<label>.log`, spaces as `_`), the
    command's argv, and `ready`, asked once a tick whether it may start now (None: at
    once; e.g. `lambda: os.path.exists(path)` to wait for a file another job writes)."""

    label: str
    command: list
    ready: Optional[Callable[[], bool]] = None


def run(jobs, parallel, deadline, logs, env, on_end=None, tick=None, stop_when=None,
        grace=GRACE):
    """Runs `jobs` (`Job`s, or `(label, command, ready)` tuples) in their order, each once it
    is ready, at most `parallel` at once, each in its own process group with its output in
    its log, until none is running and none waiting is ready, or `deadline` (epoch seconds)
    passes, or `stop_when()` says so. Then each job still running gets SIGTERM to its
    group, and SIGKILL once `grace` seconds have passed.

    As each job ends, `on_end(record, log_path)` hears of it, its record `{"run": label,
    "exit": code, "stopped": False, or True when the deadline stopped it, "seconds"}`;
    a job that never started is recorded `{"run", "exit": None, "stopped": "not started"}`
    (its log None). `tick()` is called once a tick, for what the caller streams. Returns
    the records in the order the jobs ended."""
    os.makedirs(logs, exist_ok=True)
    on_end, tick = on_end or (lambda record, log: None), tick or (lambda: None)
    waiting, running, ended = [Job(*job) for job in jobs], {}, []

    def finish(label, stopped):
        process, log, started = running.pop(label)
        log.close()
        record = {"run": label, "exit": process.returncode, "stopped": stopped,
                  "seconds": round(time.time() - started, 1)}
        ended.append(record)
        on_end(record, log.name)

    last_line = begun = time.time()
    while time.time() < deadline and not (stop_when and stop_when()) and (
            running or any(job.ready is None or job.ready() for job in waiting)):
        for job in [j for j in waiting if j.ready is None or j.ready()][:parallel - len(running)]:
            waiting.remove(job)
            log = open(os.path.join(logs, job.label.replace(" ", "_") + ".log"), "w")
            running[job.label] = (subprocess.Popen(
                job.command, stdout=log, stderr=subprocess.STDOUT, env=env,
                start_new_session=True), log, time.time())
        time.sleep(TICK)
        for label in [label for label, entry in running.items() if entry[0].poll() is not None]:
            finish(label, stopped=False)
        tick()
        if time.time() - last_line >= STATUS_EVERY:
            last_line = time.time()
            print(f"{last_line - begun:.0f} s: running {', '.join(running) or 'nothing'}; "
                  f"{len(waiting)} waiting", flush=True)
    for process, _, _ in running.values():
        os.killpg(process.pid, signal.SIGTERM)
    killed_at = time.time() + grace
    for label in list(running):
        process = running[label][0]
        try:
            process.wait(max(0.1, killed_at - time.time()))
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        finish(label, stopped=True)
    for job in waiting:
        record = {"run": job.label, "exit": None, "stopped": "not started"}
        ended.append(record)
        on_end(record, None)
    return ended
