"""benchmarks.harness and benchmarks.encoders: fresh processes, statistics, the "before"
library; ratios, headline and report from known numbers; a real quick run; and TUPE's
positional term computed once per forward pass (issue 6, item 2)."""

import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from benchmarks import harness
from benchmarks.encoders import cli, flops, plan, report, worker
from keras_tupe import TupeBackbone
from keras_tupe_base import presets

REPO_ROOT = Path(__file__).resolve().parents[2]


def _result(variant, seq_len, mode, xla, times, peak=100.0, round_index=0, cpu=None):
    return dict(
        variant=variant, size="tiny", seq_len=seq_len, mode=mode, xla=xla,
        precision="float32", batch_size=2, warmup=0, round=round_index,
        vocabulary_size=None, activation=None, status="ok", params=1000, times_ms=list(times),
        cpu_ms=list(cpu or times), cpu_utilization=0.9, compile_s=1.0, xla_effective=xla,
        peak_mb=peak, peak_abs_mb=900.0, peak_build_delta_mb=150.0,
        memory_kind="tensorflow_allocator_cpu", order=0, **harness.timing_stats(times),
        model_flops_per_token=flops.row_flops_per_token(variant, "tiny", seq_len, 2,
                                                        training=mode == "train"),
    )


# Medians: bert_a 10, keras_hub_bert 8, tupe_r 10.4 (XLA) and 20 (no XLA).
TIMES = {
    "bert_a": [9.0, 10.0, 11.0],
    "keras_hub_bert": [8.0, 7.0, 9.0],
    "tupe_r": [10.4, 10.0, 12.0],
}


def _synthetic_results():
    results = []
    for seq_len in (128, 512):
        for mode in ("train", "infer"):
            for xla in (True, False):
                for variant, times in TIMES.items():
                    factor = 1.0 if xla else 2.0
                    results.append(_result(variant, seq_len, mode, xla,
                                           [t * factor for t in times]))
                results.append(_result("huang_m4", seq_len, mode, xla, [5.0], peak=100.0))
                results.append(_result("huang_m3", seq_len, mode, xla, [6.0],
                                       peak=250.0 if seq_len == 512 else 150.0))
    return results


SETTINGS = dict(seq_lens=[128, 512], precisions=["float32"], modes=["train", "infer"],
                xla=[True, False], variants=["bert_a", "tupe_r", "huang_m3", "huang_m4",
                                             "keras_hub_bert"])


def test_ratios_are_medians_over_the_reference_medians():
    rows = report.add_ratios(report.merge_rounds(_synthetic_results()))
    assert len(rows) == 2 * 2 * 2 * 5
    by = {(r["variant"], r["seq_len"], r["mode"], r["xla"]): r for r in rows}
    for (_, seq_len, mode, xla), row in by.items():
        assert row["median_ms"] == statistics.median(row["times_ms"])
        bert = by[("bert_a", seq_len, mode, xla)]["median_ms"]
        hub = by[("keras_hub_bert", seq_len, mode, xla)]["median_ms"]
        assert row["ratio_bert_a"] == pytest.approx(row["median_ms"] / bert)
        assert row["ratio_keras_hub_bert"] == pytest.approx(row["median_ms"] / hub)
    assert by[("tupe_r", 128, "train", True)]["ratio_bert_a"] == pytest.approx(1.04)
    assert by[("tupe_r", 128, "train", True)]["ratio_keras_hub_bert"] == pytest.approx(1.3)


def test_headline_verdicts_against_the_thresholds():
    rows = report.add_ratios(report.merge_rounds(_synthetic_results()))
    checks = report.headline(rows, SETTINGS)
    speed = {(c["name"], c["seq_len"]): c for c in checks if c["kind"] == "speed"}
    assert set(speed) == {(f"tupe_r / {ref}", n) for ref in ("bert_a", "keras_hub_bert")
                          for n in (128, 512)}
    assert speed[("tupe_r / bert_a", 512)]["value"] == pytest.approx(1.04)
    assert speed[("tupe_r / bert_a", 512)]["verdict"] == "PASS"  # 1.04 <= 1.05
    assert speed[("tupe_r / keras_hub_bert", 512)]["verdict"] == "FAIL"  # 1.3 > 1.05
    assert speed[("tupe_r / bert_a", 128)]["ratio_of_min"] == pytest.approx(10.0 / 9.0)
    xla = [c for c in checks if c["kind"] == "xla_speedup"]
    assert len(xla) == 4 and all(c["value"] == pytest.approx(2.0) for c in xla)
    (memory,) = [c for c in checks if c["kind"] == "memory"]
    assert (memory["seq_len"], memory["xla"]) == (512, True)
    assert memory["value"] == pytest.approx(2.5) and memory["verdict"] == "FAIL"
    assert memory["detail"] == "250 / 100 MiB"
    assert not any("note" in c for c in checks)  # 128 and 512 are the lengths


