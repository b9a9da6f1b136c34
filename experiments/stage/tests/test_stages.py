"""The GPU stages (`experiments/stage/`): defined, sized, stopped in time, packed and
collected without loss; S1, S2a, S5a and S6 rehearsed end to end at tiny size under JAX
without TensorFlow (S3 and S4 are S1 with other seeds, the other S2 and S5 parts the same
commands with other rows and variants)."""

import hashlib
import json
import math
import os
import re
import subprocess
import sys
import tarfile
import time

import numpy as np
import pytest

from experiments import length_study, plans, records
from experiments.config import StudyError, load_config
from experiments.stage import cli, collect, jobs, prepare, run, specs, window

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))))
NO_TENSORFLOW = os.path.join(REPO, "tests", "no_tensorflow")
DATA = os.path.join(REPO, "..", "shared", "data")


def test_the_size_check_names_what_travels_and_the_untracked_file_to_move(tmp_path,
                                                                          monkeypatch):
    """Issue 67: "83.3 MiB would travel, the limit is 64 MiB", after 1.5 minutes of
    preparation, without naming the untracked 70 MB file that made it."""
    subprocess.run(["git", "init", "-q", str(tmp_path)], check=True)
    (tmp_path / "code.py").write_bytes(b"x" * 2**19)
    subprocess.run(["git", "-C", str(tmp_path), "add", "code.py"], check=True)
    (tmp_path / "big.bin").write_bytes(b"\0" * 2**21)
    monkeypatch.chdir(tmp_path)
    assert prepare._check_size("S1", 2**22) == {"tracked files": 2**19, "untracked files": 2**21}
    with pytest.raises(StudyError) as refused:
        prepare._check_size("S1", 2**21, {"the prepared data": 2**18, "the wheels": 0})
    assert str(refused.value) == (
        "Stage S1 does not fit: 2.8 MiB would travel, the limit is 2 MiB: tracked files 0.5 MiB, "
        "untracked files 2.0 MiB, the prepared data 0.2 MiB, the wheels 0.0 MiB. Move the "
        "untracked files that need not travel out of the working tree (or list them in "
        ".gitignore), e.g. big.bin (2.0 MiB).")


@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs ../shared/data (GLUE, to count)")
@pytest.mark.parametrize("basis", ["estimates", "calibration"])
def test_every_stage_names_configs_that_load_and_fit_its_window(basis, monkeypatch):
    """On the stated estimates and on the committed S0 calibration (the H200's): each
    stage fits a call, its pre-training and a first fine-tuning run of each encoder."""
    if basis == "estimates":
        monkeypatch.setattr(specs, "CALIBRATIONS", ())
    assert specs.gpu_pace()["calibrated"] is (basis == "calibration")
    stages = specs.load_stages()["stages"]
    assert {"S0", "S1", "S2a", "S3", "S4", "S5a", "S5b", "S5c", "S6"} <= set(stages)
    for name in stages:
        spec = specs.stage_spec(name)
        line, *more = prepare.estimate(name, spec)  # raises when it would not fit
        if "plan" in spec:  # planned on the card; here the three windows' estimates
            assert [text[:4] for text in more] == ["(i) ", "(ii)", "(iii"], more
            assert all(re.search(r"about \d+.* basis: ", text) for text in more), more
            continue
        assert re.search(r"about \d+ s of \d+ s .* basis: ", line), line
        if name in ("S1", "S3", "S4"):  # the study's own count of S1's fine-tuning steps
            assert re.search(r"then a first sst2 run on each final encoder at once \(939 "
                             r"steps\)", line), line
            assert re.fullmatch(rf"{name} fine-tuning in all: 5 encoders x 14310 steps, about "
                                r"\d+ s at \d+ at once, beside and after pre-training; what a "
                                r"call does not finish goes on from the encoders it brought "
                                r"home", *more)
        pretrain, then = specs.stage_configs(spec)
        if then:
            assert then["pretrain_configs"] == [spec["pretrain"]]
        if name == "S1":  # its encoders carried: the same first runs, no pre-training
            carried, *_ = prepare.estimate(name, spec, carried=True)
            assert carried.startswith("S1: no pre-training (every final encoder carried), "
                                      "then a first sst2 run"), carried
            needed = [int(re.search(r"about (\d+) s of", text)[1]) for text in (carried, line)]
            assert 0 < needed[0] < needed[1]


def test_s1_trains_the_plateau_control_and_fine_tunes_what_it_trained():
    pretrain, finetune = specs.stage_configs(specs.stage_spec("S1"))
    long_v2 = load_config("long_v2_jax")
    assert pretrain["settings"] == long_v2["settings"]
    assert pretrain["variants"]["bert_a_pre"] == {"variant": "bert_a",
                                                  "layer_norm_position": "pre"}
    assert finetune["checkpoints"] == [1.0, 0.3, 0.0]
    assert finetune["checkpoint_variants"] == {"0.3": ["tupe_a"], "0.0": ["bert_a"]}
    assert finetune["tasks"] == ["sst2", "stsb", "rte", "cola", "mrpc"]


def test_a_stage_too_long_for_its_window_is_refused_with_the_figure_before_any_work(
        monkeypatch, tmp_path):
    monkeypatch.setattr(specs, "CALIBRATIONS", ())  # the stated estimates: four at once
    spec = {**specs.stage_spec("S1"), "variants": ["a", "b", "c", "d", "e"]}
    monkeypatch.setattr(specs, "stage_spec", lambda name: spec)
    with pytest.raises(StudyError, match=r"Stage S1 does not fit: S1: 5 pre-training runs of "
                                         r"16000 steps, 4 at once.*about \d+ s of \d+ s"):
        prepare.prepare("S1", dest=str(tmp_path / "stage"))
    assert not os.path.exists(tmp_path / "stage")  # refused before it made anything


