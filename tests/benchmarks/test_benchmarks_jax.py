"""benchmarks.encoders under JAX (CPU): throughput, FLOPs, MFU and the flash axis (issue 22)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks.encoders import flops

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.jax


def test_quick_sweep_reports_tokens_flops_mfu_and_attention(tmp_path):
    out = tmp_path / "bench"
    # One sequence, XLA on, training only, no warm-up and --interleave (flash off and on
    # together): two processes with the probe. float32 alone: mixed_bfloat16 is window
    # S2a's, whose rehearsal (experiments/stage/tests) runs this command in it. --dropout 0
    # so a training step can take the fused path at all (the fused op has no attention
    # dropout).
    command = [sys.executable, "-m", "benchmarks.encoders", "--quick", "--variants", "bert_a",
               "tupe_r", "--flash", "both", "--precisions", "float32",
               "--peak-tflops", "1", "--seq-lens", "32", "--xla", "on", "--modes", "train",
               "--dropout", "0", "--warmup", "0", "--interleave", "--out", str(out)]
    env = dict(os.environ, KERAS_BACKEND="jax", TF_CPP_MIN_LOG_LEVEL="2",  # JAX alone, as on
               PYTHONPATH=os.pathsep.join([str(REPO_ROOT / "tests" / "no_tensorflow"),  # a GPU
                                           str(REPO_ROOT)]))
    process = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                             timeout=300, check=False)
    assert process.returncode == 0, process.stderr[-2000:]
    report = json.loads(out.with_name("bench.json").read_text())
    assert report["settings"]["backend"] == "jax"
    rows = report["rows"]
    assert {(r["variant"], r["precision"], r["flash"]) for r in rows} == {
        (v, "float32", f) for v in ("bert_a", "tupe_r") for f in (False, True)}
    for r in rows:
        assert r["status"] == "ok", r.get("error")
        tokens = r["batch_size"] * r["seq_len"]
        assert r["tokens_per_s"] > 0
        assert r["tokens_per_s"] == pytest.approx(tokens / (r["median_ms"] / 1000))
        per_token = flops.row_flops_per_token(r["variant"], "tiny", r["seq_len"],
                                              r["batch_size"])
        assert r["model_flops_per_step"] == pytest.approx(per_token * tokens)
        achieved = per_token * tokens / (r["median_ms"] / 1000) / 1e12
        assert r["model_tflops_per_s"] == pytest.approx(achieved)
        assert r["peak_tflops"] == 1 and r["peak_tflops_source"] == "--peak-tflops"
        assert r["mfu"] == pytest.approx(achieved / 1.0)
        assert r["compile_s"] > 0
        assert r["flash_attention"] is False  # never asked of a CPU
    tupe_r = {(r["precision"], r["flash"]): r for r in rows if r["variant"] == "tupe_r"}
    on, off = tupe_r[("float32", True)], tupe_r[("float32", False)]
    assert (on["attention_implementation"], on["attention_path"]) == ("fused", "fused")
    assert (off["attention_implementation"], off["attention_path"]) == ("einsum", "einsum")
    markdown = out.with_name("bench.md").read_text()
    assert "| tokens/s | TFLOP/s | MFU |" in markdown
    assert "fused → fused, flash_attention False" in markdown
    assert "n/a (not measured)" in markdown  # the GPU targets: no base/512 rows here
