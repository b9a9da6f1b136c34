"""Packs what `gpu_long_v2.sh` brings back, run in /tmp/runs on the lent machine.

    python3 experiments/gpu_pack.py OUT LATER

OUT/logs.tar.xz: every run's metrics.csv, run_config.json, vocab.txt (fine-tuning reads it
from the run folder), console log and encoder config (read from backbone.keras),
nvidia-smi and versions. The masked-LM models go as xz tars
cut in parts of 15 MiB (the tool brings back files of at most 16 MiB, 64 MiB in all):
OUT/weights1.tar.xz.NN the three final models item 3 needs first, LATER/weights2.tar.xz.NN
the 30% checkpoints and TUPE-A seed 0's final model, for a second call. Python's own
tarfile and lzma: the lent machine's image may have no xz.
"""

import concurrent.futures
import glob
import io
import json
import lzma
import os
import sys
import tarfile
import zipfile

RUNS = ("bert_a_s0", "tupe_a_s1", "bert_a_s1", "tupe_a_s0")
PART = 15 * 2**20
FIRST = ("bert_a_s0/mlm.keras", "tupe_a_s1/mlm.keras", "bert_a_s1/mlm.keras")
LATER = ("tupe_a_s1/checkpoints/step_0004800.keras", "tupe_a_s0/mlm.keras",
         "tupe_a_s0/checkpoints/step_0004800.keras")


def xz_tar(files):
    """The xz-compressed tar of the files that exist (bytes)."""
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w") as archive:
        for name in files:
            if os.path.isfile(name):
                archive.add(name)
    return lzma.compress(buffer.getvalue(), preset=6)


def write_parts(data, prefix):
    for index in range(0, len(data), PART):
        with open(f"{prefix}.{index // PART:02d}", "wb") as f:
            f.write(data[index:index + PART])


def main(out, later):
    for run in RUNS:
        try:
            with zipfile.ZipFile(os.path.join(run, "backbone.keras")) as archive:
                config = json.loads(archive.read("config.json"))
            with open(os.path.join(run, "backbone_config.json"), "w") as f:
                json.dump(config, f, indent=2)
        except (OSError, KeyError):
            pass
    logs = ["nvidia-smi.txt", "versions.txt", *glob.glob("*.log")] + [
        path for run in RUNS for path in glob.glob(os.path.join(run, "*.json"))
        + glob.glob(os.path.join(run, "metrics.csv")) + glob.glob(os.path.join(run, "vocab.txt"))]
    with open(os.path.join(out, "logs.tar.xz"), "wb") as f:
        f.write(xz_tar(logs))
    # One process a model: lzma is single-threaded.
    with concurrent.futures.ProcessPoolExecutor() as pool:
        first = list(pool.map(xz_tar, [[name] for name in FIRST]))
        second = list(pool.map(xz_tar, [[name] for name in LATER]))
    write_parts(b"".join(first), os.path.join(out, "weights1.tar.xz"))
    write_parts(b"".join(second), os.path.join(later, "weights2.tar.xz"))


if __name__ == "__main__":
    main(*sys.argv[1:])
