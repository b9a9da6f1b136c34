"""Rows from measurements, ratios, the issue's checks (headline), and the Markdown report."""

import json
import statistics
from pathlib import Path

from benchmarks import harness
from benchmarks.encoders.plan import KERAS_HUB_BERT, config_key

PRECISIONS = ("float32", "mixed_bfloat16", "mixed_float16", "bfloat16")
# The thresholds (headline).
SPEED_THRESHOLD = 1.05  # tupe_r train step / bert_a and / keras_hub_bert, with XLA
MEMORY_THRESHOLD = 2.0  # huang_m3 / huang_m4 peak memory at the longest sequence
HEADLINE_SEQ_LENS = (128, 512)
# The GPU targets: training step, base size, sequence 512, mixed_bfloat16, XLA.
GPU_TARGET = dict(size="base", seq_len=512, precision="mixed_bfloat16")
GPU_TARGETS = (  # (name, numerator, denominator or None for MFU, "<=" / ">=", threshold)
    ("tupe_r / bert_a step time", "tupe_r", "bert_a", "<=", 1.05),
    ("tupe_r / keras_hub_bert step time", "tupe_r", KERAS_HUB_BERT, "<=", 1.0),
    ("bert_a MFU", "bert_a", None, ">=", 0.40),
    ("huang_m4 / bert_a step time", "huang_m4", "bert_a", "<=", 1.3),
)


# === Rows ===
def merge_rounds(results):
    """One row per measurement: the timings of its rounds pooled.

    Compile time is the median over rounds; memory the largest; a failure in
    any round makes the row failed (its error kept).
    """
    grouped = {}
    for result in results:
        grouped.setdefault((result["variant"],) + config_key(result), []).append(result)
    rows = []
    for parts in grouped.values():
        first = parts[0]
        row = {key: first[key] for key in ("variant", "size", "seq_len", "mode", "xla",
                                           "precision", "batch_size")}
        row.update(flash=first.get("flash", False), rounds=len(parts),
                   order=[p["order"] for p in parts])
        failed = [p for p in parts if p["status"] != "ok"]
        if failed:
            row.update(status=failed[0]["status"], error=failed[0].get("error", ""))
            row["params"] = next((p["params"] for p in parts if p.get("params")), None)
            rows.append(row)
            continue
        times = [t for p in parts for t in p["times_ms"]]
        row.update(status="ok", params=first["params"], times_ms=times,
                   **harness.timing_stats(times))
        row["cpu_ms"] = [t for p in parts for t in p["cpu_ms"]]
        row["cpu_median_ms"] = statistics.median(row["cpu_ms"])
        row["compile_s"] = statistics.median(p["compile_s"] for p in parts)
        row["xla_effective"] = all(p["xla_effective"] for p in parts) if first["xla"] else False
        for key in ("peak_mb", "peak_build_delta_mb", "peak_abs_mb", "allocator_peak_mb",
                    "rss_after_build_mb", "allocated_after_compile_mb"):
            values = [p[key] for p in parts if p.get(key) is not None]
            row[key] = max(values) if values else None
        row["memory_kind"] = first.get("memory_kind")
        utilization = [p["cpu_utilization"] for p in parts if p.get("cpu_utilization")]
        row["cpu_utilization"] = statistics.median(utilization) if utilization else None
        loads = [p[k] for p in parts for k in ("load_average_start", "load_average_end")
                 if p.get(k) is not None]
        row["load_average_range"] = [min(loads), max(loads)] if loads else None
        for key in ("activation", "model_flops_per_token", "attention_implementation",
                    "attention_path", "flash_attention"):
            row[key] = first.get(key)
        rows.append(row)
    return rows


def add_ratios(rows):
    """`ratio_bert_a`, `ratio_keras_hub_bert`: median / the reference's median, same config."""
    medians = {(row["variant"],) + config_key(row): row["median_ms"]
               for row in rows if row["status"] == "ok"}
    for row in rows:
        for reference in ("bert_a", KERAS_HUB_BERT):
            ref = medians.get((reference,) + config_key(row))
            ok = row["status"] == "ok" and ref
            row[f"ratio_{reference}"] = row["median_ms"] / ref if ok else None
    return rows


