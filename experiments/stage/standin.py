"""A stand-in of the lent GPU machine, to rehearse a stage as it will run there.

    .venv/bin/python -m experiments.stage.standin [--stage S1] [--kill-after S] [--command CMD]
    .venv/bin/python -m experiments.stage.standin --full --deadline 420 [--encoders DIR]

The lent machine has CPython 3.12 with its image's packages (experiments/stage/gpu_image.txt)
and no TensorFlow, no network, a fresh HOME and no KERAS_BACKEND; the repository arrives
as a copy of its tracked and untracked-not-ignored files plus what a call carries. This
builds that here: a virtual environment of CPython 3.12 holding only those packages, and a
copy of the tree with the stage prepared at the tiny size (`experiments.stage prepare
--tiny`, which also downloads the stage's wheels); then runs the command `prepare` printed,
verbatim, in that copy with only the venv's `python3` on PATH, and collects what came back
in `$OUT` into records. `--kill-after S` kills the command's whole process group S seconds
in, and every job still working in the copy (each runs in a session of its own), then
checks that every file the stage sends home written at least `TICK` seconds before the
kill came back whole. `--command` runs another command in the same place (e.g. an older
stage's). `--full` prepares the stage as the lent machine gets it (not `--tiny`: the real
encoders, data and plan) and runs its command with `--deadline` cut to what this CPU can
spare: the next window's command, rehearsed until its deadline stops it. `--second-call`
(a planned window) then runs the second command `prepare` printed in the same copy, HOME
and TMPDIR (a warm machine: the first call's work is still there), with its own `$OUT`,
and collects it too. Exits 1 with the reason when the stage fails; `make test-window` runs
W1.
"""

import argparse
import glob
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from experiments import records
from experiments.config import load_config
from experiments.stage import collect, run, specs

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
IMAGE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "gpu_image.txt")
TICK = 3  # a record reaches $OUT within a second of being written; this leaves room


def python312():
    """A CPython 3.12 here, or exit naming where it was looked for."""
    candidates = [os.environ.get("STANDIN_PYTHON"), shutil.which("python3.12"),
                  *sorted(glob.glob(os.path.expanduser("~/.pyenv/versions/3.12*/bin/python3.12")),
                          reverse=True)]
    for candidate in filter(None, candidates):
        if subprocess.run([candidate, "-c", "import sys; assert sys.version_info[:2] == (3, 12)"],
                          capture_output=True).returncode == 0:
            return candidate
    sys.exit("error: no CPython 3.12 here (looked at $STANDIN_PYTHON, python3.12 on PATH and "
             "~/.pyenv/versions/3.12*): the stand-in of the GPU machine needs one; install "
             "it, e.g. `pyenv install 3.12`, or set STANDIN_PYTHON.")


def build(root):
    """A fresh virtual environment with the image's packages alone."""
    venv = os.path.join(root, "venv")
    subprocess.run([python312(), "-m", "venv", venv], check=True)
    subprocess.run([os.path.join(venv, "bin", "python"), "-m", "pip", "install", "-q",
                    "--disable-pip-version-check", "-r", IMAGE], check=True,
                   env={**os.environ, "PIP_CONFIG_FILE": os.devnull})  # PyPI alone
    return venv


def copy_tree(root, carried, repo=REPO):
    """The repository as the lent machine receives it, with the carried folder."""
    copy = os.path.join(root, "repo")
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                           cwd=repo, capture_output=True, check=True).stdout.split(b"\0")
    for name in (n.decode() for n in names if n):
        if os.path.isfile(os.path.join(repo, name)):
            os.makedirs(os.path.dirname(os.path.join(copy, name)), exist_ok=True)
            shutil.copy2(os.path.join(repo, name), os.path.join(copy, name))
    shutil.copytree(os.path.join(repo, carried), os.path.join(copy, carried), symlinks=True)
    return copy


