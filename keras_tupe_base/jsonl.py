"""Appended JSON-lines records (`results.jsonl`): whole lines in, cut lines skipped out.

A resumable run appends one line per finished piece of work and, when run again, reads
them to skip what is done. `append_jsonl` writes each line in one `os.write` and syncs
it; where the write fails (a full disk, a file-size limit) it takes its part back, and a
file whose last line lacks its newline (a writer killed by power loss) gets the new line
after one. `read_jsonl` skips a line that does not parse, with one warning naming the
file and the line, so the run it recorded is done again instead of ending the command.
"""

import json
import os
import warnings

from keras_tupe_base.staging import WriteError, space_error, space_note


def read_jsonl(path):
    """The rows of `path`, one JSON value a line; `[]` where there is no such file.

    A line that is not JSON (cut short by a full disk or a crash) is skipped with one
    `UserWarning` naming `path` and its line number: the work it recorded is not done.
    """
    if not os.path.exists(path):
        return []
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, 1):
            if not line.strip():
                continue
            try:
                rows.append(json.loads(line))
            except json.JSONDecodeError as error:
                warnings.warn(
                    f"{path} line {number} is cut short or not JSON "
                    f"({error.msg.removesuffix(' at')} at column {error.colno}); it is skipped, so the run it recorded is done again "
                    "(delete the line to silence this).")
    return rows


def append_jsonl(path, row):
    """Appends `row` to `path` as one whole line (the folder and file made if missing).

    Raises:
        WriteError: no room, a file-size limit, a read-only folder; `path` is left as it
            was, without part of the line.
    """
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    line = (json.dumps(row) + "\n").encode("utf-8")
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o666)
    try:
        start = os.fstat(fd).st_size
        if start and os.pread(fd, 1, start - 1) != b"\n":
            line = b"\n" + line  # the last line was cut: it stays a line of its own
        try:
            written = os.write(fd, line)
            while written < len(line):  # a short write: the next one says why (ENOSPC)
                written += os.write(fd, line[written:])
            os.fsync(fd)
        except OSError as error:
            os.ftruncate(fd, start)  # no half line for the next reader
            found = space_error(error)
            if found is None:
                raise
            code, reason = found
            raise WriteError(path, f"{reason} ({space_note(path)})", code) from error
    finally:
        os.close(fd)
