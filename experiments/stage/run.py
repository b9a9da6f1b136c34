"""`run` (there, on the lent machine): the stage's jobs, a process each, scheduled in the
call until its deadline (`window.run`), every record streamed into `$OUT` as it changes."""

import io
import json
import lzma
import math
import os
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
from importlib.metadata import distributions

from experiments import records
from experiments.config import StudyError, load_config, variants, vocabulary_record_path
from experiments.plans import finetune_plan
from experiments.run import write_record
from experiments.stage import budget, specs, window
from experiments.stage.jobs import read_encoder


def run(name, out, tiny=False, deadline=None, started=None, folder=None, encoders=None,
        call=1):
    """Runs the stage until `deadline` seconds after `started` (epoch seconds, default now),
    streaming its records into `out`; `encoders`: what an earlier call brought home,
    fine-tuned without pre-training again; `call`: a planned window's first or second call
    (`planned_work`). Returns the stage record."""
    machine, spec = specs.load_stages()["machine"], specs.stage_spec(name)
    started = started or time.time()
    deadline = deadline or machine["call_seconds"] - 15
    stop = started + deadline - specs.STOP_RESERVE
    if stop - time.time() < specs.MIN_RUN_SECONDS:
        raise StudyError(f"--deadline {deadline:g} s from --started leaves "
                         f"{stop - time.time():.0f} s once the install ({time.time() - started:.0f}"
                         f" s so far) and the stop ({specs.STOP_RESERVE} s) are counted: a run "
                         f"needs {specs.MIN_RUN_SECONDS} s. Give a longer --deadline.")
    if "plan" in spec and call == 1:  # a window whose calibration sets its budget
        specs.check_calibration_fits(name, spec, tiny, deadline, started)
    folder = folder or os.path.join(specs.STAGE_DIR, name + ("_tiny" if tiny else ""))
    # Before anything imports Keras: a fresh HOME has no keras.json, and Keras's default
    # backend is TensorFlow, which the lent machine lacks.
    os.environ.setdefault("KERAS_BACKEND", "jax")
    _check_packages(folder)
    work = planned_work(name, tiny) if "plan" in spec else os.path.join(folder, "work")
    logs = os.path.join(work, "logs")
    lines = _planned_call(work, call) if "plan" in spec else []
    if "plan" in spec and call == 1:  # a window starts from nothing, as there
        shutil.rmtree(work, ignore_errors=True)
    for made in ("runs", "results", "logs") if tiny and "plan" not in spec else ():
        shutil.rmtree(os.path.join(work, made), ignore_errors=True)  # from nothing, as there
    if not os.path.exists(os.path.join(folder, "vocab.txt")):
        with tarfile.open(os.path.join(folder, "data.tar.xz")) as archive:
            archive.extractall(folder, filter="data")
    pretrain, then = (specs.stage_configs(spec, tiny, work) if call == 1 or lines else (
        load_config(os.path.join(work, "pretrain.json")),  # as the first call's plan left them
        load_config(os.path.join(work, "finetune.json"))))
    os.makedirs(os.path.join(out, specs.ENCODERS, pretrain["study"] if pretrain else ""),
                exist_ok=True)
    stage = {"stage": name, "tiny": tiny, "card": _card(),
             "command": records.command_line(sys.argv[1:], "python -m experiments.stage"),
             "versions": records.machine(),  # and the packages, to check gpu_image.txt by
             "pip_list": sorted(f"{d.metadata['Name']}=={d.version}" for d in distributions()),
             "started": records.now(), "install_seconds": round(time.time() - started, 1),
             "processes": [], "encoders": {}, **({"call": call, "notes": lines}
                                                  if "plan" in spec else {})}
    stage["_stop"] = stop  # a planned window's calibration plans until then
    jobs = _jobs(spec, pretrain, then, tiny, work, out, stage, encoders)
    stream = Stream(out, home_folders(spec, pretrain, then, work), stage, logs)
    if pretrain:
        _lay_out(pretrain, then, folder)
    env = job_environment()
    pace = specs.gpu_pace()
    if "calibrate" in spec:  # its rounds need their processes at once
        stage["parallel"] = max(spec["calibrate"]["processes"])
    elif "plan" in spec:  # the variants' grids and compiles at once, then their fine-tuning
        stage["parallel"] = 2 * len(pretrain["variants"])
    elif pace["calibrated"] and not tiny:  # as many as served the card best where S0
        stage["parallel"] = max(pace["at_once"], 1 + sum(  # measured it, and one fine-tuning
            label.startswith("pretrain ") for label, _, _ in jobs))  # beside pre-training
    else:
        stage["parallel"] = max(1, (os.cpu_count() or 2) // 2)
    _schedule(jobs, stage["parallel"], stop, logs, env, stage, stream)
    if "plan" in spec and call == 1:  # a calibration that never planned: its record says so
        budget.note_unplanned(work, next(p for p in stage["processes"] if p["run"] == "calibrate"))
    stage["seconds"] = round(time.time() - started, 1)
    stream(force=True)
    print(f"stage {name}: {stage['seconds']:.0f} s; in {out}: "
          f"{', '.join(sorted(os.listdir(out)))}", flush=True)
    return stage


def job_environment():
    """Every job's environment: this one, and one persistent compilation cache for every
    process, outside the carried folder (a call's carry replaces that folder, so a cache in
    it starts empty each call; in the temporary folder it lasts while the machine is warm)."""
    return {**os.environ, "XLA_PYTHON_CLIENT_PREALLOCATE": "false", "PYTHONUNBUFFERED": "1",
            "TF_CPP_MIN_LOG_LEVEL": "2",
            "JAX_COMPILATION_CACHE_DIR": os.path.join(tempfile.gettempdir(), "stage_xla_cache"),
            "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS": "0"}


def planned_work(name, tiny=False):
    """A planned window's work folder (its configs, run folders, records and each call's
    logs): in the machine's temporary folder, outside the carried `.stage/NAME`, which each
    call's carry replaces, so a second call on the same warm machine finds the first's."""
    return os.path.join(tempfile.gettempdir(), "stage_work", name + ("_tiny" if tiny else ""))


def _planned_call(work, call):
    """The notes of a planned window's call: a second call keeps the first call's logs aside
    (`budget.FIRST_LOGS`) and plans from them; one that finds no first call's work here (a
    fresh machine: it is gone) says so in one line, and plans nothing (a call alone needs
    the calibration and the grids first: a first call's)."""
    if call == 1:
        return []
    if not os.path.exists(os.path.join(work, "logs", budget.PLAN)) and not os.path.exists(
            budget.plan_path(work, budget.FIRST_LOGS)):
        line = (f"nothing planned: call {call} finds no first call's work here ({work} is "
                "absent: a fresh machine), so nothing of it can go on; a window starts with "
                "its first call's command")
        print(line, flush=True)
        return [line]
    if os.path.exists(os.path.join(work, budget.FIRST_LOGS)):  # a second call again: the
        shutil.rmtree(os.path.join(work, "logs"), ignore_errors=True)  # last one's went home
    elif os.path.exists(os.path.join(work, "logs")):  # the first call's: home already
        os.rename(os.path.join(work, "logs"), os.path.join(work, budget.FIRST_LOGS))
    return []


def home_folders(spec, pretrain, then, work):
    """What the stage sends home in its records pack, `(arcname, folder)`: each study's
    records, the logs and, for the calibration, its results; nothing else written comes."""
    return ([(c["study"], records.record_dir(c)) for c in (pretrain, then) if c]
            + [("logs", os.path.join(work, "logs"))]
            + ([("calibration", os.path.join(work, "calibration", "results"))]
               if "calibrate" in spec else []))


def _check_packages(folder):
    """Names each module the run path needs that this machine lacks, with the real error,
    and each wheel file `prepare` listed that did not arrive."""
    missing = []
    for module, wheel in (("keras", "keras"), ("keras_hub", "keras-hub"), ("jax", "jax"),
                          ("grain", "grain"), ("subword_nmt", "subword-nmt")):
        try:
            __import__(module)
        except ImportError as error:
            missing.append(f"{wheel} ({type(error).__name__}: {error})")
    if missing:
        listed = os.path.join(folder, specs.WHEELS_LIST)
        wheels = open(listed).read().split() if os.path.exists(listed) else []
        absent = [w for w in wheels if not os.path.exists(os.path.join(folder, "wheels", w))]
        raise StudyError(f"This machine cannot import: {'; '.join(missing)}. " + (
            f"Not carried: {', '.join(absent)} (listed in {listed}, not in {folder}/wheels/). "
            if absent else "") + f"Carry the wheels ({folder}/wheels/, made by `prepare`) and "
            "install them first: run the command prepare printed, as it is.")


def _card():
    try:
        return subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total,driver_version",
                               "--format=csv,noheader"], capture_output=True, text=True,
                              timeout=30).stdout.strip() or "no GPU"
    except (OSError, subprocess.SubprocessError):
        return f"no GPU ({os.cpu_count()} cores)"


