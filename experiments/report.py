"""Every page of `docs/results/`, made from the committed records alone (never `runs/`: from
the same records, the same bytes; tested). `report` writes each recorded study's pages by its
kind (`report_pretraining.pretrain_pages`, `report_finetuning.finetune_pages`,
`report_length.length_pages`), then the pages over several studies that the chosen ones are
part of (seed replicates, and the `compare` and `compare_seeds` entries of `studies.json`)
and the maps. A study with `frozen` keeps its committed pages. Their commands and pages:
experiments/README.md; their prose: `templates/`.
"""

import glob
import os

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.maps import redraw_maps
from experiments.report_finetuning import finetune_pages
from experiments.report_length import length_pages
from experiments.report_pretraining import (compare_pages, group_figure, pretrain_pages,
                                           seed_groups, seed_pages)

WRITERS = {"pretrain": pretrain_pages, "finetune": finetune_pages, "length": length_pages}


def report_command(config):
    """The command that regenerates a study's pages, whichever command wrote them."""
    return records.command_line(["report", *config["_flag"]])


def recorded(config):
    """Whether a study has a record: a run's `run_config.json` or a `results.jsonl` (a
    fine-tuning study that has only pinned its settings has none yet)."""
    folder = records.record_dir(config)
    return any(glob.glob(os.path.join(folder, "**", name), recursive=True)
               for name in (records.RUN_RECORD, "results.jsonl"))


def report(reference=None):
    """Writes the pages of the study or comparison `reference` (a name or a `.json` file;
    default: every recorded study, every comparison, and the maps) and the pages it is part
    of; returns `{what: path}`."""
    if reference and reference.endswith(".json"):  # a study in a file, among its folder's
        names = sorted(glob.glob(os.path.join(os.path.dirname(reference), "*.json")))
    else:
        names = sorted(study_config.studies())
    entries = [study_config.load_config(name) for name in names]
    named = [c for c in entries if reference in (c["study"], c["_path"])] if reference else entries
    if reference and not named:  # not among them (or nowhere: load_config says so)
        named = [study_config.load_config(reference)]
    every = [c for c in entries if c["kind"] in WRITERS]
    paths = {}

    def add(prefix, pages):
        paths.update((f"{prefix} {kind}", page) for kind, page in pages.items())

    for config in named:
        if config.get("frozen") and reference:
            raise StudyError(f"{config['_path']}: its pages are frozen as committed: "
                             f"{config['frozen']}")
        if config["kind"] in WRITERS and (reference or recorded(config)) and not config.get(
                "frozen"):
            add(config["study"], WRITERS[config["kind"]](config, report_command(config)))
    chosen = {c["study"] for c in named}
    command = records.command_line(["report"])
    groups = seed_groups(every)
    for name, (members, variants) in groups.items():
        if chosen & {c["study"] for c in members} and any(map(recorded, members)):
            add(f"{name} seeds", seed_pages(members, name, command, only=variants))
    for entry in (c for c in entries if c["kind"] == "compare_seeds"):
        name, bases = entry["study"], entry["groups"]
        members = {c["study"] for base, _ in bases for c in groups.get(base, ([], []))[0]}
        if chosen & (members | {name}) and all(base in groups for base, _ in bases):
            add(name, group_figure([(label, *groups[base]) for base, label in bases], name))
    by_name = {c["study"]: c for c in every}
    for entry in (c for c in entries if c["kind"] == "compare"):
        name, group = entry["study"], entry["studies"]
        if chosen & (set(group) | {name}) and all(s in by_name for s in group):
            add(f"{name} compare", compare_pages([by_name[s] for s in group], name, command))
    for results in sorted({c["results_dir"] for c in every}) if not reference else ():
        for npz in sorted(glob.glob(os.path.join(results, "maps", "*.npz"))):
            add(npz, redraw_maps(npz))
    return paths