def run_there(command, copy, venv, root, kill_after=None, timeout=1800, out="out"):
    """`command` in `copy` as the lent machine runs it, its `$OUT` `root/out`; returns
    (exit code, $OUT, kill time). HOME and TMPDIR stay from call to call (a warm machine)."""
    out, home, tmp = (os.path.join(root, name) for name in (out, "home", "tmp"))
    os.makedirs(out)
    for folder in (home, tmp):
        os.makedirs(folder, exist_ok=True)
    env = {"PATH": f"{os.path.join(venv, 'bin')}:/usr/local/bin:/usr/bin:/bin", "HOME": home,
           "OUT": out, "TMPDIR": tmp, "LANG": "C.UTF-8"}
    print(f"$ {command}", flush=True)
    process = subprocess.Popen(["bash", "-c", command], cwd=copy, env=env,
                               start_new_session=True)
    try:
        code = process.wait(timeout=kill_after or timeout)
        return code, out, None
    except subprocess.TimeoutExpired:
        killed = time.time()
        os.killpg(process.pid, signal.SIGKILL)
        for pid in left_behind(copy):  # as the lent machine's end: nothing runs on
            os.kill(pid, signal.SIGKILL)
        return process.wait(), out, killed


def left_behind(copy):
    """The processes still working in `copy` (their working folder): the stage's jobs run
    in sessions of their own, so they outlive a kill of the command's process group."""
    pids = []
    for pid in (int(entry) for entry in os.listdir("/proc") if entry.isdigit()):
        try:
            cwd = os.readlink(f"/proc/{pid}/cwd")
        except OSError:  # ended meanwhile, or not ours to read
            continue
        if cwd == copy or cwd.startswith(copy + os.sep):
            pids.append(pid)
    return pids


def check_kill(name, copy, back, killed, tiny=True, tmp=None):
    """Every file that stage `name` sends home (`run.home_folders`: its studies' records
    and its logs) written in the copy `TICK` s before the kill came back whole, as collected
    into `back`; what it writes and does not send (the floors' `majority_class.json`)
    is not counted. A planned window works in the machine's temporary folder (`tmp`, the
    stand-in's). Returns the files that did not."""
    spec = specs.stage_spec(name)
    work = os.path.join(copy, specs.STAGE_DIR, name + ("_tiny" if tiny else ""), "work")
    if "plan" in spec:
        work = run.planned_work(name, tiny).replace(tempfile.gettempdir(), tmp, 1)
    logs = collect.call_logs(os.path.join(back, "records"), name, records.read_json(
        os.path.join(work, "logs", "stage.json"), {}).get("started"))
    written = [os.path.join(work, f"{kind}.json") for kind in ("pretrain", "finetune")]
    configs = (list(map(load_config, written)) if "plan" in spec and all(
        map(os.path.exists, written)) else specs.stage_configs(spec, tiny, work))
    missing = []
    for arcname, folder in run.home_folders(spec, *configs, work):  # as the run wrote them
        folder = os.path.join(copy, folder)  # a full stage's records: the copy's docs/
        for path in (os.path.join(root, n) for root, _, names in os.walk(folder) for n in names):
            member = "/".join([arcname, *os.path.relpath(path, folder).split(os.sep)])
            here = collect.collected_path(os.path.join(back, "records"), name, member, logs)
            if os.path.getmtime(path) < killed - TICK and not (os.path.exists(here) and open(
                    here, "rb").read() == open(path, "rb").read()):
                missing.append(member)
    return missing