def _lay_out(pretrain, then, folder):
    """Links the carried shards, GLUE or SQuAD files and length batches where the configs
    name them (unless there already), and copies the vocabulary there."""
    links = [("shards/train", pretrain["settings"]["shards"]),
             ("shards/valid", pretrain["settings"]["valid_shards"])]
    if then and then["kind"] == "length":
        from experiments.length_study import prepared_dir  # imports keras_tupe

        links.append(("length", prepared_dir(then)))
    elif then:
        links.append(("squad/squad.json", then["squad_file"]) if then.get("squad_file")
                     else ("glue", then["data_dir"]))
    for source, target in (link for link in links if not os.path.exists(link[1])):
        os.makedirs(os.path.dirname(os.path.abspath(target)), exist_ok=True)
        os.symlink(os.path.abspath(os.path.join(folder, source)), target)
    vocab = pretrain["vocabulary"]
    if not os.path.exists(vocab["file"]):
        os.makedirs(os.path.dirname(vocab["file"]), exist_ok=True)
        shutil.copy(os.path.join(folder, "vocab.json"), vocabulary_record_path(vocab))
        shutil.copy(os.path.join(folder, "vocab.txt"), vocab["file"])


# What a damaged carried encoder raises as it is read: its xz stream, its tar, its weights.
UNREADABLE = (EOFError, OSError, ValueError, lzma.LZMAError, tarfile.TarError)


