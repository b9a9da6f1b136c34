"""`collect` (here): files what came back (the records pack) under `docs/results/records/`,
once all of it is checked; every file or none."""

import contextlib
import gzip
import io
import json
import os
import shutil
import tarfile
import tempfile
import zlib

from experiments import records
from experiments.config import StudyError
from experiments.stage import specs
from keras_tupe_base.staging import existing_ancestor


def collect(name, folder, results_dir=specs.RESULTS):
    """Files what came back (`folder`'s records pack) under `results_dir/records/` (the logs
    under `stages/NAME/`, a call's own folder: `call_logs`), once all of it is checked:
    refuses, in one line naming the file, a pack that is not whole (`_read_pack`), another
    stage's, a rehearsal's (`--tiny`) among the records of `RESULTS`, or a record that would
    replace one that differs; takes a `.jsonl` record that grew, and leaves one with the same
    bytes (or, a `.jsonl`, that holds them and a later call's rows) untouched. A call killed
    before its end is recorded so, beside its stage record (`_killed`). Writes nothing
    unless every check passed, and then every file or none (`_write_all`). Returns the
    files written."""
    path = os.path.join(folder, specs.PACK)
    if not os.path.exists(path):
        raise StudyError(f"{folder} holds no {specs.PACK}: nothing came back from stage {name}.")
    files = read_pack(path)
    stage = json.loads(files[STAGE_RECORD])
    if stage.get("stage") != name:
        raise StudyError(f"{path} is stage {stage.get('stage')}'s pack, not {name}'s: collect "
                         f"it as `collect {stage.get('stage')} {folder}`.")
    if (stage.get("tiny") and os.path.realpath(results_dir) == os.path.realpath(specs.RESULTS)):
        raise StudyError(f"{path} is a --tiny rehearsal's pack ({STAGE_RECORD}: \"tiny\": "
                         f"true): never filed among stage {name}'s records in "
                         f"{specs.RESULTS}; give --results-dir a folder of its own to look at it.")
    killed = _killed(stage, files)
    if killed:  # beside the stage record, which is filed as it came
        files[KILLED] = (json.dumps(killed, indent=2) + "\n").encode()
    target, written = os.path.join(results_dir, "records"), []
    logs = call_logs(target, name, stage.get("started"))
    for member, content in files.items():
        where = collected_path(target, name, member, logs)
        here = open(where, "rb").read() if os.path.exists(where) else None
        if here == content or (where.endswith(".jsonl") and here is not None
                               and here.startswith(content)):
            continue  # collected already (a .jsonl: and a later call's rows)
        if here is not None and not (where.endswith(".jsonl") and content.startswith(here)):
            raise StudyError(f"{where} exists with other content: move it away first "
                             f"(stage {name} brought another version back).")
        written.append((where, content))
    _write_all(written, results_dir)
    if killed and written:
        print(f"stage {name}: {killed['killed']}", flush=True)
    return [where for where, _ in written]


STAGE_RECORD = "logs/stage.json"  # the stage record, as packed
KILLED = "logs/killed.json"  # what `collect` adds beside it for a call killed before its end


def read_pack(path):
    """`{member: bytes}`: every file of the records pack at `path`, read to its end, each
    JSON file parsed whole and each JSON-lines file line by line to its last newline, and
    the stage record among them; anything less (a cut archive, a half-written plan, a cut
    last row) refused in one line naming the file."""
    with open(path, "rb") as f:  # one this process cannot read: the OSError's own line
        packed = f.read()
    try:  # the whole stream, its length and CRC too (tarfile stops at the archive's end)
        with tarfile.open(fileobj=io.BytesIO(gzip.decompress(packed)), mode="r:") as archive:
            files = {m.name: archive.extractfile(m).read() for m in archive if m.isfile()}
    except (tarfile.TarError, EOFError, zlib.error, gzip.BadGzipFile) as error:
        raise StudyError(f"{path} is not a whole archive ({type(error).__name__}: {error}): "
                         "cut or damaged on its way here; fetch it again. Nothing filed.")
    for member, content in files.items():
        if member.endswith(".json"):
            _parses(path, member, content)
        elif member.endswith(".jsonl"):
            rows = content.split(b"\n")
            if rows[-1]:
                raise StudyError(f"{path}: {member} is cut: its last line (line {len(rows)}) "
                                 "ends without a newline; fetch the pack again. Nothing filed.")
            for number, row in enumerate(rows[:-1], 1):
                if row.strip():
                    _parses(path, f"{member} line {number}", row)
    if STAGE_RECORD not in files:
        raise StudyError(f"{path} holds no {STAGE_RECORD}: not a stage's records pack. "
                         "Nothing filed.")
    return files


