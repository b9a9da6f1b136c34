"""What a GPU window sends home, checked before it is filed (issue 76): `experiments.stage
collect` refuses a damaged pack in one line naming the file, with exit status 2 and nothing
written; never files a rehearsal among the records; records a killed call as killed. And
before a window starts, its deadline against its calibration; while it runs, the
calibration's figures streamed home as they are measured. Packs are built by hand: no
training."""

import io
import json
import os
import re
import tarfile
import time

import pytest

from experiments.stage import budget, cli, collect, run, specs
from experiments.config import StudyError

# A whole call's stage record (`run` adds "seconds" as it ends) and a fine-tuning record.
STAGE = {"stage": "W1x", "tiny": False, "started": "2026-11-28 15:00:00 UTC",
         "processes": [{"run": "calibrate", "exit": 0, "stopped": False, "seconds": 170.0}],
         "seconds": 580.0}
ROWS = b'{"task": "sst2", "score": 80.1}\n{"task": "stsb", "score": 81.2}\n'
RESULTS = "glue_x/stage_x/bert_a/step_0016000/results.jsonl"
PLAN = b'{"plan": {"run": true, "steps": 5000}}\n'


def pack(folder, stage_record=STAGE, changes=None):
    """`folder/records.tar.gz` as `Stream` packs it: a fine-tuning record, then the logs
    (the stage record, a plan), with `changes` ({member: bytes}) over them."""
    files = {RESULTS: ROWS, "logs/stage.json": json.dumps(stage_record, indent=2).encode()
             + b"\n", "logs/plan.json": PLAN, **(changes or {})}
    os.makedirs(folder, exist_ok=True)
    with tarfile.open(os.path.join(folder, specs.PACK), "w:gz") as archive:
        for member, content in files.items():
            info = tarfile.TarInfo(member)
            info.size = len(content)
            archive.addfile(info, io.BytesIO(content))
    return str(folder)


def refused(tmp_path, capsys, out, *flags, stage_name="W1x"):
    """Collects `out` with the command, in a folder of its own (it files under
    ./docs/results); asserts exit status 2, one error line and nothing written there."""
    os.makedirs(tmp_path / "here", exist_ok=True)
    os.chdir(tmp_path / "here")
    assert cli.main(["collect", stage_name, out, *flags]) == 2
    captured = capsys.readouterr()
    assert captured.out == "" and len(captured.err.splitlines()) == 1, captured
    assert os.listdir(tmp_path / "here") == []
    return captured.err


@pytest.fixture(autouse=True)
def _back_to_the_checkout(monkeypatch):
    monkeypatch.chdir(os.getcwd())  # `refused` moves to a folder of its own


def test_a_cut_last_row_of_a_results_jsonl_is_refused(tmp_path, capsys):
    out = pack(tmp_path / "out", changes={RESULTS: ROWS[:-9]})
    err = refused(tmp_path, capsys, out)
    assert f"{out}/records.tar.gz: {RESULTS} is cut: its last line (line 2) ends without a " \
           "newline; fetch the pack again. Nothing filed." in err