def _skipped(stage, label, path, error):
    stage["processes"].append({"run": label, "exit": None, "stopped": (
        f"not started: {path} unreadable ({type(error).__name__}: {error})")})
    print(f"{path}: unreadable ({type(error).__name__}: {error}); its fine-tuning is not run, "
          "the others go on", flush=True)


def _jobs(spec, pretrain, then, tiny, work, out, stage, carried=None):
    """Every process of the stage, `(label, command, ready)`, in priority order; `ready`
    says, once a second, whether it may start now. An encoder in `carried` is laid where
    its run kept it, and its variant is not pre-trained again; one that cannot be read is
    named in the record and not fine-tuned, and the other jobs go on."""
    if "command" in spec:
        return [("benchmark", [sys.executable, "-m", *spec["command"], "--out",
                               os.path.join(work, "logs", "benchmark"), "--overwrite",
                               *(specs.TINY["benchmark"] if tiny else [])], None)]
    if "calibrate" in spec:
        return _calibration_jobs(spec["calibrate"], tiny, work, pretrain, then, stage)
    if "plan" in spec:
        return _planned_jobs(spec, tiny, work, pretrain, then, stage)
    chosen, ended, seen = specs.chosen_variants(spec, pretrain), stage.setdefault("_ended", {}), {}
    # Keras's steps_per_execution, a divisor of eval_every and the save steps (5 at --tiny).
    speed = ["--steps-per-execution", str(math.gcd(spec.get("steps_per_execution", 1),
                                                   pretrain["settings"]["eval_every"],
                                                   *pretrain["settings"]["save_steps"]))]
    trained = [v.name for v in chosen if not specs.carried_path(carried, specs.encoder_name(
        pretrain["study"], v.name, pretrain["settings"]["steps"]))]
    jobs = [(f"pretrain {v}", _experiment("pretrain", pretrain, ["--variants", v, *speed]),
             None) for v in trained]
    if then["kind"] == "length":
        jobs.append(("length", _experiment("length", then, [
            "--variants", *[v.name for v in chosen]]),
            lambda: all(ended.get(f"pretrain {v.name}") for v in chosen)))
    fraction = {round(f * pretrain["settings"]["steps"]): f for f in then["checkpoints"]}
    first, later, tuning = [], [], []
    for job in specs.finetune_jobs(spec, pretrain, then):
        # ready once its checkpoint is written (the final model: once its run ended)
        final = fraction[job["step"]] == 1
        ready = (lambda init=job["init"], v=job["variant"], final=final: os.path.exists(init)
                 and (not final or v not in trained or ended.get(f"pretrain {v}")))
        label = f"{job['variant']} step {job['step']}"
        encoder = specs.encoder_name(job["pretrain_study"], job["variant"], job["step"])
        if specs.carried_path(carried, encoder):  # home already: laid out, not written again
            try:
                read_encoder(specs.carried_path(carried, encoder), job["init"], job["vocab"])
            except UNREADABLE as error:  # this encoder's fine-tuning is lost, not the rest
                _skipped(stage, f"encoder {label}", specs.carried_path(carried, encoder), error)
                continue
        else:
            (first if final else later).append((f"encoder {label}", [
                sys.executable, "-m", "experiments.stage", "encoder", job["init"],
                os.path.join(out, specs.ENCODERS, encoder)], ready))
        tuning.append((f"finetune {label}", _experiment("finetune", then, [
            "--variants", job["variant"], "--checkpoints", repr(fraction[job["step"]]),
            *speed]), ready))

    def write_records():  # from the run folders: also a run killed mid-block
        for v in chosen:
            metrics = os.path.join(v.run_dir, "metrics.csv")
            mark = os.path.exists(metrics) and os.stat(metrics).st_mtime_ns, v.is_finished
            if seen.get(v.name) != mark:
                seen[v.name] = mark
                write_record(pretrain, v)
    stage["_records"] = write_records
    return jobs + first + later + tuning  # the final encoders first