def main(argv=None):
    parser = argparse.ArgumentParser(prog="python -m experiments.stage.standin",
                                     description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--stage", default="S1")
    parser.add_argument("--kill-after", type=float, help="kill the command after S seconds")
    parser.add_argument("--command", help="run this instead of the printed command")
    parser.add_argument("--keep", help="a folder to work in and keep (default: a temporary one)")
    parser.add_argument("--repo", default=REPO, help="another checkout (e.g. an older commit)")
    parser.add_argument("--encoders", help="what an earlier rehearsal brought home (its "
                        "out/encoders): prepared to travel, fine-tuned, not pre-trained again")
    parser.add_argument("--full", action="store_true", help="the stage at its real size, "
                        "its command's --deadline cut to --deadline")
    parser.add_argument("--deadline", type=int, default=400,
                        help="with --full: the seconds the command may run here (default 400)")
    parser.add_argument("--second-call", action="store_true", help="a planned window: then "
                        "its second command, in the same copy and temporary folder")
    args = parser.parse_args(argv)
    root = args.keep or tempfile.mkdtemp(prefix="gpu_standin_")
    start = time.time()
    venv = build(root)
    print(f"stand-in venv: {time.time() - start:.0f} s", flush=True)
    lines = subprocess.run([sys.executable, "-m", "experiments.stage", "prepare", args.stage,
                            *([] if args.full else ["--tiny"]),
                            *(["--encoders", args.encoders] if args.encoders else [])],
                           cwd=args.repo, check=True, capture_output=True,
                           text=True).stdout.strip().splitlines()
    print("\n".join(lines), flush=True)
    command = args.command or next(
        line for line in lines if line.startswith("command (")).split("): ", 1)[1]
    if args.full:
        command = re.sub(r"--deadline \d+", f"--deadline {args.deadline}", command)
    folder = args.stage if args.full else f"{args.stage}_tiny"
    copy = copy_tree(root, os.path.join(specs.STAGE_DIR, folder), args.repo)
    code, out, killed = run_there(command, copy, venv, root, args.kill_after)
    print(f"exit {code} after {time.time() - start:.0f} s; came back: {sorted(os.listdir(out))}",
          flush=True)
    back = os.path.join(root, "back")
    bring_home(args.stage, out, back)
    if args.second_call and not killed and code == 0:  # at once, on the same warm machine
        second = next(line for line in lines if line.startswith("second call")).split(
            "): ", 1)[1]
        if args.full:
            second = re.sub(r"--deadline \d+", f"--deadline {args.deadline}", second)
        code, out, _ = run_there(second, copy, venv, root, out="out_2")
        print(f"second call: exit {code} after {time.time() - start:.0f} s; came back: "
              f"{sorted(os.listdir(out))}", flush=True)
        bring_home(args.stage, out, back)
    if killed:
        missing = check_kill(args.stage, copy, back, killed, tiny=not args.full,
                             tmp=os.path.join(root, "tmp"))
        print(f"killed at {killed - start:.0f} s; records written {TICK} s before the kill "
              f"and not back: {missing or 'none'}", flush=True)
        return 1 if missing else 0
    if code != 0:
        print(f"error: the stage's command exited {code} on the stand-in", file=sys.stderr)
        return 1
    return verify(args.stage, back, args.encoders, cut_short=args.full)


def bring_home(name, out, back):
    """What came back in `out`, collected into `back/records` as `stage collect` does."""
    if os.path.exists(os.path.join(out, "records.tar.gz")):
        collected = subprocess.run([sys.executable, "-c", (
            "from experiments.stage import collect; print('\\n'.join(collect.collect("
            f"{name!r}, {out!r}, results_dir={back!r})))")], cwd=REPO, check=True,
            capture_output=True, text=True).stdout.split()
        print(f"collected {len(collected)} files:", *sorted(
            os.path.relpath(p, back) for p in collected), sep="\n  ")


def verify(stage, back, encoders=None, cut_short=False):
    """What a finished tiny stage brings back: every process ended well, every record;
    with carried `encoders`, no pre-training and fine-tuning of each of them. `cut_short`
    (the deadline stopped it): every process ended well or was stopped by the deadline."""
    log = json.load(open(os.path.join(back, "records", "stages", stage, "logs", "stage.json")))
    bad = [p for p in log["processes"]
           if (p["exit"] != 0 or p["stopped"]) and not (cut_short and p["stopped"])]
    if bad or not log["processes"]:
        print(f"error: processes that did not end well: {bad or 'none ran'}", file=sys.stderr)
        return 1
    runs = [p["run"] for p in log["processes"]]
    if encoders and (any(run.startswith("pretrain") for run in runs)
                     or sum(run.startswith("finetune") for run in runs) != len(glob.glob(
                         os.path.join(encoders, "*", "*.tar")))):
        print(f"error: with carried encoders, pre-training ran or an encoder was not "
              f"fine-tuned: {runs}", file=sys.stderr)
        return 1
    print(f"every process ended well: {[p['run'] for p in log['processes']]}; encoders "
          f"{log['encoders']}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
