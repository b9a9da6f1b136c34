"""The measurements of a sweep, in the order they run, and each group in a fresh process."""

import itertools
import json

from benchmarks import harness

KERAS_HUB_BERT = "keras_hub_bert"  # keras-hub's BertBackbone with the sizes of bert_a_<size>


def config_key(row):
    """What a measurement's variants share: one table of the report, one --interleave group."""
    return (row["seq_len"], row["mode"], row["xla"], row["precision"], row.get("flash", False))


def plan_jobs(settings):
    """The measurements in the order they run: configurations outer, variants inner.

    Each round rotates the variant order by one, so no model always runs first
    (right after another's compilation) or last.
    """
    jobs = []
    variants, rounds = settings["variants"], settings["rounds"]
    for round_index in range(rounds):
        repeats = len(range(round_index, settings["repeats"], rounds))  # the round's share
        shift = round_index % len(variants)
        # Flash off and on side by side (one --interleave process).
        for precision, xla, mode, seq_len, flash in itertools.product(
                settings["precisions"], settings["xla"], settings["modes"],
                settings["seq_lens"], settings.get("flash", [False])):
            for variant in variants[shift:] + variants[:shift]:
                jobs.append(dict(
                    variant=variant, size=settings["size"], seq_len=seq_len, mode=mode,
                    xla=xla, precision=precision, flash=flash,
                    batch_size=settings["batch_size"], repeats=repeats,
                    warmup=settings["warmup"], round=round_index,
                    vocabulary_size=settings["vocabulary_size"],
                    activation=settings["activation"], dropout=settings.get("dropout")))
    return jobs


def group_jobs(jobs, interleave):
    """The jobs each process runs: one each, or with --interleave one configuration
    (flash off and on together) of one round."""
    if not interleave:
        return [[job] for job in jobs]
    return [list(group) for _, group in itertools.groupby(
        jobs, lambda job: (job["round"],) + config_key(job)[:4])]


def probe_backend(timeout=600):
    """The worker's `--probe`: backend, versions, GPUs, the presets' variants and sizes."""
    result, error, _ = harness.run_fresh("benchmarks.encoders", ["--probe"], timeout)
    if result is None:
        raise RuntimeError(f"Could not start the backend: {error}")
    return result


def run_group(jobs, timeout):
    """Runs `jobs` in one fresh process; a crash is recorded for each of them."""
    results, error, wall = harness.run_fresh(
        "benchmarks.encoders", ["--worker", json.dumps(jobs)], timeout * len(jobs))
    if results is None:
        status = "out_of_memory" if "out of memory" in error else "failed"
        results = [dict(job, status=status, error=error) for job in jobs]
    for result in results:
        result["wall_s"] = round(wall / len(jobs), 2)
    return results