def _calibration_jobs(spec, tiny, work, pretrain, then, stage):
    """S0: the pre-training rounds one after the other, then fine-tuning (from the first
    round's step-0 checkpoint) and the gradient test, then the summary."""
    folder, ended, jobs = os.path.join(work, "calibration"), stage.setdefault("_ended", {}), []

    def after(labels):
        return lambda: all(ended.get(label) for label in labels)
    until = str(spec["blocks"] * pretrain["settings"]["eval_every"])
    for n in spec["processes"]:
        config = specs.write_config(folder, f"pace_{n}.json", {
            **specs.raw_config(pretrain), "study": f"pace_{n}", "variants": {
                f"p{i}": {"variant": "bert_a"} for i in range(n)}})
        jobs += [(f"pace {n} p{i}", _experiment("pretrain", config, [
            "--variants", f"p{i}", "--until-step", until]), after([j[0] for j in jobs]))
            for i in range(n)]  # timed alone: each round after the one before
    paces = [label for label, _, _ in jobs]
    for task in then["tasks"]:
        config = specs.write_config(folder, f"finetune_{task}.json", {
            **specs.raw_config(then), "study": f"finetune_{task}",
            "pretrain_configs": ["pace_1.json"],
            "variants": ["p0"], "checkpoints": [0.0], "checkpoint_variants": {"0.0": ["p0"]},
            "tasks": [task], "learning_rates": then["learning_rates"][:1], "seeds": [0, 1],
            "selection_seed": None, "edge_learning_rates": [],
            "task_settings": {task: {
                "max_train_examples": specs.TINY["examples"] if tiny else 2000}},
            "settings": {**then["settings"], "epochs": 1, "pad_each_batch": False}})
        jobs.append((f"finetune {task}", _experiment("finetune", config, []), after(paces)))
    jobs.append(("gradients", [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                               "tests/layers/test_fused_gradients.py"], after(paces)))
    return jobs + [("summary", [sys.executable, "-m", "experiments.stage.calibrate", work],
                    after([label for label, _, _ in jobs]))]