def test_the_s2_parts_measure_every_row_of_the_benchmark_once_with_fused_training():
    """Together the parts time every model at 128 and 512 tokens, training and inference,
    flash off, and flash on wherever it changes the path (without dropout, so a training
    step can fuse); a part that would outrun its window is refused with the figure."""
    from benchmarks.encoders.cli import FLASH, parse_args
    from benchmarks.encoders.worker import attention_choice
    from keras_tupe_base.presets import VARIANTS

    parts = [n for n, s in specs.load_stages()["stages"].items() if "benchmark" in s]
    measured = []
    for name in parts:
        args = parse_args(specs.stage_spec(name)["command"][1:])
        assert (args.size, args.precisions, args.xla, args.dropout) == (
            "base", ["mixed_bfloat16"], "on", 0.0)
        measured += [(v, n, m, f) for v in args.variants for n in args.seq_lens
                     for m in args.modes for f in FLASH[args.flash]]
    models = [*VARIANTS, "keras_hub_bert"]
    fusable = [v for v in models if attention_choice(v, True, "train", 0, False)[1] != "einsum"]
    assert len(fusable) == 10 and "huang_m4" not in fusable
    wanted = {(v, n, m, f) for v in models for n in (128, 512) for m in ("train", "infer")
              for f in ([False, True] if v in fusable else [False])}
    assert wanted <= set(measured) and len(measured) == len(set(measured))
    assert set(measured) - wanted == {(v, n, m, True) for v in ("huang_m3", "huang_m4")
                                      for n in (128, 512) for m in ("train", "infer")}
    spec = specs.stage_spec("S2a")
    spec["command"] += ["--modes", "train", "infer"]
    with pytest.raises(StudyError, match=r"Stage S2a does not fit: S2a: 16 benchmark rows"):
        prepare.estimate("S2a", spec)


def test_the_stage_records_each_job_as_the_window_ends_it(tmp_path, monkeypatch):
    """`_schedule` runs the jobs in the window (`experiments/stage/window.py`, tested there) and
    records each end in the stage record: an encoder's name, sha256 and size from its log's
    last line; a job never ready as not started; the records streamed at every tick."""

    monkeypatch.setattr(window, "TICK", 0.05)
    line = {"encoder": "encoders/s/v__step0000050.tar", "sha256": "ab", "bytes": 3}
    encoder = [sys.executable, "-c", f"print('loading'); print({json.dumps(line)!r})"]
    record, streamed = {"processes": [], "encoders": {}, "_records": lambda: streamed.append(1)}, []
    run._schedule([("encoder v step 50", encoder, None), ("never", encoder, lambda: False)],
                    2, math.inf, str(tmp_path / "logs"), dict(os.environ), record,
                    lambda **_: None)
    assert record["encoders"] == {line["encoder"]: {"sha256": "ab", "bytes": 3}}
    assert [(p["run"], p["exit"], p["stopped"]) for p in record["processes"]] == [
        ("encoder v step 50", 0, False), ("never", None, "not started")]
    assert record["_ended"] == {"encoder v step 50": True, "never": False} and streamed


def test_every_job_shares_one_compilation_cache_outside_the_carried_folder():
    """A call's carry replaces `.stage/NAME`: a cache in it would start empty every call."""
    cache = run.job_environment()["JAX_COMPILATION_CACHE_DIR"]
    assert os.path.isabs(cache) and not cache.startswith(os.path.abspath(specs.STAGE_DIR))
    assert not os.path.abspath(cache).startswith(REPO + os.sep)


def test_records_stream_into_out_as_they_change_and_are_never_half_there(tmp_path):
    """Every change is packed at the next tick, written aside then renamed: what `out`
    holds at any moment is a whole pack of what was there at the last tick."""
    config = {"results_dir": str(tmp_path / "there"), "study": "stage_x"}
    folder = records.record_dir(config, "bert_a")
    os.makedirs(folder)
    logs, out = str(tmp_path / "logs"), str(tmp_path / "out")
    os.makedirs(logs)
    os.makedirs(out)
    record = {"stage": "SX", "processes": [], "seconds": 1.0}  # a whole call's (not killed)
    stream = run.Stream(out, [("stage_x", records.record_dir(config)), ("logs", logs)],
                          record, logs)
    # An output folder's lock beside a record (run_protocol's): a writer's, not sent home.
    open(os.path.join(os.path.dirname(folder), ".bert_a.lock"), "w").close()
    for step in (200, 400):
        here = str(tmp_path / f"here_{step}")
        with open(os.path.join(folder, "metrics.csv"), "a") as f:
            f.write(f"{step},6.1\n")
        record["processes"].append({"run": f"block {step}"})
        stream()
        assert os.listdir(out) == [specs.PACK]  # no .partial left
        collected = collect.collect("SX", out, results_dir=here)
        back = open(os.path.join(here, "records", "stage_x", "bert_a", "metrics.csv")).read()
        assert back == open(os.path.join(folder, "metrics.csv")).read()
        assert json.load(open(os.path.join(here, "records", "stages", "SX", "logs",
                                           "stage.json")))["processes"][-1]["run"] == (
            f"block {step}")
        assert len(collected) == 2
        with tarfile.open(os.path.join(out, specs.PACK)) as pack:
            assert not [n for n in pack.getnames() if n.endswith(".lock")]
    mtime = os.path.getmtime(os.path.join(out, specs.PACK))
    time.sleep(0.05)
    stream()  # nothing changed: not packed again
    assert os.path.getmtime(os.path.join(out, specs.PACK)) == mtime


