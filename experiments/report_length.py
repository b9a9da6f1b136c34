"""A length study's pages (Huang Table 4: masked-LM loss at longer sequences), from its record
(`results.jsonl`, one checkpoint and length a line) alone: the CSV, the plot, the table and
the config record. The checkpoints are `plans.length_plan`'s, with the unigram reference.
"""

from experiments import config as study_config
from experiments import records
from experiments.config import StudyError
from experiments.pages import (loss_figure, markdown_table, page_header, paragraph, prose,
                               write_pages)
from experiments.plans import UNIGRAM, length_key, length_plan, length_results


def length_pages(config, command):
    """Writes the length study's CSV, plot, table and config record; returns their paths."""
    by_key = {length_key(row): row for row in records.read_jsonl(length_results(config))}
    jobs = length_plan(config)
    if any(length_key({**UNIGRAM, "length": n}) in by_key for n in config["lengths"]):
        jobs.append({**UNIGRAM, "trained_seq_len": None})
    results = {id(job): [by_key.get(length_key({**job, "length": n})) for n in config["lengths"]]
               for job in jobs}
    rows = [row for job in jobs for row in results[id(job)] if row]
    if not rows:
        raise StudyError(f"No result yet for study {config['study']!r}: run "
                         f"python -m experiments.run length {' '.join(config['_flag'])}")
    header = page_header(config, command) + [prose(
        "length", "csv", batches=config["batches"], tokens_per_batch=config["tokens_per_batch"],
        corpus=config["valid_corpus"], seed=config["seed"])]
    columns = ("pretrain_study", "variant", "preset", "step", "trained_seq_len", "length",
               "batch_size", "batches", "masked_tokens", "loss", "accuracy", "seconds", "note")
    return write_pages(
        config["results_dir"], config["study"], csv=("loss.csv", columns, rows, header),
        png=("loss.png", lambda path: _length_plot(config, jobs, results, path)),
        table=("table.md", _length_table(config, jobs, results, command)),
        config=("config.json", {
            "command": command, "study_config": study_config.resolved(config),
            "evaluated": jobs, "seconds": sum(r["seconds"] for r in rows)}))


def _length_plot(config, jobs, results, path):
    lengths = config["lengths"]

    def draw(axis):
        drawn = 0
        for job in jobs:
            points = [(n, row["loss"]) for n, row in zip(lengths, results[id(job)])
                      if row and row["loss"] is not None]
            label = (f"{job['pretrain_study']}/{job['variant']}"
                     + ("" if job["final"] else f"@{job['step']}"))
            if points and job["pretrain_study"] == UNIGRAM["pretrain_study"]:
                axis.plot(*zip(*points), "--", color="black", lw=1.2, label=label)
            elif points:
                axis.plot(*zip(*points), ms=3.5, lw=1.2, label=label,
                          **records.line_style(drawn))
                drawn += 1
        axis.set_xscale("log", base=2)
        axis.set_xticks(lengths, [str(n) for n in lengths])

    trained = sorted({j["trained_seq_len"] for j in jobs} - {None})
    return loss_figure(draw, path, "evaluation sequence length (pre-trained at "
                       f"{', '.join(map(str, trained))})", fontsize=7)


def _length_table(config, jobs, results, command):
    lengths, rows = config["lengths"], []
    for job in jobs:
        speed = (records.median_tokens_per_second(records.read_metrics(job["pretrain_record"])[0])
                 if "pretrain_record" in job else None)
        cells, notes = [], []
        for n, row in zip(lengths, results[id(job)]):
            cells.append("–" if row is None else "n/a" if row["loss"] is None
                         else f"{row['loss']:.3f}")
            if row is not None and (row["loss"] is None or row["note"]):
                notes.append(f"{n}: {row['note']}")
        texts = {note.split(": ", 1)[1] for note in notes}
        if len(notes) == len(lengths) and len(texts) == 1:  # one note for every length
            notes = sorted(texts)
        rows.append([f"{job['pretrain_study']}/{job['variant']}", job["preset"],
                     str(job["step"]), *cells,
                     f"{job['tokens_per_step'] / speed:.2f}" if speed else "–",
                     "; ".join(notes)])
    return prose(
        "length", "length", study=config["study"], command=command,
        description=paragraph(config.get("description")), batches=config["batches"],
        tokens=f"{config['tokens_per_batch']:,}", corpus=config["valid_corpus"],
        tokens_per_batch=config["tokens_per_batch"], seed=config["seed"],
        table=markdown_table(["encoder", "preset", "step", *map(str, lengths),
                              "pre-training s/step", "notes"],
                             "llr" + "r" * len(lengths) + "rl", rows)) + "\n"
