"""The one sha256 of a file, the old names that answer with it, the one JSON reader, and the
appended JSON-lines records (`keras_tupe_base.jsonl`)."""

import errno
import hashlib
import lzma
import os
import resource

import pytest

from keras_tupe.convert.common import sha256
from keras_tupe.data.shards import file_sha256 as shards_file_sha256
from keras_tupe_base.files import file_sha256, tree_sha256
from keras_tupe_base.jsonl import append_jsonl, read_jsonl
from keras_tupe_base.staging import WriteError


def test_file_sha256_streams_large_files_and_the_old_names_agree(tmp_path):
    path = tmp_path / "blob"
    data = os.urandom(3 * (1 << 20) + 17)  # blocks of 1 MiB, and a tail
    path.write_bytes(data)
    want = hashlib.sha256(data).hexdigest()
    assert file_sha256(path) == file_sha256(str(path)) == want
    assert sha256 is file_sha256 and shards_file_sha256 is file_sha256
    empty = tmp_path / "empty"
    empty.write_bytes(b"")
    assert file_sha256(empty) == hashlib.sha256(b"").hexdigest()
    # Through an opener: the bytes a compressed file holds (a carried encoder's .tar.xz).
    packed = tmp_path / "blob.xz"
    packed.write_bytes(lzma.compress(data))
    assert file_sha256(packed, opener=lzma.open) == want != file_sha256(packed)


def test_tree_sha256_fingerprints_every_file_of_a_folder(tmp_path):
    """A file's tree digest is its sha256; a folder's covers each file's relative name and
    bytes, so a changed byte, a renamed file or an added one changes it."""
    (tmp_path / "preset" / "sub").mkdir(parents=True)
    (tmp_path / "preset" / "config.json").write_bytes(b"{}")
    (tmp_path / "preset" / "sub" / "w.h5").write_bytes(b"\x00" * 10)
    folder = tmp_path / "preset"
    assert tree_sha256(folder / "config.json") == hashlib.sha256(b"{}").hexdigest()
    expected = hashlib.sha256(
        f"config.json\0{hashlib.sha256(b'{}').hexdigest()}\n"
        f"sub/w.h5\0{hashlib.sha256(bytes(10)).hexdigest()}\n".encode()).hexdigest()
    assert tree_sha256(folder) == expected
    (folder / "sub" / "w.h5").write_bytes(b"\x00" * 9 + b"\x01")
    changed = tree_sha256(folder)
    assert changed != expected
    os.rename(folder / "sub" / "w.h5", folder / "sub" / "v.h5")
    assert tree_sha256(folder) != changed


def test_read_json_reads_a_file_or_gives_an_empty_dict_where_there_is_none(tmp_path):
    from keras_tupe_base.files import read_json

    (tmp_path / "a.json").write_text('{"epoch": 3, "name": "caf\\u00e9"}', encoding="utf-8")
    assert read_json(tmp_path / "a.json") == {"epoch": 3, "name": "café"}
    assert read_json(tmp_path / "missing.json") == {}
    assert read_json(tmp_path) == {}  # a folder is no file


def test_a_cut_jsonl_line_is_skipped_with_one_warning_naming_file_and_line(tmp_path):
    """A line a full disk cut short (the last, or one a later append left in the middle)."""
    path = tmp_path / "results.jsonl"
    path.write_text('{"seed": 0}\n{"seed": 1, "dev": {"validation"')
    with pytest.warns(UserWarning) as caught:
        assert read_jsonl(str(path)) == [{"seed": 0}]
    [warning] = caught
    assert str(warning.message).startswith(f"{path} line 2 is cut short or not JSON")
    assert "skipped, so the run it recorded is done again" in str(warning.message)
    append_jsonl(str(path), {"seed": 2})  # after the cut line, on a line of its own
    assert path.read_text().splitlines()[1:] == ['{"seed": 1, "dev": {"validation"', '{"seed": 2}']
    with pytest.warns(UserWarning, match=" line 2 is cut short"):
        assert read_jsonl(str(path)) == [{"seed": 0}, {"seed": 2}]
    assert read_jsonl(str(tmp_path / "missing.jsonl")) == []
    path.write_text('{"seed": 0}\n{"se\n')  # cut inside a string: the decoder says "... at"
    with pytest.warns(UserWarning) as caught:
        read_jsonl(str(path))
    assert "(Invalid control character at column 5);" in str(caught[0].message)  # not "at at"


def test_an_append_that_cannot_finish_leaves_no_part_of_its_line(tmp_path):
    """A full disk stood in for by a file-size limit (RLIMIT_FSIZE; Python ignores SIGXFSZ, so
    a write past it fails with EFBIG as one on a full disk fails with ENOSPC)."""
    path = tmp_path / "results.jsonl"
    append_jsonl(str(path), {"seed": 0})
    before = path.read_bytes()
    soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
    resource.setrlimit(resource.RLIMIT_FSIZE, (len(before) + 10, hard))
    try:
        with pytest.raises(WriteError) as raised:
            append_jsonl(str(path), {"seed": 1, "dev": {"validation": {"score": 0.5}}})
    finally:
        resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))
    assert raised.value.errno == errno.EFBIG
    assert str(raised.value).startswith(f"could not write {path}: File too large")
    assert path.read_bytes() == before