def test_what_comes_back_never_replaces_a_differing_record(tmp_path, monkeypatch, capsys):
    config = {"results_dir": str(tmp_path / "there"), "study": "stage_x"}
    folder = records.record_dir(config, "bert_a")
    os.makedirs(folder)
    with open(os.path.join(folder, "metrics.csv"), "w") as f:
        f.write("step,loss\n200,6.1\n")
    logs, out = str(tmp_path / "logs"), str(tmp_path / "out")
    os.makedirs(logs)
    os.makedirs(out)
    run.Stream(out, [("stage_x", records.record_dir(config)), ("logs", logs)],
                 {"stage": "SX", "seconds": 1.0}, logs)()
    here = str(tmp_path / "here")
    written = collect.collect("SX", out, results_dir=here)
    assert sorted(os.path.relpath(p, here) for p in written) == [
        "records/stage_x/bert_a/metrics.csv", "records/stages/SX/logs/stage.json"]
    mtimes = [os.stat(path).st_mtime_ns for path in written]
    assert collect.collect("SX", out, results_dir=here) == []  # the same bytes: nothing written
    assert [os.stat(path).st_mtime_ns for path in written] == mtimes
    os.makedirs(tmp_path / "cli")
    monkeypatch.chdir(tmp_path / "cli")  # the command collects into ./docs/results
    assert cli.main(["collect", "SX", out]) == 0 and "wrote" in capsys.readouterr().out
    assert cli.main(["collect", "SX", out]) == 0
    assert capsys.readouterr().out == "nothing new: every record there is here already\n"
    with open(written[0], "w") as f:
        f.write("step,loss\n200,9.9\n")  # a record that differs is never replaced silently
    with pytest.raises(StudyError, match="exists with other content"):
        collect.collect("SX", out, results_dir=here)
    assert open(written[0]).read() == "step,loss\n200,9.9\n"


def test_a_jsonl_record_that_grew_is_collected_and_one_that_lost_rows_is_not(tmp_path):
    """The S5 parts append to one length record: each brings back the rows here, then its own."""
    config = {"results_dir": str(tmp_path / "there"), "study": "lengths"}
    here = str(tmp_path / "here")
    path = os.path.join(here, "records", "lengths", "results.jsonl")
    logs, out = str(tmp_path / "logs"), str(tmp_path / "out")
    os.makedirs(logs)
    os.makedirs(out)
    for rows, fits in (('{"a": 1}\n', True), ('{"a": 1}\n{"b": 2}\n', True),
                       ('{"b": 2}\n', False)):
        os.makedirs(records.record_dir(config), exist_ok=True)
        with open(os.path.join(records.record_dir(config), "results.jsonl"), "w") as f:
            f.write(rows)
        run.Stream(out, [("lengths", records.record_dir(config)), ("logs", logs)],
                     {"stage": "S5x"}, logs)()
        if fits:
            collect.collect("S5x", out, results_dir=here)
            assert open(path).read() == rows
        else:
            with pytest.raises(StudyError, match="exists with other content"):
                collect.collect("S5x", out, results_dir=here)
    assert open(path).read() == '{"a": 1}\n{"b": 2}\n'


def test_each_call_of_a_window_brings_its_logs_home_beside_the_others(tmp_path):
    """Two calls of one window: the first call's logs in `stages/NAME/logs`, the second's
    (another start) in `logs_2`, the fine-tuning record that grew taken; collecting either
    pack again writes nothing, in any order."""
    config = {"results_dir": str(tmp_path / "there"), "study": "glue_x"}
    here, path = str(tmp_path / "here"), records.record_dir(config, "bert_a", "results.jsonl")
    os.makedirs(os.path.dirname(path))
    outs = []
    for call, rows in ((1, '{"task": "sst2"}\n'), (2, '{"task": "sst2"}\n{"task": "stsb"}\n')):
        logs, out = str(tmp_path / f"logs_{call}"), str(tmp_path / f"out_{call}")
        os.makedirs(logs)
        os.makedirs(out)
        with open(path, "w") as f:
            f.write(rows)
        with open(os.path.join(logs, "plan.json"), "w") as f:
            f.write(f'{{"call": {call}}}')
        run.Stream(out, [("glue_x", records.record_dir(config)), ("logs", logs)],
                     {"stage": "W1x", "started": f"2026-11-28 15:0{call}:00 UTC",
                      "seconds": 1.0}, logs)()
        written = collect.collect("W1x", out, results_dir=here)
        assert sorted(os.path.relpath(p, here) for p in written) == sorted([
            "records/glue_x/bert_a/results.jsonl",
            *(f"records/stages/W1x/{'logs' if call == 1 else 'logs_2'}/{name}"
              for name in ("plan.json", "stage.json"))])
        outs.append(out)
    stages = os.path.join(here, "records", "stages", "W1x")
    assert [json.load(open(os.path.join(stages, logs, "plan.json")))["call"]
            for logs in ("logs", "logs_2")] == [1, 2]
    assert open(os.path.join(here, "records", "glue_x", "bert_a", "results.jsonl")).read() == (
        '{"task": "sst2"}\n{"task": "stsb"}\n')
    for out in outs + outs[::-1]:
        assert collect.collect("W1x", out, results_dir=here) == []
    assert sorted(os.listdir(stages)) == ["logs", "logs_2"]