def _find(rows, variant, seq_len, mode, xla, precision, flash=False, size=None):
    key = (variant, seq_len, mode, xla, precision, flash)
    return next((row for row in rows if (row["variant"],) + config_key(row) == key
                 and size in (None, row["size"]) and row["status"] == "ok"), None)


def _ratio(a, b):
    """Row `a`'s median over `b`'s, and its spread: best case vs worst case of the repeats."""
    return dict(value=a["median_ms"] / b["median_ms"],
                range=[a["min_ms"] / b["max_ms"], a["max_ms"] / b["min_ms"]])


def headline(rows, settings):
    """The issue's checks, each with its value, threshold and verdict.

    Speed: `tupe_r` training-step median over `bert_a`'s and keras-hub BERT's,
    with XLA, at every sequence length run. XLA speed-up: `tupe_r`'s median
    without XLA over with, per mode. Memory: `huang_m3` over `huang_m4` peak at
    the longest sequence (training step, XLA on if run, else off). These use
    the first `--flash` setting run. Then the issue's GPU targets
    (`gpu_targets`), per flash setting.
    """
    checks = []
    seq_lens = sorted(settings["seq_lens"])
    flash = settings.get("flash", [False])[0]
    for precision in settings["precisions"]:
        for reference in ("bert_a", KERAS_HUB_BERT):
            for seq_len in seq_lens:
                a = _find(rows, "tupe_r", seq_len, "train", True, precision, flash)
                b = _find(rows, reference, seq_len, "train", True, precision, flash)
                check = dict(kind="speed", name=f"tupe_r / {reference}", seq_len=seq_len,
                             mode="train", xla=True, precision=precision,
                             threshold=SPEED_THRESHOLD, value=None, verdict="n/a")
                if a and b:
                    check.update(_ratio(a, b))
                    # Less sensitive to other processes: fastest steps, CPU time.
                    check["ratio_of_min"] = a["min_ms"] / b["min_ms"]
                    check["ratio_of_cpu_time"] = a["cpu_median_ms"] / b["cpu_median_ms"]
                    check["verdict"] = "PASS" if check["value"] <= SPEED_THRESHOLD else "FAIL"
                checks.append(check)
        for mode in settings["modes"]:
            for seq_len in seq_lens:
                on = _find(rows, "tupe_r", seq_len, mode, True, precision, flash)
                off = _find(rows, "tupe_r", seq_len, mode, False, precision, flash)
                check = dict(kind="xla_speedup", name="tupe_r XLA speed-up (off / on)",
                             seq_len=seq_len, mode=mode, precision=precision,
                             threshold=None, value=None, verdict="reported")
                if on and off:
                    check["value"] = off["median_ms"] / on["median_ms"]
                checks.append(check)
        longest = seq_lens[-1]
        xla = True in settings["xla"]
        m3 = _find(rows, "huang_m3", longest, "train", xla, precision, flash)
        m4 = _find(rows, "huang_m4", longest, "train", xla, precision, flash)
        check = dict(kind="memory", name="huang_m3 / huang_m4 peak memory", seq_len=longest,
                     mode="train", xla=xla, precision=precision, threshold=MEMORY_THRESHOLD,
                     value=None, verdict="n/a")
        if m3 and m4 and m3.get("peak_mb") and m4.get("peak_mb"):
            check["value"] = m3["peak_mb"] / m4["peak_mb"]
            check["detail"] = f"{m3['peak_mb']:,.0f} / {m4['peak_mb']:,.0f} MiB"
            check["verdict"] = "PASS" if check["value"] <= MEMORY_THRESHOLD else "FAIL"
        elif any(r["variant"] == "huang_m3" and r["seq_len"] == longest and r["mode"] == "train"
                 and r["xla"] == xla and r["precision"] == precision and r["status"] != "ok"
                 for r in rows):
            check["verdict"] = "FAIL"  # method 3 itself failed (e.g. out of memory)
        checks.append(check)
    for check in checks:
        if check["seq_len"] not in HEADLINE_SEQ_LENS:
            check["note"] = f"the issue's thresholds are for sequences {list(HEADLINE_SEQ_LENS)}"
    return checks + gpu_targets(rows, settings)


