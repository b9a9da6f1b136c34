"""The one sha256 of a file, and the old names that answer with it."""

import hashlib
import os

from keras_tupe.convert.common import sha256
from keras_tupe.data.shards import file_sha256 as shards_file_sha256
from keras_tupe.files import file_sha256


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