def test_a_machine_without_keras_hub_is_told_which_wheel_and_the_real_error(tmp_path):
    """And names the wheel file that `prepare` listed and that did not arrive."""
    blocker = tmp_path / "sitecustomize.py"
    blocker.write_text("import sys\nsys.modules['keras_hub'] = None\n")
    folder = tmp_path / "S1"
    (folder / "wheels").mkdir(parents=True)
    wheels = ["keras_hub-0.32.0-py3-none-any.whl", "namex-0.1.0-py3-none-any.whl"]
    (folder / specs.WHEELS_LIST).write_text("".join(f"{wheel}\n" for wheel in wheels))
    (folder / "wheels" / wheels[1]).touch()  # keras-hub's was left out on the way
    code = ("from experiments.stage import run\n"
            f"try:\n    run._check_packages({str(folder)!r})\n"
            "except Exception as error:\n    print(error)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(tmp_path)}).stdout
    # (Where JAX is not installed, as under `make test`, it is named too, after keras-hub.)
    assert re.search(r"cannot import: .*keras-hub \(ModuleNotFoundError: import of keras_hub "
                     r"halted; None in sys.modules\)(; [^.]*)?\. Not carried: "
                     r"keras_hub-0\.32\.0-py3-none-any\.whl "
                     rf"\(listed in {re.escape(str(folder))}/wheels\.txt, not in "
                     rf".*\)\. Carry the wheels \({re.escape(str(folder))}/wheels/", out), out


def test_the_stand_ins_kill_check_counts_only_what_the_stage_sends_home(tmp_path):
    """A file the stage writes but does not pack (the floors' majority_class.json, beside
    the study records) is not counted as lost; a streamed record that did not come is."""
    from experiments.stage.standin import TICK, check_kill

    copy, back = tmp_path / "copy", tmp_path / "back"
    work = copy / specs.STAGE_DIR / "S1_tiny" / "work"
    pretrain, then = specs.stage_configs(specs.stage_spec("S1"), tiny=True, work=str(work))
    record = records.record_dir(then, "stage_s1", "bert_a", "results.jsonl")
    killed = time.time()
    for path in (record, os.path.join(work, "results", "records", "majority_class.json")):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").write("{}\n")  # a whole row, as `append_jsonl` writes it
        os.utime(path, (killed - TICK - 1, killed - TICK - 1))  # before the kill
    out = tmp_path / "out"
    out.mkdir()
    os.makedirs(work / "logs")
    run.Stream(str(out), run.home_folders(specs.stage_spec("S1"), pretrain, then,
                                              str(work)), {"stage": "S1"}, str(work / "logs"))()
    collect.collect("S1", str(out), results_dir=str(back))
    assert check_kill("S1", str(copy), str(back), killed) == []
    os.remove(back / "records" / "glue_s1" / "stage_s1" / "bert_a" / "results.jsonl")
    assert check_kill("S1", str(copy), str(back), killed) == [
        "glue_s1/stage_s1/bert_a/results.jsonl"]


def test_prepare_takes_the_committed_shared_vocabulary_instead_of_training_it(
        tmp_path, monkeypatch, capsys):
    """S1, S3 and S4 share `vocab_v2.txt`: committed with its record, it is the one their
    records name, and a checkout without it copies it (sha256 checked), trains nothing; a
    committed copy that is not the one its record names is refused."""
    from experiments import config as study_config

    pretrain, _ = specs.stage_configs(specs.stage_spec("S3"))
    committed = os.path.join(study_config.VOCABULARIES, "vocab_v2.txt")
    recorded = json.load(open(os.path.join(study_config.VOCABULARIES, "vocab_v2.json")))
    assert os.path.basename(pretrain["vocabulary"]["file"]) == "vocab_v2.txt"
    assert recorded["settings"] == study_config.vocabulary_settings(pretrain["vocabulary"])
    run = json.load(open(os.path.join(specs.RECORDS, "stage_s1", "bert_a", "run_config.json")))
    assert hashlib.sha256(open(committed, "rb").read()).hexdigest() == recorded["sha256"] == (
        run["vocabulary_sha256"])
    config = {**pretrain, "vocabulary": {**pretrain["vocabulary"],
                                         "file": str(tmp_path / "runs" / "vocab_v2.txt")}}
    assert study_config.ensure_vocabulary(config) == recorded["sha256"]
    out = capsys.readouterr().out
    assert out.startswith(f"Copied the committed vocabulary {committed} -> ") and (
        "Training" not in out)
    assert (tmp_path / "runs" / "vocab_v2.txt").read_bytes() == open(committed, "rb").read()
    assert study_config.ensure_vocabulary(config) == recorded["sha256"]  # there now: kept
    (tmp_path / "committed").mkdir()
    (tmp_path / "committed" / "vocab_v2.txt").write_text("[PAD]\n")
    (tmp_path / "committed" / "vocab_v2.json").write_text(json.dumps(recorded))
    monkeypatch.setattr(study_config, "VOCABULARIES", str(tmp_path / "committed"))
    config["vocabulary"]["file"] = str(tmp_path / "other" / "vocab_v2.txt")
    with pytest.raises(StudyError, match=r"vocab_v2.txt is not the vocabulary its record "
                                         r"names .* restore it from git"):
        study_config.ensure_vocabulary(config)
    assert not (tmp_path / "other").exists()


def test_the_stand_in_finds_the_jobs_a_kill_of_the_commands_group_leaves_running(tmp_path):
    """A job in a session of its own, working in the copy, is found (and killed) by its id;
    nothing working elsewhere is."""
    from experiments.stage.standin import left_behind

    (tmp_path / "copy").mkdir()
    job = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"],
                           cwd=tmp_path / "copy", start_new_session=True)
    try:
        assert left_behind(str(tmp_path / "copy")) == [job.pid]
        assert left_behind(str(tmp_path / "co")) == []  # a prefix is not the folder
    finally:
        job.kill()
        job.wait()
    assert left_behind(str(tmp_path / "copy")) == []


def test_a_deadline_too_short_for_one_run_is_refused_at_once(tmp_path):
    started = time.time() - 50  # the install took 50 s
    with pytest.raises(StudyError, match=r"--deadline 90 s from --started leaves \d+ s once the "
                                         r"install \(50 s so far\).*Give a longer --deadline"):
        run.run("S1", str(tmp_path / "out"), deadline=90, started=started,
                  folder=str(tmp_path / "none"))
    assert not os.path.exists(tmp_path / "out")


def test_the_device_command_starts_the_clock_before_the_install_and_sets_the_backend():
    command = prepare.device_command("S1", ".stage/S1", False, 585)
    assert command.startswith("T0=$(date +%s); python3 -m pip install ")
    assert command.endswith("KERAS_BACKEND=jax python3 -m experiments.stage run S1 "
                            "--started $T0 --deadline 585 --out $OUT")


def test_s3_and_s4_are_s1_with_seeds_1_and_2_also_at_tiny_size(tmp_path):
    s1 = specs.stage_spec("S1")
    s1_pretrain, s1_finetune = specs.stage_configs(s1)
    s1_tiny = specs.stage_configs(s1, tiny=True, work=str(tmp_path / "S1"))[0]
    assert s1_tiny["settings"]["seed"] == s1_pretrain["settings"]["seed"] == 0
    for name, seed in (("S3", 1), ("S4", 2)):
        spec = specs.stage_spec(name)
        assert {k: v for k, v in spec.items() if k not in ("pretrain", "finetune", "like")
                } == {k: v for k, v in s1.items() if k not in ("pretrain", "finetune")}
        pretrain, finetune = specs.stage_configs(spec)
        assert pretrain["settings"] == {**s1_pretrain["settings"], "seed": seed}
        for key in ("size", "vocabulary", "variants", "runs_dir", "results_dir"):
            assert pretrain[key] == s1_pretrain[key], key
        assert finetune["pretrain_configs"] == [pretrain["study"]]
        same = ("study", "pretrain_configs", "description", "_flag", "_path")
        assert {k: v for k, v in finetune.items() if k not in same} == {
            k: v for k, v in s1_finetune.items() if k not in same}
        tiny = specs.stage_configs(spec, tiny=True, work=str(tmp_path / name))[0]
        assert tiny["settings"] == {**s1_tiny["settings"], "seed": seed,
                                    "shards": tiny["settings"]["shards"],
                                    "valid_shards": tiny["settings"]["valid_shards"]}