def gpu_targets(rows, settings):
    """The issue's GPU targets at base size, sequence 512, mixed_bfloat16, training, XLA.

    One check per target and flash setting run (flash off only when none was
    run); "n/a (not measured)" where a row is missing.
    """
    checks = []
    t = GPU_TARGET
    for flash in settings.get("flash", [False]):
        for name, variant, reference, direction, threshold in GPU_TARGETS:
            a = _find(rows, variant, t["seq_len"], "train", True, t["precision"], flash,
                      t["size"])
            b = reference and _find(rows, reference, t["seq_len"], "train", True,
                                    t["precision"], flash, t["size"])
            check = dict(kind="gpu_target", name=name, size=t["size"], seq_len=t["seq_len"],
                         mode="train", xla=True, precision=t["precision"], flash=flash,
                         direction=direction, threshold=threshold, value=None,
                         verdict="n/a (not measured)")
            if reference is None and a and a.get("mfu") is not None:
                check["value"] = a["mfu"]
                check["detail"] = (f"{a['model_tflops_per_s']:,.1f} / {a['peak_tflops']:,.1f} "
                                   "TFLOP/s")
            elif reference is None and a:
                check["verdict"] = "n/a (no peak: pass --peak-tflops)"
            elif a and b:
                check.update(_ratio(a, b))
            if check["value"] is not None:
                passed = (check["value"] <= threshold if direction == "<="
                          else check["value"] >= threshold)
                check["verdict"] = "PASS" if passed else "FAIL"
            checks.append(check)
    return checks


# === Markdown ===
def fmt(value, digits=1, suffix=""):
    if value is None:
        return "–"
    return f"{value:,.{digits}f}{suffix}"


def percent(fraction):
    return None if fraction is None else 100 * fraction


def _attention_text(row):
    if not row.get("attention_implementation"):
        return "–"
    return (f"{row['attention_implementation']} → {row['attention_path']}, flash_attention "
            f"{row['flash_attention']}")