def _planned_jobs(spec, tiny, work, pretrain, then, stage):
    """A planned window (W1). Its first call: the benchmark headline (unless its record is
    committed: `headline_record`), then the calibration that sets the budget for this call
    and the second (`experiments.stage.budget`), then every variant's seeds pre-trained as one
    program, the variants at once, and each variant's encoders fine-tuned once its grid
    ended. Its second call (`stage["call"]` 2): the second call's plan (`budget.
    plan_second_call`), then the fine-tuning the first left, of the variants whose grids
    finished. No study job starts unless its call's plan says it fits."""
    ended, plan = stage.setdefault("_ended", {}), spec["plan"]
    groups = list(pretrain["variants"])

    def planned():
        return (budget.read_plan(work) or {}).get("plan", {}).get("run")

    def finetune(group, ready, *first):  # a variant's encoders as one program a task
        names = [v.name for v in variants(pretrain) if v.group == group]
        return (f"finetune {group}", [sys.executable, "-m", "experiments.stage", "finetune",
                                      then["_path"], *names, *first], ready)
    if stage.get("call") == 2 and stage["notes"]:  # a fresh machine: nothing goes on
        budget.write_second(work, {"run": False, "call": 2}, stage["notes"], None)
        return []
    if stage.get("call") == 2:
        budget.plan_second_call(work, stage["_stop"], plan["margin"])
        trained = [g for g in groups if all(v.is_finished for v in variants(pretrain)
                                            if v.group == g)]
        return [finetune(group, planned) for group in trained]
    done = specs.headline_record(stage["stage"])  # also at --tiny: the command the card runs
    if done:
        stage["notes"] = stage.get("notes", []) + [f"headline: not measured again, its "
                                                   f"record is committed ({done})"]
    headline = [*specs.load_stages()["benchmark"], *plan["headline"].split()]
    jobs = [] if done else [("benchmark", [
        sys.executable, "-m", *headline, "--out", os.path.join(work, "logs", "benchmark"),
        "--overwrite", *(specs.TINY["benchmark"] if tiny else [])], None)]
    jobs.append(("calibrate", [
        sys.executable, "-m", "experiments.stage.budget", work, "--stop", f"{stage['_stop']:.0f}",
        "--second", "0" if tiny else f"{specs.second_call_seconds():.0f}", "--margin",
        str(plan["margin"]), "--most", "1" if tiny else str(plan["most"])],
        lambda: done or "benchmark" in ended))
    # The grids start with the calibration (their set-up and compile on the host while the
    # card is timed) and train once the plan is written, its steps.
    jobs += [(f"pretrain {group}", [sys.executable, "-m", "experiments.stage", "pretrain",
                                    pretrain["_path"], group, "--plan-of", work],
              lambda: done or "benchmark" in ended) for group in groups]
    # Beside each grid, on the host: its fine-tuning programs, once it wrote an encoder
    # (seed 0's initialization, before its first step), into the shared compilation cache.
    for group in groups:
        names = [v.name for v in variants(pretrain) if v.group == group]
        inits = [job["init"] for job in finetune_plan(then, names)]
        jobs.append((f"compile {group}", [
            sys.executable, "-m", "experiments.stage", "compile", then["_path"], *names,
            "--plan-of", work], lambda inits=inits: planned() and any(map(os.path.isdir, inits))))
    # At --tiny (a CPU of two cores) a variant's fine-tuning also waits for its compile
    # rather than compiling the same programs beside it.
    return jobs + [finetune(group, lambda group=group: planned() and ended.get(
        f"pretrain {group}") and (not tiny or f"compile {group}" in ended), "--first-call-of",
                            work) for group in groups]