def _rehearse(name, tmp_path, variants=None):
    """prepare (here, with TensorFlow), then run in a process where TensorFlow cannot be
    imported (nor in the processes it starts), then collect; `variants`: only these of the
    stage's. A package the lent machine lacks (neither in its image, gpu_image.txt, nor
    carried) cannot be imported there, nor here (tests/no_tensorflow, LENT_MACHINE). Returns
    the files collected and the stage's log. (W1 runs on the stand-in: `make test-window`.)"""
    dest = str(tmp_path / "stage")
    lines = prepare.prepare(name, tiny=True, dest=dest)
    assert f"python3 -m experiments.stage run {name} --tiny --started $T0 " in lines[-1]
    env = {**os.environ, "PYTHONPATH": NO_TENSORFLOW, "LENT_MACHINE": "1"}
    env.pop("KERAS_BACKEND", None)  # as there: the stage chooses JAX itself
    folder = os.path.join(dest, name + "_tiny")
    code = ("from experiments.stage import run, specs; " + (
            f"spec = {{**specs.stage_spec({name!r}), 'variants': {variants!r}}}; "
            "specs.stage_spec = lambda name: spec; " if variants else "") +
            f"run.run({name!r}, {str(tmp_path / 'out')!r}, tiny=True, deadline=1500, "
            f"folder={folder!r})")
    result = subprocess.run([sys.executable, "-c", code], cwd=REPO, env=env,
                            capture_output=True, text=True, timeout=1800)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    machine = specs.load_stages()["machine"]
    assert os.path.getsize(tmp_path / "out" / specs.PACK) <= machine["back_file_bytes"]
    written = collect.collect(name, str(tmp_path / "out"), results_dir=str(tmp_path / "back"))
    log = json.load(open(next(p for p in written if p.endswith("logs/stage.json"))))
    assert log["processes"] and all(p["exit"] == 0 for p in log["processes"]), log
    return written, log


def test_the_lent_machine_lacks_what_its_image_and_the_wheels_do_not_hold():
    """The rehearsals' stand-in refuses a package the lent machine lacks (kagglehub, which
    keras-hub imports if it can) and lets the image's through, and the standard library."""
    code = ("import importlib\n"
            "for name in ('kagglehub', 'absl', 'numpy', 'json'):\n"
            "    try:\n        importlib.import_module(name)\n        print(name, 'ok')\n"
            "    except ImportError as error:\n        print(name, error.name, error)\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO, capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": NO_TENSORFLOW, "LENT_MACHINE": "1"}).stdout
    assert out.splitlines() == [
        "kagglehub kagglehub No module named 'kagglehub' (the lent GPU machine has no "
        "kagglehub)", "absl ok", "numpy ok", "json ok"], out