def test_failed_measurements_are_kept_and_method3_failure_fails_the_memory_check():
    results = [r for r in _synthetic_results()
               if not (r["variant"] == "huang_m3" and r["seq_len"] == 512)]
    for xla in (True, False):
        for mode in ("train", "infer"):
            results.append(dict(_result("huang_m3", 512, mode, xla, [1.0]),
                                status="out_of_memory", error="killed by signal 9"))
    rows = report.add_ratios(report.merge_rounds(results))
    failed = [r for r in rows if r["status"] != "ok"]
    assert len(failed) == 4 and all(r["ratio_bert_a"] is None for r in failed)
    (memory,) = [c for c in report.headline(rows, SETTINGS) if c["kind"] == "memory"]
    assert memory["verdict"] == "FAIL" and memory["value"] is None


def test_rounds_pool_timings_and_plan_interleaves_variants():
    settings = dict(SETTINGS, size="tiny", batch_size=2, repeats=5, warmup=1, rounds=2,
                    vocabulary_size=None, activation=None, modes=["train"], xla=[True],
                    variants=["bert_a", "tupe_r", "keras_hub_bert"])
    jobs = plan.plan_jobs(settings)
    assert len(jobs) == 2 * 2 * 3
    assert [j["repeats"] for j in jobs] == [3] * 6 + [2] * 6
    # Variants inner, configurations outer; the second round is rotated by one.
    assert [j["variant"] for j in jobs[:3]] == ["bert_a", "tupe_r", "keras_hub_bert"]
    assert [j["seq_len"] for j in jobs[:6]] == [128] * 3 + [512] * 3
    assert [j["variant"] for j in jobs[6:9]] == ["tupe_r", "keras_hub_bert", "bert_a"]
    results = [_result("bert_a", 128, "train", True, [1.0, 2.0, 3.0], round_index=0),
               _result("bert_a", 128, "train", True, [10.0, 20.0], round_index=1, peak=300.0)]
    (row,) = report.merge_rounds(results)
    assert row["times_ms"] == [1.0, 2.0, 3.0, 10.0, 20.0] and row["median_ms"] == 3.0
    assert (row["rounds"], row["peak_mb"]) == (2, 300.0)


def test_markdown_has_every_variant_in_every_table():
    rows = report.add_ratios(report.merge_rounds(_synthetic_results()))
    summary = dict(
        command="python -m benchmarks.encoders", started="now", duration_s=60.0,
        machine=dict(platform="Linux", cpu_model="CPU", cpu_count=2, memory_total_gb=8,
                     gpus=[]),
        versions=dict(python="3.11", keras="3", keras_tupe=dict(commit="abc", dirty=False)),
        settings=dict(SETTINGS, size="tiny", backend="tensorflow", device="cpu", batch_size=2,
                      repeats=3, warmup=0, rounds=1),
        notes=["Mixed precision skipped."], rows=rows, headline=report.headline(rows, SETTINGS),
    )
    text = report.render_markdown(summary)
    tables = text.split("\n### ")[1:]
    assert len(tables) == 8
    for table in tables:
        body = [line for line in table.splitlines() if line.startswith("| ")][2:]
        assert [line.split(" | ")[0][2:] for line in body] == SETTINGS["variants"]
    assert "Mixed precision skipped." in text
    assert text.count("PASS") + text.count("FAIL") == 5