def render_markdown(report):
    rows = report["rows"]
    memory_kinds = {r["memory_kind"] for r in rows if r.get("memory_kind")}
    s, m, v = report["settings"], report["machine"], report["versions"]
    lines = [
        f"# Encoder benchmark: {s['size']} presets and keras-hub BERT ({s['backend']}, "
        f"{'GPU' if s['device'] == 'gpu' else 'CPU'})",
        "",
        f"Command: `{report['command']}`",
        "",
        f"- Machine: {m.get('cpu_model')}, {m.get('cpu_count')} cores"
        + (f" ({m['cpus_usable']} usable)" if m.get("cpus_usable") else "")
        + f", {m.get('memory_total_gb')} GB RAM; GPU: "
        + (", ".join(g["name"] for g in m.get("gpus", [])) or "none")
        + f"; {m.get('platform')}. Load average at start {m.get('load_average_start')}, "
        f"at end {m.get('load_average_end')}.",
        "- Versions: " + ", ".join(f"{k} {val}" for k, val in v.items() if k != "keras_tupe")
        + f"; keras_tupe {v['keras_tupe'].get('commit')}"
        + (" (dirty)" if v["keras_tupe"].get("dirty") else ""),
        f"- Batch {s['batch_size']}; {s['repeats']} timed steps per measurement after "
        f"{s['warmup']} warm-up steps (the first, compiling call is reported as compile s), "
        f"{s['rounds']} round(s); "
        + ("the variants of each configuration in one fresh process, their steps alternating "
           "(--interleave; memory not measured). " if s.get("interleave") else
           "each measurement in a fresh process; configurations outer loop, variants inner. ")
        + "Times: median and min–max over the repeats, IQR; ratios of medians. CPU busy: the "
        "process's CPU time over wall time × usable cores during the timed steps (low values "
        f"mean other processes took the CPU). Started {report['started']}, took "
        f"{report['duration_s'] / 60:.1f} min.",
        "- Training step: Keras `train_on_batch`, loss mean(sequence_output²) + "
        "mean(pooled_output²), `keras_tupe.optimization.create_optimizer` (AdamW, weight decay "
        "0.01, global clip 1.0); inference: `predict_on_batch` of sequence and pooled outputs.",
        "- Memory (MiB): step Δ = the backend allocator's peak during the warm-up and timed "
        "steps above what stays allocated after the compiling first call (weights, optimizer "
        "state): the step's activations, gradients and temporaries"
        + (f" ({', '.join(sorted(memory_kinds))})" if memory_kinds else "")
        + "; Δ build = the process's whole-life peak RSS (`ru_maxrss`) minus its RSS after the "
        "model and inputs were built (adds the optimizer state, the compiler's memory and what "
        "the allocators keep); abs = the whole-life peak RSS, framework included. Where the "
        "backend keeps no allocator statistics (JAX on a CPU), step Δ is Δ build.",
    ]
    activations = sorted({f"{r['variant']}: {r['activation']}" for r in report["rows"]
                          if r.get("activation") and r["variant"] in ("bert_a", KERAS_HUB_BERT)})
    if activations:
        lines.append("- Feed-forward activation: " + ", ".join(activations)
                     + " (keras-hub's BERT always uses the tanh approximation).")
    params = {r["variant"]: r.get("params") for r in report["rows"] if r.get("params")}
    if "bert_a" in params and KERAS_HUB_BERT in params:
        diff = params[KERAS_HUB_BERT] - params["bert_a"]
        lines.append(f"- Parameters: keras_hub_bert {params[KERAS_HUB_BERT]:,}, bert_a "
                     f"{params['bert_a']:,} (difference {diff:+,}).")
    lines += [f"- {note}" for note in report["notes"]]
    lines += ["", "## Headline", "",
              "| check | seq | precision | value | range (best–worst) or values | ratio of min "
              "| ratio of CPU time | threshold | verdict |",
              "| --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    for c in report["headline"]:
        what = c["name"]
        if c["kind"] == "speed":
            what += ", training step, XLA"
        elif c["kind"] == "gpu_target":
            what += (f", target, {c['size']}, training step, XLA, flash "
                     f"{'on' if c['flash'] else 'off'}")
        elif c["kind"] == "xla_speedup":
            what += f", {c['mode']}"
        else:
            what += f", training step, XLA {'on' if c['xla'] else 'off'}"
        value = fmt(c["value"], 3)
        if c["kind"] == "gpu_target" and c["name"].endswith("MFU") and c["value"] is not None:
            value = fmt(percent(c["value"]), 1, "%")
        spread = (f"{c['range'][0]:.3f}–{c['range'][1]:.3f}" if c.get("range")
                  else c.get("detail", ""))
        threshold = (f"{'≥' if c.get('direction') == '>=' else '≤'} {c['threshold']}"
                     if c["threshold"] else "")
        verdict = c["verdict"] + (" *" if c.get("note") else "")
        lines.append(f"| {what} | {c['seq_len']} | {c['precision']} | {value} | {spread} | "
                     f"{fmt(c.get('ratio_of_min'), 3)} | {fmt(c.get('ratio_of_cpu_time'), 3)} | "
                     f"{threshold} | {verdict} |")
    lines += ["", "Value: the ratio of medians, which the verdict uses. Range: fastest over "
              "slowest step and back. Ratio of min and of CPU time (median process CPU time per "
              "step): less sensitive to other processes on the machine; where they disagree "
              "with the value, the machine was busy."]
    if any(c.get("note") for c in report["headline"]):
        lines += ["", f"\\* The issue's thresholds are for sequences {list(HEADLINE_SEQ_LENS)}; "
                  "this run used others."]
    lines += ["", "## Results", ""]
    keys = sorted({config_key(r) for r in rows},
                  key=lambda k: (PRECISIONS.index(k[3]), k[1] != "train", not k[2], k[4], k[0]))
    order = {name: i for i, name in enumerate(s["variants"])}
    peaks = sorted({f"{r['precision']}: {r['peak_tflops_source']}" for r in rows
                    if r.get("peak_tflops_source")})
    if peaks:
        lines += ["Throughput: tokens/s = batch × sequence / median step; TFLOP/s = model FLOPs "
                  "of the step (`keras_tupe_base.flops.model_flops_per_token`: 3 × forward for "
                  "training, encoder layers and positional terms, no embeddings) / median step; "
                  "MFU = TFLOP/s / peak. Peak: " + "; ".join(peaks) + ". Device peak MB: the "
                  "backend allocator's whole-life peak (JAX: "
                  "`memory_stats()['peak_bytes_in_use']` on a GPU; – where it keeps none). "
                  "Attention: the implementation set, → the path a step runs, and "
                  "flash_attention asked of dot_product_attention.", ""]
    for key in keys:
        seq_len, mode, xla, precision, flash = key
        lines += [f"### {'training step' if mode == 'train' else 'inference'}, "
                  f"sequence {seq_len}, XLA {'on' if xla else 'off'}, {precision}, "
                  f"flash {'on' if flash else 'off'}",
                  "",
                  "| variant | params | median ms | min–max ms | IQR ms | × bert_a | "
                  "× keras_hub_bert | tokens/s | TFLOP/s | MFU | step Δ MB | Δ build MB | abs MB "
                  "| device peak MB | compile s | CPU busy | attention |",
                  "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
                  "| ---: | ---: | ---: | ---: | ---: | --- |"]
        group = sorted((r for r in rows if config_key(r) == key),
                       key=lambda r: order.get(r["variant"], len(order)))
        for r in group:
            params_text = f"{r['params']:,}" if r.get("params") else "–"
            if r["status"] != "ok":
                lines.append(f"| {r['variant']} | {params_text} | {r['status'].upper()}: "
                             f"{r.get('error', '')[:120].replace('|', '/')} "
                             "| | | | | | | | | | | | | | |")
                continue
            xla_mark = "" if r["xla_effective"] == r["xla"] else " (XLA not applied)"
            lines.append(
                f"| {r['variant']}{xla_mark} | {params_text} | {fmt(r['median_ms'])} | "
                f"{fmt(r['min_ms'])}–{fmt(r['max_ms'])} | {fmt(r['iqr_ms'])} | "
                f"{fmt(r['ratio_bert_a'], 3)} | {fmt(r['ratio_keras_hub_bert'], 3)} | "
                f"{fmt(r.get('tokens_per_s'), 0)} | {fmt(r.get('model_tflops_per_s'), 3)} | "
                f"{fmt(percent(r.get('mfu')), 1, '%') if r.get('mfu') is not None else 'n/a'} | "
                f"{fmt(r.get('peak_mb'), 0)} | {fmt(r.get('peak_build_delta_mb'), 0)} | "
                f"{fmt(r.get('peak_abs_mb'), 0)} | {fmt(r.get('allocator_peak_mb'), 0)} | "
                f"{fmt(r['compile_s'], 1)} | "
                f"{fmt(percent(r.get('cpu_utilization')), 0, '%')} | "
                f"{_attention_text(r)} |")
        lines.append("")
    return "\n".join(lines)


def write_report(report, out):
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    json_path, md_path = out.with_name(out.name + ".json"), out.with_name(out.name + ".md")
    json_path.write_text(json.dumps(report, indent=1) + "\n")
    md_path.write_text(render_markdown(report) + "\n")
    return json_path, md_path