def test_an_encoder_comes_home_in_bfloat16_and_is_fine_tuned_from_there(tmp_path):
    """`write_encoder` packs a run's masked LM in bfloat16 (one tar, its sha256 printed for
    the stage record); `read_encoder` lays it where the run kept it, in float32: every
    weight the trained one's rounded to bfloat16, and it reads text as before."""
    import keras_hub
    import ml_dtypes

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)
    from keras_tupe import TupeBackbone, TupeMaskedLM, TupeMaskedLMPreprocessor, TupeTokenizer
    from tests.reference_params import randomize_weights

    vocabulary = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "a", "fine", "film"]
    backbone = TupeBackbone.from_preset("tupe_r_tiny", vocabulary_size=len(vocabulary))
    randomize_weights(backbone, seed=1)
    model = TupeMaskedLM(backbone, preprocessor=TupeMaskedLMPreprocessor(
        TupeTokenizer(vocabulary=vocabulary), sequence_length=8))
    model.save_to_preset(str(tmp_path / "run" / "preset"))
    path = tmp_path / "out" / specs.ENCODERS / "study" / "tupe_r__step0000050.tar"
    path.parent.mkdir(parents=True)
    printed = subprocess.run([sys.executable, "-m", "experiments.stage", "encoder",
                              str(tmp_path / "run" / "preset"), str(path)], cwd=REPO,
                             capture_output=True, text=True)
    assert printed.returncode == 0, printed.stderr[-2000:]
    line = json.loads(printed.stdout.strip().splitlines()[-1])
    assert line == {"encoder": "encoders/study/tupe_r__step0000050.tar", "bytes": os.path.getsize(
        path), "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}
    assert os.listdir(path.parent) == [path.name]  # nothing half-written beside it
    jobs.read_encoder(str(path), str(tmp_path / "again" / "preset"))
    again = keras_hub.models.MaskedLM.from_preset(str(tmp_path / "again" / "preset"))
    assert [w.path for w in again.weights] == [w.path for w in model.weights]
    for got, want in zip(again.weights, model.weights):
        assert got.dtype == "float32", got.path
        rounded = np.asarray(want.numpy()).astype(ml_dtypes.bfloat16).astype("float32")
        assert np.array_equal(got.numpy(), rounded), got.path
    assert again.preprocessor.tokenizer.get_vocabulary() == vocabulary


@pytest.mark.slow
@pytest.mark.jax
def test_s2a_rehearsed_at_tiny_size_under_jax_without_tensorflow(tmp_path):
    """The benchmark command runs with the part's precision, XLA, flash, mode and dropout at
    the tiny size, and its report comes back: a measured row per model and attention path,
    the flash-on training steps fused (no dropout)."""
    written, log = _rehearse("S2a", tmp_path)
    assert [p["run"] for p in log["processes"]] == ["benchmark"]
    report = json.load(open(next(p for p in written if p.endswith("logs/benchmark.json"))))
    settings = report["settings"]
    assert (settings["backend"], settings["size"], settings["seq_lens"]) == ("jax", "tiny", [32])
    assert (settings["precisions"], settings["xla"], settings["flash"], settings["modes"],
            settings["dropout"]) == (["mixed_bfloat16"], [True], [False, True], ["train"], 0)
    variants = ["bert_a", "tupe_r", "keras_hub_bert"]
    assert sorted((r["variant"], r["flash"]) for r in report["rows"]) == sorted(
        (v, flash) for v in variants for flash in (False, True))
    for row in report["rows"]:
        assert row["status"] == "ok", row.get("error")
        assert row["tokens_per_s"] > 0 and row["precision"] == "mixed_bfloat16"
        if row["variant"] != "keras_hub_bert":
            assert row["attention_path"] == ("fused" if row["flash"] else "einsum"), row
    assert any(p.endswith("logs/benchmark.md") for p in written)


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs ../shared/data (the text and SQuAD)")
def test_s6_rehearsed_at_tiny_size_under_jax_without_tensorflow(tmp_path):
    """Huang's encoders pre-train, and each final encoder is scored on SQuAD (the offline
    article split of a few articles) in one run of the protocol: two of the four (absolute
    and method 4), as a run of the stage takes each alike (the variants' own paths are the
    layers' tests)."""
    variants = ("bert_a", "huang_m4")
    written, _ = _rehearse("S6", tmp_path, variants=list(variants))
    for variant in variants:
        run = json.load(open(tmp_path / "back" / "records" / "huang_long" / variant /
                             "run_config.json"))
        assert run["status"] == "finished"
        assert run["last_step"] == specs.TINY["pretrain"]["steps"]
    results = sorted(p for p in written if p.endswith("results.jsonl"))
    assert [p.split(os.sep)[-3] for p in results] == sorted(variants)  # the final encoders
    for path in results:
        (row,) = records.read_jsonl(path)  # one rate, one seed
        assert row["task"] == "squad" and 0 < row["eval_questions"] <= (
            specs.TINY["squad_questions"])  # the held-out article's first paragraph
        assert row["train_features"] >= specs.TINY["squad"]["max_train_examples"]  # windows
        assert math.isfinite(row["dev"]["eval"]["f1"]), row


@pytest.mark.slow
@pytest.mark.jax
@pytest.mark.skipif(not os.path.isdir(DATA), reason="needs ../shared/data (the text)")
def test_s5a_rehearsed_at_tiny_size_under_jax_without_tensorflow(tmp_path):
    """Two of S5a's encoders pre-train, then are scored at each length from the batches
    prepared here, which are the tf.data route's: the same arrays, so the same scores."""
    import keras_hub

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)

    written, log = _rehearse("S5a", tmp_path, variants=["bert_a", "tupe_r"])
    assert sorted(p["run"] for p in log["processes"]) == [  # no encoder: nothing fine-tunes
        "length", "pretrain bert_a", "pretrain tupe_r"]
    rows = {(r["variant"], r["length"]): r for r in records.read_jsonl(next(
        p for p in written if p.endswith("encodings_long_length/results.jsonl")))}
    assert set(rows) == {(v, n) for v in ("bert_a", "tupe_r", "unigram")
                         for n in specs.TINY["length"]["lengths"]}
    for variant in ("bert_a", "tupe_r"):  # the tiny presets' 128 absolute positions
        assert math.isfinite(rows[(variant, 128)]["loss"])
        assert "absolute positions 32-127 never trained" in rows[(variant, 128)]["note"]
        assert rows[(variant, 256)]["loss"] is None
    work = tmp_path / "stage" / "S5a_tiny" / "work"
    config = load_config(str(work / "length.json"))
    job = plans.length_plan(config, ["bert_a"])[0]
    batches = length_study.Batches(config)
    for length in specs.TINY["length"]["lengths"]:
        prepared, here = batches.get(job, length), batches._tf_data(job, length)
        assert len(prepared) == len(here) == specs.TINY["length"]["batches"]
        for (x, y, w), (x_here, y_here, w_here) in zip(prepared, here):
            assert sorted(x) == sorted(x_here)
            for a, b in [*((x[k], x_here[k]) for k in x), (y, y_here), (w, w_here)]:
                assert a.dtype == b.dtype and np.array_equal(a, b)
    vocabulary = load_config(str(work / "pretrain.json"))["vocabulary"]
    assert np.array_equal(np.load(os.path.join(length_study.prepared_dir(config), "unigram.npz"))
                          ["log_probs"], length_study.unigram_log_probs(vocabulary))
    model = keras_hub.models.MaskedLM.from_preset(job["model"], preprocessor=None)
    loss, _, tokens = length_study.masked_lm_loss(model, batches._tf_data(job, 32))
    assert (loss, tokens) == (pytest.approx(rows[("bert_a", 32)]["loss"], rel=1e-6),
                              rows[("bert_a", 32)]["masked_tokens"])


def test_prepared_length_batches_are_read_back_as_made_and_refused_for_other_settings(tmp_path):
    """A machine without TensorFlow scores the arrays `write_prepared` saved, as they were;
    a file prepared for other settings is refused rather than scored."""
    config = {"runs_dir": str(tmp_path), "study": "lengths"}
    batches = [({"token_ids": np.arange(6, dtype="int32").reshape(2, 3) + i,
                 "mask_positions": np.full((2, 1), i, dtype="int32")},
                np.full((2, 1), 7 + i, dtype="int32"), np.ones((2, 1), "float32") / (i + 1))
               for i in range(2)]
    key = {"length": 3, "masking": {"mask_rate": 0.15}}
    made = length_study._prepared(config, "length_3.npz", key,
                                  lambda: length_study._stack(batches))  # no file: made here
    os.makedirs(length_study.prepared_dir(config))
    length_study.save_prepared(os.path.join(length_study.prepared_dir(config), "length_3.npz"),
                               key, made)
    read = length_study._unstack(length_study._prepared(config, "length_3.npz", key, None))
    assert len(read) == len(batches)
    for (x, y, w), (x0, y0, w0) in zip(read, batches):
        assert sorted(x) == sorted(x0)
        for a, b in [*((x[k], x0[k]) for k in x0), (y, y0), (w, w0)]:
            assert a.dtype == b.dtype and np.array_equal(a, b)
    with pytest.raises(StudyError, match="was prepared for .* prepare it again"):
        length_study._prepared(config, "length_3.npz", {**key, "length": 4}, None)