@pytest.mark.slow
def test_quick_run_writes_complete_json_and_markdown(tmp_path):
    out = tmp_path / "bench"
    command = [sys.executable, "-m", "benchmarks.encoders", "--quick", "--variants", "bert_a",
               "tupe_r", "--seq-lens", "32", "--modes", "train", "--xla", "off", "--out", str(out)]
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="2", KERAS_BACKEND="tensorflow")
    done = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                          timeout=300, check=False)
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(out.with_suffix(".json").read_text())
    assert report["command"].endswith(" ".join(command[3:]))
    for key in ("platform", "cpu_model", "cpu_count", "memory_total_gb", "gpus"):
        assert key in report["machine"]
    for key in ("python", "keras", "backend", "tensorflow_version", "numpy", "keras_hub"):
        assert report["versions"][key]
    assert set(report["versions"]["keras_tupe"]) == {"commit", "dirty"}
    rows = {r["variant"]: r for r in report["rows"]}
    assert set(rows) == {"bert_a", "tupe_r"}
    for row in rows.values():
        assert row["status"] == "ok", row.get("error")
        assert (row["seq_len"], row["mode"], row["xla"], row["xla_effective"]) == (
            32, "train", False, False)
        assert len(row["times_ms"]) == 2 and row["median_ms"] == np.median(row["times_ms"])
        assert row["params"] > 0 and row["compile_s"] > 0 and row["peak_mb"] is not None
        assert row["ratio_bert_a"] == pytest.approx(row["median_ms"] / rows["bert_a"]["median_ms"])
        assert row["ratio_keras_hub_bert"] is None
    # The headline's checks are with XLA, which this run left out: reported as n/a.
    speed = [c for c in report["headline"] if c["kind"] == "speed"]
    assert len(speed) == 2 and all(c["verdict"] == "n/a" for c in speed)
    text = out.with_suffix(".md").read_text()
    assert "## Headline" in text and "| bert_a |" in text and "| tupe_r |" in text
    assert "AMD" in text or report["machine"]["cpu_model"] in text
    assert not (tmp_path / "bench.partial.jsonl").exists()  # removed once the report is written
    # A second run never replaces the report silently.
    again = subprocess.run(command, cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                           timeout=300, check=False)
    assert again.returncode != 0 and "--overwrite" in again.stderr
    assert json.loads(out.with_suffix(".json").read_text()) == report


def _count_calls(layer, log):
    original = layer.call

    def call(*args, **kwargs):
        output = original(*args, **kwargs)
        log.append((layer.name, tuple(output.shape)))
        return output

    layer.call = call


def test_tupe_positional_term_is_computed_once_and_broadcast_over_the_batch():
    """Issue 6, item 2: one `(1, h, n, n)` term per forward pass, shared by all layers."""
    import tensorflow as tf

    backbone = TupeBackbone.from_preset("tupe_r_tiny", num_layers=4)
    # In the graph: each positional layer has exactly one call site.
    for layer in (backbone.untied_correlation, backbone.relative_bias, backbone.cls_reset_layer):
        assert len(layer._inbound_nodes) == 1, layer.name
    positional, biases = [], []
    for layer in (backbone.untied_correlation, backbone.relative_bias, backbone.cls_reset_layer):
        _count_calls(layer, positional)
    for block in backbone.transformer_layers:
        original = block.attention.call

        def attention_call(inputs, *args, _original=original, **kwargs):
            biases.append(kwargs["attention_bias"])
            return _original(inputs, *args, **kwargs)

        block.attention.call = attention_call
    batch, length = 3, 16
    inputs = {
        "token_ids": np.ones((batch, length), "int32"),
        "padding_mask": np.ones((batch, length), "int32"),
        "segment_ids": np.zeros((batch, length), "int32"),
    }
    forward = tf.function(lambda x: backbone(x)["sequence_output"], jit_compile=True)
    for run in (lambda: backbone(inputs), lambda: forward(inputs)):  # eager, then XLA trace
        positional.clear()
        biases.clear()
        run()
        heads = backbone.num_heads
        assert positional == [
            ("untied_positional_correlation", (1, heads, length, length)),
            ("relative_bucket_bias", (1, heads, length, length)),
            ("cls_reset", (1, heads, length, length)),
        ]
        assert len(biases) == 4
        assert all(bias is biases[0] for bias in biases)  # the same tensor in every layer
        assert tuple(biases[0].shape) == (1, heads, length, length)  # not per example