def test_a_half_written_plan_is_refused(tmp_path, capsys):
    out = pack(tmp_path / "out", changes={"logs/plan.json": PLAN[:len(PLAN) // 2]})
    assert re.search(r"records\.tar\.gz: logs/plan\.json does not parse whole \(.*\): cut or "
                     r"half-written; fetch the pack again\. Nothing filed\.",
                     refused(tmp_path, capsys, out))


def test_a_cut_stage_record_is_refused_by_name(tmp_path, capsys):
    text = json.dumps(STAGE, indent=2).encode()
    out = pack(tmp_path / "out", changes={"logs/stage.json": text[:len(text) // 2]})
    assert "records.tar.gz: logs/stage.json does not parse whole (" in refused(
        tmp_path, capsys, out)


def test_a_cut_archive_is_refused_in_one_line(tmp_path, capsys):
    out = pack(tmp_path / "out")
    path = os.path.join(out, specs.PACK)
    whole = open(path, "rb").read()
    with open(path, "wb") as f:
        f.write(whole[:len(whole) // 2])
    assert re.search(rf"error: {re.escape(path)} is not a whole archive \(\w+: .*\): cut or "
                     r"damaged on its way here; fetch it again\. Nothing filed\.",
                     refused(tmp_path, capsys, out))


def test_a_rehearsal_is_never_filed_among_the_records(tmp_path, capsys):
    """Its stage record says `"tiny": true` (`run --tiny`): refused where the records are
    committed (docs/results), filed where --results-dir names a folder of its own."""
    out = pack(tmp_path / "out", {**STAGE, "tiny": True})
    assert "is a --tiny rehearsal's pack (logs/stage.json: \"tiny\": true): never filed among " \
           "stage W1x's records in docs/results; give --results-dir a folder of its own" in (
               refused(tmp_path, capsys, out))
    assert cli.main(["collect", "W1x", out, "--results-dir", str(tmp_path / "look")]) == 0
    assert open(tmp_path / "look" / "records" / RESULTS, "rb").read() == ROWS
    assert "wrote" in capsys.readouterr().out
    assert "is stage W1x's pack, not W2's: collect it as `collect W1x" in refused(
        tmp_path, capsys, out, stage_name="W2")


def test_a_killed_call_is_recorded_as_killed_with_what_was_running(tmp_path, capsys):
    """A stage record without "seconds" is one streamed before the call's end: filed as it
    came, with `killed.json` beside it naming the jobs whose logs came but whose end did
    not; a whole call's has none."""
    killed = {key: value for key, value in STAGE.items() if key != "seconds"}
    out = pack(tmp_path / "out", killed, {"logs/calibrate.log": b"plan\n",  # the jobs' logs
                                          "logs/pretrain_tupe_a.log": b"step 400\n"})
    here = str(tmp_path / "here")
    assert collect.collect("W1x", out, results_dir=here)
    logs = os.path.join(here, "records", "stages", "W1x", "logs")
    assert json.load(open(os.path.join(logs, "killed.json"))) == {
        "killed": "killed before its end (its stage record has no \"seconds\": the last one "
                  "streamed); running then: pretrain_tupe_a", "running": ["pretrain_tupe_a"]}
    assert json.load(open(os.path.join(logs, "stage.json"))) == killed  # as it came
    assert "stage W1x: killed before its end" in capsys.readouterr().out
    assert collect.collect("W1x", out, results_dir=here) == []  # the same bytes again
    whole = pack(tmp_path / "whole")
    collect.collect("W1x", whole, results_dir=str(tmp_path / "there"))
    assert not os.path.exists(tmp_path / "there" / "records" / "stages" / "W1x" / "logs" /
                              "killed.json")


def test_a_write_that_fails_midway_leaves_nothing_filed(tmp_path):
    """A file where a folder goes (as a full disk would stop it): the record written before
    it is taken back, and the folders made for it."""
    here = tmp_path / "here"
    os.makedirs(here / "records")
    (here / "records" / "stages").write_text("in the way")
    with pytest.raises(OSError):
        collect.collect("W1x", pack(tmp_path / "out"), results_dir=str(here))
    assert sorted(os.listdir(here / "records")) == ["stages"] and os.listdir(here) == ["records"]


def test_the_stream_packs_whole_rows_and_no_file_being_written(tmp_path):
    """A row being appended as the pack is made, and a record being written aside
    (`.partial`), are not packed: they come whole with the next pack."""
    logs, out, study = tmp_path / "logs", tmp_path / "out", tmp_path / "glue_x"
    for folder in (logs, out, study):
        folder.mkdir()
    (study / "results.jsonl").write_bytes(ROWS + b'{"task": "mr')
    (logs / "plan.json.partial").write_text('{"plan": {"ru')
    run.Stream(str(out), [("glue_x", str(study)), ("logs", str(logs))], dict(STAGE),
                 str(logs))()
    with tarfile.open(out / specs.PACK) as archive:
        assert sorted(archive.getnames()) == ["glue_x/results.jsonl", "logs/stage.json"]
        assert archive.extractfile("glue_x/results.jsonl").read() == ROWS
    assert collect.collect("W1x", str(out), results_dir=str(tmp_path / "here"))


def test_a_deadline_shorter_than_the_calibration_is_refused_naming_the_smallest(tmp_path):
    """W1's first call plans from its calibration: a --deadline that ends before it could
    plan is refused before any work, naming the smallest that fits (at W1's recorded pace);
    that one passes the check."""
    spec, started = specs.stage_spec("W1"), time.time() - 5  # the install took 5 s
    with pytest.raises(StudyError) as error:
        run.run("W1", str(tmp_path / "out"), deadline=150, started=started,
                  folder=str(tmp_path / "none"))
    message = str(error.value)
    assert re.fullmatch(r"--deadline 150 s ends before stage W1's calibration could plan: the "
                        r"install [56] s so far, the calibration about \d+ s at the recorded pace "
                        r"\(docs/results/records/stages/W1/.*/plan\.json\) and the stop 20 s\. "
                        r"Give --deadline \d+ or more\.", message), message
    assert not os.path.exists(tmp_path / "out")
    smallest = int(re.search(r"Give --deadline (\d+)", message).group(1))
    assert smallest > 150
    specs.check_calibration_fits("W1", spec, False, smallest + 1, started)  # fits
    with pytest.raises(StudyError, match="Give --deadline"):
        specs.check_calibration_fits("W1", spec, True, 60, time.time())  # --tiny too


def test_the_calibrations_figures_go_home_as_each_is_measured(tmp_path, monkeypatch):
    """A calibration stopped by the deadline after its pre-training figures (SIGTERM: no
    handler runs) has them on disk in its logs, which the stage streams home; its plan
    record then names them."""
    work = str(tmp_path / "work")
    specs.stage_configs(specs.stage_spec("W1"), True, work)
    measured = os.path.join(work, "logs", "measured.json")

    class Stopped(BaseException):
        """The deadline's SIGTERM: the process ends where it is."""

    def measure(pretrain, finetune, scratch, pace):  # as `budget.measure` fills `pace`
        pace["start_seconds"] = 8.9
        assert json.load(open(measured))["pace"] == {"start_seconds": 8.9}
        pace.update(pretrain_step_seconds=0.0099, pretrain_compile_seconds=34.0)
        raise Stopped
    monkeypatch.setattr(budget, "measure", measure)
    with pytest.raises(Stopped):
        budget.calibrate(work, time.time() + 600)
    assert json.load(open(measured))["pace"] == {
        "start_seconds": 8.9, "pretrain_step_seconds": 0.0099, "pretrain_compile_seconds": 34.0}
    budget.note_unplanned(work, {"run": "calibrate", "exit": -15, "stopped": True})
    assert budget.read_plan(work)["notes"][0] == (
        "nothing planned: the calibration was stopped at the window's stop before it planned "
        "(its log: logs/calibrate.log; what it measured: logs/measured.json, start_seconds, "
        "pretrain_step_seconds, pretrain_compile_seconds); no study job started")
    out = tmp_path / "out"
    out.mkdir()
    logs = os.path.join(work, "logs")
    run.Stream(str(out), [("logs", logs)], {**STAGE, "stage": "W1"}, logs)()
    here = str(tmp_path / "here")
    collect.collect("W1", str(out), results_dir=here)
    assert json.load(open(os.path.join(here, "records", "stages", "W1", "logs",
                                       "measured.json")))["pace"]["start_seconds"] == 8.9