def _parses(path, what, content):
    try:
        json.loads(content)
    except ValueError as error:  # a JSONDecodeError, or bytes that are not text
        raise StudyError(f"{path}: {what} does not parse whole ({error}): cut or half-written; "
                         "fetch the pack again. Nothing filed.") from None


def _killed(stage, files):
    """`{"killed", "running"}` for a call killed before its end, else None: `run` adds
    `seconds` to the stage record as it ends, so a record without them is one streamed
    before that (a kill: the call's timeout_s, the machine gone). The jobs with a log but
    no end in `processes` were running then."""
    if "seconds" in stage:
        return None
    ended = {p["run"].replace(" ", "_") for p in stage.get("processes", [])}  # as logs are named
    logs = (member[len("logs/"):-len(".log")] for member in files
            if member.startswith("logs/") and member.endswith(".log"))
    running = sorted(log for log in logs if log not in ended)
    return {"killed": "killed before its end (its stage record has no \"seconds\": the last "
                      f"one streamed); running then: {', '.join(running) or 'no job'}",
            "running": running}


def _write_all(written, results_dir):
    """Writes every `(path, content)` (under `results_dir`) or none: each into a temporary
    folder first and the folders they go to made, then each renamed into place; a write
    that fails before the renames (a full disk, a file where a folder goes) removes what it
    wrote and the folders it made."""
    if not written:
        return
    scratch, made = tempfile.mkdtemp(prefix=".collect_", dir=existing_ancestor(results_dir)), []
    try:
        for index, (where, content) in enumerate(written):
            with open(os.path.join(scratch, str(index)), "wb") as f:
                f.write(content)
            _make_folders(os.path.dirname(where), made)
        for index, (where, _) in enumerate(written):
            os.replace(os.path.join(scratch, str(index)), where)
    except OSError:
        for folder in reversed(made):
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def _make_folders(folder, made):
    """Makes `folder` and its missing parents, each appended to `made` once made."""
    if folder and not os.path.isdir(folder):  # "": the working folder
        _make_folders(os.path.dirname(folder), made)
        os.mkdir(folder)
        made.append(folder)


def call_logs(target, name, started):
    """The folder under `target/stages/NAME/` a call's logs go to: `logs`, else `logs_2`,
    `logs_3`, ...: the first that is free or holds this call's (its stage record says it
    `started` at the same time), so each call of a window keeps its own and a second
    `collect` of one call finds the same folder."""
    for index in range(1, 100):
        logs = "logs" if index == 1 else f"logs_{index}"
        here = records.read_json(os.path.join(target, "stages", name, logs, "stage.json"))
        if here is None or here.get("started") == started:
            return logs
    raise StudyError(f"{os.path.join(target, 'stages', name)}: 99 calls' logs already")


def collected_path(target, name, member, logs="logs"):
    """Where `collect` puts pack member `member` of stage `name` under `target` (the
    records folder): a study's record under its study, the logs (of the call whose folder
    is `logs`) under `stages/NAME/`."""
    if member.startswith("logs/"):
        return os.path.join(target, "stages", name, logs, member[len("logs/"):])
    return os.path.join(target, member)