def test_a_rows_flops_are_the_librarys_and_keras_hub_bert_counts_as_bert_a():
    # The count itself: tests/base/test_flops.py (by hand).
    assert flops.row_flops_per_token("tupe_r", "tiny", 32, 2) == 473_088
    assert flops.row_flops_per_token("keras_hub_bert", "tiny", 32, 2) == 442_368  # bert_a's
    assert flops.row_flops_per_token("keras_hub_bert", "tiny", 32, 2, training=False) == 147_456


def test_throughput_mfu_and_gpu_targets():
    rows = report.add_ratios(report.merge_rounds(_synthetic_results()))
    gpus = [dict(name="NVIDIA H100 80GB HBM3", compute_capability="9.0")]
    flops.add_throughput(rows, gpus)
    row = next(r for r in rows if r["variant"] == "bert_a" and r["seq_len"] == 512
               and r["mode"] == "train" and r["xla"])
    assert row["tokens_per_s"] == pytest.approx(2 * 512 / 0.010)
    # The FLOPs the worker recorded for the row, kept through merge_rounds.
    per_token = flops.row_flops_per_token("bert_a", "tiny", 512, 2)
    assert row["model_flops_per_step"] == per_token * 2 * 512
    assert row["model_tflops_per_s"] == pytest.approx(per_token * 2 * 512 / 0.010 / 1e12)
    assert row["mfu"] is None and row["peak_tflops_source"].startswith("n/a: no float32")
    assert flops.peak_tflops(None, gpus, "mixed_bfloat16")[0] == 989.4
    assert flops.peak_tflops(None, gpus, "bfloat16")[0] == 989.4  # the same tensor cores
    assert flops.peak_tflops(None, [dict(name="NVIDIA A100-SXM4-40GB")],
                                "mixed_bfloat16")[0] == 312.0
    assert flops.peak_tflops(None, [], "mixed_bfloat16")[0] is None
    flops.add_throughput(rows, [], override=2.0)
    assert row["mfu"] == pytest.approx(row["model_tflops_per_s"] / 2.0)
    targets = report.gpu_targets(rows, SETTINGS)  # tiny, float32: none measured
    assert [c["verdict"] for c in targets] == ["n/a (not measured)"] * 4
    base = []
    for r in rows:
        if r["seq_len"] == 512 and r["mode"] == "train" and r["xla"]:
            base.append(dict(r, size="base", precision="mixed_bfloat16", mfu=0.5,
                             model_tflops_per_s=500.0, peak_tflops=1000.0))
    targets = {c["name"]: c for c in report.gpu_targets(base, SETTINGS)}
    assert targets["tupe_r / bert_a step time"]["value"] == pytest.approx(1.04)
    assert targets["tupe_r / bert_a step time"]["verdict"] == "PASS"
    assert targets["tupe_r / keras_hub_bert step time"]["verdict"] == "FAIL"  # 1.3 > 1.0
    assert targets["bert_a MFU"]["verdict"] == "PASS"
    assert targets["huang_m4 / bert_a step time"]["value"] == pytest.approx(0.5)


# --- benchmarks.harness --------------------------------------------------------------------

WORKER = """
import json, os, sys, time
out = sys.argv[sys.argv.index("--worker-out") + 1]
what = sys.argv[1]
if what == "ok":
    json.dump({"cwd": os.getcwd(), "files": os.listdir("."), "argv": sys.argv[1:-2],
               "env": os.environ.get("BENCH_TEST")}, open(out, "w"))
elif what == "exit":
    sys.exit("first line\\nthe reason")
elif what == "kill":
    os.kill(os.getpid(), 9)
else:
    time.sleep(30)
"""


def test_run_fresh_returns_the_workers_result_and_names_each_failure(tmp_path, monkeypatch):
    (tmp_path / "fake_worker.py").write_text(WORKER)
    monkeypatch.setenv("PYTHONPATH", str(tmp_path))  # after this checkout on the child's path
    result, error, wall = harness.run_fresh("fake_worker", ["ok", "x"], env={"BENCH_TEST": "1"})
    assert error is None and wall > 0
    # In an empty folder of its own (the result file appears only when it writes it).
    assert result["files"] == [] and result["cwd"] != str(tmp_path)
    assert (result["argv"], result["env"]) == (["ok", "x"], "1")
    assert not Path(result["cwd"]).exists()  # removed afterwards
    result, error, _ = harness.run_fresh("fake_worker", ["exit"])
    assert result is None and error == "exit status 1: first line | the reason"
    result, error, _ = harness.run_fresh("fake_worker", ["kill"])
    assert result is None and error.startswith("killed by signal 9 (out of memory?)")
    result, error, _ = harness.run_fresh("fake_worker", ["sleep"], timeout=1)
    assert result is None and error == "timed out after 1 s"


