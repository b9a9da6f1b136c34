"""Positional maps: the content-free term per head (TUPE Figure 5) and the T5 bias per bucket.

`draw_maps(init, out)` loads an encoder (a run directory or a preset folder) and draws
`backbone.positional_bias(n)`, the term every layer adds to its attention logits that
depends on positions only, one heatmap per head (row `i` the query, column `j` the key,
position 0 [CLS]); with the T5 bias also each bucket's learned bias per head
(`<out stem>_t5_buckets.png`). The arrays go to `<out stem>.npz`, the command, model and a
per-head summary (`offset_profile`) to `<out stem>.json`; `redraw_maps` draws them again.
"""

import math
import os
import time

import numpy as np

from experiments import records
from experiments.config import StudyError


def _bucket_labels(bidirectional, num_buckets, max_distance):
    """`(labels, order)`: `{bucket: "lo…hi"}`, the relative distances `j - i` each bucket
    holds, and the used buckets sorted by distance (far left … 0 … far right)."""
    from keras import ops

    from keras_tupe.layers.relative_bucket_bias import t5_relative_position_bucket

    span = 2 * max_distance
    distances = np.arange(-span, span + 1)
    buckets = ops.convert_to_numpy(t5_relative_position_bucket(
        distances, bidirectional=bidirectional, num_buckets=num_buckets,
        max_distance=max_distance))
    labels, centers = {}, {}
    for bucket in range(num_buckets):
        members = distances[buckets == bucket]
        if not len(members):
            labels[bucket] = "unused"  # e.g. "distance 0, key after the query"
            continue
        lo, hi = int(members.min()), int(members.max())
        centers[bucket] = (lo + hi) / 2
        if lo == -span:
            labels[bucket] = f"≤{hi}"
        elif hi == span:
            labels[bucket] = f"≥{lo}"
        else:
            labels[bucket] = str(lo) if lo == hi else f"{lo}…{hi}"
    return labels, sorted(centers, key=centers.get)


def draw_maps(init, out, length=64, command=None):
    """Writes the heatmaps (and the T5 bucket plot); returns the paths written."""
    from keras_tupe.finetuning import load_backbone

    start = time.perf_counter()
    _check_png(out)
    backbone = load_backbone(init)
    try:
        backbone.check_sequence_length(length)
        bias = np.asarray(backbone.positional_bias(length), dtype=np.float32)  # (h, n, n)
    except ValueError as error:
        raise StudyError(
            f"{init}: no positional map to draw. {error} Positional maps exist for tupe_a, "
            "tupe_a_tie_cls, tupe_r and bert_r.") from error
    encoder = {k: getattr(backbone, k) for k in ENCODER_FIELDS}
    arrays = {"positional_bias": bias}
    if backbone.relative_bias is not None:
        layer = backbone.relative_bias
        arrays["t5_bias"] = np.asarray(layer.relative_attention_bias.numpy(), dtype=np.float32)
        labels, _ = _bucket_labels(layer.bidirectional, layer.num_buckets, layer.max_distance)
        arrays["t5_bucket_labels"] = np.array([labels[b] for b in range(layer.num_buckets)])
    paths = _plot(arrays, encoder, init, out)
    paths["npz"] = os.path.splitext(out)[0] + ".npz"
    np.savez(paths["npz"], **arrays)
    paths["json"] = records.write_json(os.path.splitext(out)[0] + ".json", {
        "command": command, "init": init, "length": length, "created": records.now(),
        "encoder": encoder, "summary": offset_profile(bias),
        "files": paths, "seconds": time.perf_counter() - start, "machine": records.machine()})
    return paths


def redraw_maps(npz, out=None):
    """Draws the maps again from the arrays a `draw_maps` run saved (`<stem>.npz` and its
    `<stem>.json`), without the model: `out` (default `<stem>.png`) and the T5 bucket plot
    beside it. The arrays and the JSON are records and stay as they are.
    """
    stem = os.path.splitext(npz)[0]
    if not npz.endswith(".npz") or not os.path.exists(npz):
        raise StudyError(f"--from-npz {npz}: not a maps .npz file (a `maps` run writes "
                         "<out stem>.npz beside its PNG).")
    info = records.read_json(stem + ".json")
    if info is None:
        raise StudyError(f"--from-npz {npz}: {stem}.json, written with it, is missing; the "
                         "maps cannot be redrawn without it (the encoder it describes).")
    out = out or stem + ".png"
    _check_png(out)
    with np.load(npz) as saved:
        arrays = {name: saved[name] for name in saved.files}
    return _plot(arrays, info["encoder"], info["init"], out)


ENCODER_FIELDS = ("num_layers", "num_heads", "hidden_dim", "absolute_position",
                  "absolute_correlation", "relative_position", "cls_reset", "num_buckets",
                  "max_distance")


def _check_png(out):
    if not out.lower().endswith(".png"):
        raise StudyError(f"--out must be a .png file. Received: {out}")