def test_the_stages_plan_from_the_calibration_once_it_came_back(tmp_path, monkeypatch):
    """S0's record replaces the estimates: a card twice as slow as recorded refuses S1; a
    task's own fine-tuning pace, where the calibration timed it, plans its first run."""
    configs = specs.stage_configs(specs.stage_spec("S1"))
    monkeypatch.setattr(specs, "CALIBRATIONS", ())
    recorded = specs.gpu_pace()
    assert not recorded["calibrated"]
    pace = {k: v for k, v in recorded.items() if k not in ("basis", "calibrated")}
    folder = tmp_path / "logs"
    folder.mkdir()
    monkeypatch.setattr(specs, "CALIBRATIONS", ("nowhere.json", str(folder / "calibration.json")))
    for factor, fits in ((1.0, True), (2.0, False)):
        slower = {**pace, "pretrain_step_seconds": pace["pretrain_step_seconds"] * factor}
        (folder / "calibration.json").write_text(json.dumps({"pace": slower}))
        assert specs.gpu_pace() == {**slower, "calibrated": True,
                                    "basis": f"the S0 calibration ({folder}/calibration.json)"}
        if fits:
            assert "basis: the S0 calibration" in prepare.estimate(
                "S1", specs.stage_spec("S1"), configs=configs)[0]
        else:
            with pytest.raises(StudyError, match="Stage S1 does not fit: .* basis: the S0 "
                                                 "calibration"):
                prepare.estimate("S1", specs.stage_spec("S1"), configs=configs)
    for task, fits in (("rte", True), ("sst2", False)):  # a second a step: S1 starts on sst2
        (folder / "calibration.json").write_text(json.dumps({
            "pace": pace, "finetune_tasks": {task: {"steps": 10, "warm_seconds": 10.0}}}))
        assert specs.gpu_pace()["finetune_task_step_seconds"] == {task: 1.0}
        if fits:
            prepare.estimate("S1", specs.stage_spec("S1"), configs=configs)
        else:
            with pytest.raises(StudyError, match="then a first sst2 run on each final encoder"):
                prepare.estimate("S1", specs.stage_spec("S1"), configs=configs)


def test_a_later_call_fine_tunes_the_encoders_brought_home_without_pre_training(tmp_path):
    """With `--encoders`, a carried final encoder is laid where its run kept it: its
    variant is not pre-trained again and its fine-tuning may start at once."""
    import keras_tupe.models  # noqa: F401  (registers the classes for loading)
    from keras_tupe import TupeBackbone, TupeMaskedLM, TupeMaskedLMPreprocessor, TupeTokenizer

    spec = specs.stage_spec("S1")
    work = str(tmp_path / "work")
    pretrain, then = specs.stage_configs(spec, tiny=True, work=work)
    vocabulary = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "a", "film"]
    model = TupeMaskedLM(TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=7),
                         preprocessor=TupeMaskedLMPreprocessor(TupeTokenizer(
                             vocabulary=vocabulary), sequence_length=8))
    model.save_to_preset(str(tmp_path / "trained"))
    carried = tmp_path / "home" / specs.ENCODERS  # what came back: nothing else beside it
    name = f"bert_a__step{specs.TINY['pretrain']['steps']:07d}.tar"
    (carried / pretrain["study"]).mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "experiments.stage", "encoder", str(tmp_path / "trained"),
                    str(carried / pretrain["study"] / name)], cwd=REPO, check=True,
                   capture_output=True)
    record = {"processes": []}
    jobs = {label: ready for label, _, ready in run._jobs(
        spec, pretrain, then, True, work, str(tmp_path / "out"), record,
        str(carried))}
    assert "pretrain bert_a" not in jobs and "pretrain tupe_a" in jobs
    assert jobs["finetune bert_a step 50"]()  # its encoder is laid out: ready at once
    assert not jobs["finetune tupe_a step 50"]()  # trained here: after its run
    assert os.path.isdir(os.path.join(pretrain["runs_dir"], pretrain["study"], "bert_a",
                                      "preset"))