def test_timing_stats_are_numpys_quantiles():
    rng = np.random.default_rng(0)
    for n in (1, 2, 5, 10, 11):
        times = list(rng.uniform(1, 100, n))
        stats = harness.timing_stats(times)
        q1, median, q3 = np.percentile(times, [25, 50, 75])
        assert (stats["q1_ms"], stats["median_ms"], stats["q3_ms"]) == pytest.approx(
            (q1, median, q3))
        assert stats["iqr_ms"] == pytest.approx(q3 - q1)
        assert (stats["min_ms"], stats["max_ms"], stats["repeats"]) == (min(times), max(times), n)


def test_the_benchmarks_parent_imports_no_framework():
    script = ("import sys\n"
              "import benchmarks.harness\n"
              "from benchmarks.encoders import cli, flops, plan, report, worker\n"
              "print(sorted({'keras', 'tensorflow', 'jax', 'keras_tupe'} & set(sys.modules)))\n")
    done = subprocess.run([sys.executable, "-c", script], cwd=REPO_ROOT, capture_output=True,
                          text=True, timeout=60, check=True)
    assert done.stdout == "[]\n"


# --- benchmarks.encoders: names from keras_tupe -------------------------------------------

PROBE = dict(backend="tensorflow", gpus=[], fast_mixed_precisions=[], cpu_low_precision_flags="",
             keras_hub=True, keras_hub_error=None, preset_variants=list(presets.VARIANTS),
             preset_sizes=list(presets.SIZES))


def test_variants_and_sizes_are_the_presets_with_no_copy():
    settings, _, _ = cli.resolve_settings(cli.parse_args(["--quick"]), PROBE)
    assert settings["variants"] == [*presets.VARIANTS, "keras_hub_bert"]
    assert settings["size"] == "tiny"
    probe = dict(PROBE, preset_variants=["bert_a", "new_one"])  # a variant added to the presets
    settings, _, _ = cli.resolve_settings(cli.parse_args(["--variants", "new_one"]), probe)
    assert settings["variants"] == ["new_one"]
    with pytest.raises(ValueError, match=r"--variants takes \['bert_a', 'new_one', "
                                         r"'keras_hub_bert'\]. Received: \['tupe_r'\]"):
        cli.resolve_settings(cli.parse_args(["--variants", "bert_a", "tupe_r"]), probe)
    with pytest.raises(ValueError, match=r"--size takes .*Received: 'huge'"):
        cli.resolve_settings(cli.parse_args(["--size", "huge"]), PROBE)


def test_the_gpu_stage_commands_parse():
    """experiments/stage/stages.json runs these commands on a GPU machine (the parts of stage S2)."""
    from experiments.stage.specs import load_stages, stage_spec

    seq_lens = set()
    for name in load_stages()["stages"]:
        stage = stage_spec(name)
        if stage.get("command", [None])[0] == "benchmarks.encoders":
            settings, _, _ = cli.resolve_settings(cli.parse_args(stage["command"][1:]),
                                                  dict(PROBE, gpus=[dict(name="NVIDIA H100")]))
            assert settings["size"] == "base" and settings["precisions"] == ["mixed_bfloat16"]
            seq_lens.update(settings["seq_lens"])
    assert seq_lens == {128, 512}


def test_fused_attention_where_the_schemes_table_says_fusable():
    fused = {variant for variant in presets.VARIANTS
             if worker.attention_choice(variant, True, "infer", 0.0, False)[0] == "fused"}
    # Rotary and ALiBi are a dot product plus a bias: fused, like BERT and TUPE.
    assert fused == set(presets.VARIANTS) - {"bert_a_d", "shaw", "huang_m1", "huang_m2",
                                            "huang_m3", "huang_m4", "deberta"}
    assert worker.attention_choice("rope", True, "train", 0.1, True) == ("fused", "einsum", False)
    assert worker.attention_choice("rope", True, "train", 0.0, True) == ("fused", "fused",
                                                                          "backend")
    assert worker.attention_choice("rope", False, "infer", 0.0, True)[0] == "einsum"