def _plot(arrays, encoder, init, out):
    """The heatmaps into `out` and, with a T5 table, its bucket plot; returns the paths."""
    bias = arrays["positional_bias"]
    heads, length, _ = bias.shape
    plt = records.pyplot()
    columns = min(heads, 4)
    rows = math.ceil(heads / columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 3.0 * rows), squeeze=False)
    # One colour scale for every head, set by the positions after [CLS] (the reset's θ1/θ2
    # can lie far outside it: the colour bar then extends); [CLS]'s row and column outlined.
    body = bias[:, 1:, 1:] if length > 1 else bias
    vmin, vmax = float(body.min()), float(body.max())
    extend = {(False, False): "neither", (True, False): "min", (False, True): "max",
              (True, True): "both"}[(bool(bias.min() < vmin), bool(bias.max() > vmax))]
    for head, axis in enumerate(axes.flat):
        if head >= heads:
            axis.axis("off")
            continue
        image = axis.imshow(bias[head], cmap="viridis", interpolation="nearest", vmin=vmin,
                            vmax=vmax)
        for line in (axis.axhline, axis.axvline):
            line(0.5, color="white", lw=2.0)  # [CLS] (position 0) above / left of the lines
        axis.set_title(f"head {head}", fontsize=9)
        axis.set_xlabel("key position j", fontsize=8)
        if head % columns == 0:  # one label a row: beside a neighbour it overlaps its image
            axis.set_ylabel("query position i", fontsize=8)
        ticks = [0, *range(16, length, 16)]
        axis.set_xticks(ticks, ["[CLS]", *map(str, ticks[1:])], fontsize=7, rotation=90)
        axis.set_yticks(ticks, ["[CLS]", *map(str, ticks[1:])], fontsize=7)
    colorbar = figure.colorbar(image, ax=axes.ravel().tolist(), fraction=0.03, pad=0.02,
                               extend=extend)
    colorbar.set_label("positional logit term (shared scale)", fontsize=8)
    colorbar.ax.tick_params(labelsize=7)
    terms = [name for name, present in (
        ("untied correlation", encoder["absolute_correlation"] == "untied"),
        ("T5 bias", "t5_bias" in arrays),
        ("[CLS] reset", encoder["cls_reset"])) if present]
    figure.suptitle(f"{os.path.normpath(init)}: content-free positional term "
                    f"({' + '.join(terms)}), first {length} positions; [CLS] is position 0, "
                    "outlined", fontsize=9)
    paths = {"png": records.save_figure(figure, out)}

    if "t5_bias" in arrays:
        table = arrays["t5_bias"]  # (buckets, heads)
        labels, order = _bucket_labels(True, encoder["num_buckets"], encoder["max_distance"])
        figure, axis = plt.subplots(figsize=(9, 4))
        positions = np.arange(len(order))
        for head in range(table.shape[1]):
            axis.plot(positions, table[order, head], ms=3, label=f"head {head}",
                      **records.line_style(head))
        axis.axhline(0, color="grey", lw=0.6)
        axis.set_xticks(positions, [f"{labels[b]} (#{b})" for b in order], rotation=90,
                        fontsize=7)
        axis.set_xlabel("relative distance j − i (bucket #), in distance order")
        axis.set_ylabel("learned bias b[bucket]")
        axis.set_title(f"{os.path.normpath(init)}: T5 relative bias per bucket "
                       f"({encoder['num_buckets']} buckets, max_distance "
                       f"{encoder['max_distance']})", fontsize=9)
        axis.grid(alpha=0.3)
        records.legend_outside(axis)
        paths["t5_buckets"] = records.save_figure(
            figure, os.path.splitext(out)[0] + "_t5_buckets.png")
    return paths


def offset_profile(bias, max_offset=4):
    """Per head: the mean term at each offset `j - i` (rows 1.., [CLS] aside), the offset
    it peaks at, and the [CLS] row and column (the reset's θ1 and θ2 where there is one).

    A peak at -1 is TUPE's "previous" pattern, at +1 "next", at 0 "local".
    """
    heads, n, _ = bias.shape
    body = bias[:, 1:, 1:]  # the [CLS] row and column aside
    offsets = [d for d in range(-max_offset, max_offset + 1) if abs(d) < n - 1]
    distance = np.abs(np.subtract.outer(np.arange(n - 1), np.arange(n - 1)))
    result = []
    for head in range(heads):
        means = {d: float(np.diagonal(body[head], offset=d).mean()) for d in offsets}
        off_band = body[head][distance > max_offset]
        result.append({
            "head": head,
            "mean_by_offset": {str(d): m for d, m in means.items()},
            "peak_offset": max(means, key=means.get),
            "std_off_band": float(off_band.std()) if off_band.size else 0.0,
            "cls_row_mean": float(bias[head, 0, 1:].mean()) if n > 1 else None,
            "cls_column_mean": float(bias[head, 1:, 0].mean()) if n > 1 else None,
        })
    return result