def _experiment(command, config, extra):
    return [sys.executable, "-m", "experiments.run", command, *config["_flag"], *extra]


def _schedule(jobs, parallel, stop, logs, env, stage, stream):
    """Runs the jobs in the window until `stop` (`window.run`), recording each as it ends
    (an encoder's last log line: its name, sha256 and size) and streaming the records every
    tick; a run killed mid-block is recorded where it stopped."""
    ended, write_records = stage.setdefault("_ended", {}), stage.get("_records", lambda: None)

    def on_end(record, log):
        if record["run"].startswith("encoder ") and record["exit"] == 0:
            with open(log) as f:
                written = json.loads(f.read().strip().splitlines()[-1])
            stage["encoders"][written.pop("encoder")] = written
        stage["processes"].append(record)
        ended[record["run"]] = not record["stopped"]
        if record["stopped"] != "not started":
            print(f"{record['run']}: exit {record['exit']}"
                  f"{' (stopped at the deadline)' if record['stopped'] else ''}", flush=True)

    window.run(jobs, parallel, stop, logs, env, on_end=on_end,
               tick=lambda: (write_records(), stream()), grace=specs.STOP_GRACE)
    write_records()


class Stream:
    """Writes the stage record into `logs` and packs `folders` (`(arcname, folder)`, `logs`
    among them) into `out/records.tar.gz` whenever a file in them changed: written aside,
    then renamed, so a kill at any moment leaves the last whole pack."""

    def __init__(self, out, folders, stage, logs):
        self.out, self.folders, self.stage, self.logs = out, folders, stage, logs
        self.signature = self.text = None

    def __call__(self, force=False):
        text = json.dumps({k: v for k, v in self.stage.items() if not k.startswith("_")},
                          indent=2) + "\n"
        if text != self.text:
            self.text = records.write_text(os.path.join(self.logs, "stage.json"), text) and text
        files = sorted(os.path.join(root, name) for _, folder in self.folders
                       for root, _, names in os.walk(folder) for name in names)
        signature = [(path, os.stat(path).st_mtime_ns, os.stat(path).st_size)
                     for path in files if os.path.exists(path)]
        if signature == self.signature and not force:
            return
        self.signature, partial = signature, os.path.join(self.out, specs.PACK + ".partial")
        with tarfile.open(partial, "w:gz") as archive:
            for arcname, folder in self.folders:
                for root, _, names in os.walk(folder):
                    for name in sorted(filter(_a_record, names)):
                        _pack(archive, os.path.join(root, name), os.path.join(
                            arcname, os.path.relpath(os.path.join(root, name), folder)))
        if os.path.getsize(partial) > specs.load_stages()["machine"]["back_file_bytes"]:
            raise StudyError(f"The records pack to {os.path.getsize(partial) / 2**20:.1f} "
                             "MiB, more than one file that comes back.")
        os.replace(partial, os.path.join(self.out, specs.PACK))


def _a_record(name):
    """Whether a file named `name` in a records folder is sent home: not an output folder's
    lock (`.<name>.lock`, beside each results folder: a writer's), nor a file being written
    (`staging.partial_path`'s `.partial`: never complete, never read)."""
    return not (name.startswith(".") and name.endswith(".lock")) and ".partial" not in name


def _pack(archive, path, arcname):
    """Adds the file at `path`; a JSON-lines record up to its last newline only (a row
    being appended as it is read comes whole with the next pack). One that vanished (a
    record written aside and renamed meanwhile) comes with the next pack."""
    try:
        with open(path, "rb") as f:
            content = f.read()
        info = archive.gettarinfo(path, arcname)
    except FileNotFoundError:
        return
    if path.endswith(".jsonl"):
        content = content[:content.rfind(b"\n") + 1]
    info.size = len(content)
    archive.addfile(info, io.BytesIO(content))