def test_prepare_carries_the_encoders_compressed_checked_against_their_record(tmp_path):
    """`prepare --encoders`: each encoder a call brought home travels as `.tar.xz`, its
    sha256 checked against the stage record; a later call lays it out with its vocabulary
    (where fine-tuning reads it) and pre-trains nothing whose final encoder came."""
    import lzma

    import keras_tupe.models  # noqa: F401  (registers the classes for loading)
    from keras_tupe import TupeBackbone, TupeMaskedLM, TupeMaskedLMPreprocessor, TupeTokenizer

    spec = specs.stage_spec("S1")
    pretrain, then = specs.stage_configs(spec, tiny=True, work=str(tmp_path / "work"))
    vocabulary = ["[PAD]", "[CLS]", "[SEP]", "[UNK]", "[MASK]", "a", "film"]
    TupeMaskedLM(TupeBackbone.from_preset("bert_a_tiny", vocabulary_size=7),
                 preprocessor=TupeMaskedLMPreprocessor(TupeTokenizer(vocabulary=vocabulary),
                                                       sequence_length=8)
                 ).save_to_preset(str(tmp_path / "trained"))
    home = tmp_path / "home"
    name = f"{pretrain['study']}/bert_a__step{specs.TINY['pretrain']['steps']:07d}.tar"
    (home / specs.ENCODERS / pretrain["study"]).mkdir(parents=True)
    subprocess.run([sys.executable, "-m", "experiments.stage", "encoder", str(tmp_path / "trained"),
                    str(home / specs.ENCODERS / name)], cwd=REPO, check=True, capture_output=True)
    # No record names it (a tiny rehearsal reads only the one beside it): its sha256
    # cannot be checked, so it is refused.
    with pytest.raises(StudyError, match=rf"{name}: no stage record names it \(read .*"
                                         r"they name no encoder\), so its sha256 cannot be "
                                         r"checked: not carried"):
        prepare._carried_encoders("S1", spec, True, str(home / specs.ENCODERS))
    digest = hashlib.sha256((home / specs.ENCODERS / name).read_bytes()).hexdigest()
    (home / "logs").mkdir()  # a record beside it that says another sha256: refused
    for recorded in ("0" * 64, digest):
        (home / "logs" / "stage.json").write_text(json.dumps({"encoders": {
            f"{specs.ENCODERS}/{name}": {"sha256": recorded}}}))
        if recorded != digest:
            with pytest.raises(StudyError, match=f"its sha256 {digest} is not the one its "
                                                 "stage record"):
                prepare._carried_encoders("S1", spec, True, str(home / specs.ENCODERS))
    carried = prepare._carried_encoders("S1", spec, True, str(home / specs.ENCODERS))
    assert carried == {"files": {name: str(home / specs.ENCODERS / name)}, "all": False}
    # As a call brings it back: the record inside the records pack beside the encoders.
    with tarfile.open(home / specs.PACK, "w:gz") as archive:
        archive.add(home / "logs", arcname="logs")
    (home / "logs" / "stage.json").unlink()
    assert prepare._carried_encoders("S1", spec, True, str(home / specs.ENCODERS)) == carried
    with pytest.raises(StudyError, match="none of stage S1's encoders is there"):
        prepare._carried_encoders("S1", spec, True, str(tmp_path))
    # What prepare writes: the same tar, xz-compressed; read as the .tar it was.
    xz = tmp_path / "carried" / (name + ".xz")
    xz.parent.mkdir(parents=True)
    xz.write_bytes(lzma.compress((home / specs.ENCODERS / name).read_bytes()))
    jobs = {label: ready for label, _, ready in run._jobs(
        spec, pretrain, then, True, str(tmp_path / "work"),
        str(tmp_path / "out"), {"processes": []}, str(tmp_path / "carried"))}
    assert "pretrain bert_a" not in jobs and jobs["finetune bert_a step 50"]()
    assert "encoder bert_a step 50" not in jobs and "encoder tupe_a step 50" in jobs
    run_dir = os.path.join(pretrain["runs_dir"], pretrain["study"], "bert_a")
    assert open(os.path.join(run_dir, "vocab.txt")).read().split() == vocabulary
    record = json.load(open(os.path.join(run_dir, "preset", "metadata.json")))
    assert digest in json.dumps(record)


def test_a_damaged_carried_encoder_is_skipped_by_name_and_the_others_go_on(tmp_path, capsys):
    """A carried `.tar.xz` whose bytes changed on the way fails xz's check as it is read:
    its fine-tuning is not run and the record names it; the other encoders' jobs remain."""
    import io
    import lzma

    spec = specs.stage_spec("S1")
    pretrain, then = specs.stage_configs(spec, tiny=True, work=str(tmp_path / "work"))
    tar = io.BytesIO()
    with tarfile.open(fileobj=tar, mode="w") as archive:
        member = tarfile.TarInfo("preset/config.json")
        member.size = 4096
        archive.addfile(member, io.BytesIO(b"{}".ljust(4096)))
    damaged = bytearray(lzma.compress(tar.getvalue()))
    damaged[len(damaged) // 2] ^= 0xFF
    path = tmp_path / "carried" / pretrain["study"] / (
        f"bert_a__step{specs.TINY['pretrain']['steps']:07d}.tar.xz")
    path.parent.mkdir(parents=True)
    path.write_bytes(bytes(damaged))
    record = {"processes": []}
    labels = [label for label, _, _ in run._jobs(
        spec, pretrain, then, True, str(tmp_path / "work"), str(tmp_path / "out"), record,
        str(tmp_path / "carried"))]
    assert "finetune bert_a step 50" not in labels and "pretrain bert_a" not in labels
    assert {"finetune bert_a step 0", "pretrain tupe_a", "finetune tupe_a step 50",
            "pretrain bert_a_pre", "finetune bert_a_pre step 50"} <= set(labels)
    assert record["processes"] == [{"run": "encoder bert_a step 50", "exit": None,
                                    "stopped": record["processes"][0]["stopped"]}]
    assert record["processes"][0]["stopped"].startswith(f"not started: {path} unreadable (")
    assert f"{path}: unreadable (" in capsys.readouterr().out


def test_a_stage_whose_runs_were_recorded_elsewhere_is_refused_without_their_encoders(tmp_path):
    """A run recorded in an earlier window, with no run folder here, is skipped: without
    its encoder its fine-tuning would wait until the deadline. Refused, naming --encoders."""
    from experiments.config import variants

    spec = specs.stage_spec("S1")
    pretrain, then = specs.stage_configs(spec, tiny=True, work=str(tmp_path / "work"))
    chosen = variants(pretrain)
    prepare._recorded_elsewhere(pretrain, then, chosen, None)  # nothing recorded: fine
    record = records.record_dir(pretrain, "bert_a", "run_config.json")
    os.makedirs(os.path.dirname(record))
    open(record, "w").write("{}")
    with pytest.raises(StudyError, match=r"stage_s1: bert_a pre-trained in an earlier window .* "
                                         r"Give --encoders FOLDER"):
        prepare._recorded_elsewhere(pretrain, then, chosen, None)
    home = tmp_path / "home"
    (home / pretrain["study"]).mkdir(parents=True)
    (home / pretrain["study"] / f"bert_a__step{pretrain['settings']['steps']:07d}.tar.xz").touch()
    prepare._recorded_elsewhere(pretrain, then, chosen, str(home))  # its encoder came: fine
    prepare._recorded_elsewhere(pretrain, None, chosen, None)  # nothing waits for it: fine
