"""Writing the report's pages: prose from `templates/`, Markdown tables, loss figures, and the
pages of one study or comparison written by their endings. Shared by every kind of report
(`report_pretraining`, `report_finetuning`, `report_length`) and by `claims`.
"""

import os
import re
import string

from experiments import records

LOSS_LABEL = "validation masked-LM loss"
TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")


def prose(name, section, /, **fields):
    """Section `[[section]]` of `templates/<name>.md`, its `$fields` filled in."""
    with open(os.path.join(TEMPLATES, f"{name}.md"), encoding="utf-8") as f:
        parts = re.split(r"^\[\[(\w+)\]\]$", f.read(), flags=re.M)
    return string.Template(dict(zip(parts[1::2], parts[2::2]))[section].strip("\n")).substitute(
        fields)


def paragraph(text):
    """`text` as a paragraph after the one before it ("" when there is none)."""
    return f"\n\n{text}" if text else ""


def _row(cells):
    return "| " + " | ".join(cells) + " |"


def markdown_table(header, align, rows):
    """A Markdown table: `header`, `align` ("l" or "r" per column), rows of cells."""
    return "\n".join([_row(header), _row("---:" if a == "r" else "---" for a in align),
                      *map(_row, rows)])


def table_lines(rows):
    """Rows after a template's table header."""
    return "".join(f"\n{_row(cells)}" for cells in rows)


def cell(value, spec=".3f"):
    """`value` as a table's cell: "–" when there is none."""
    return "–" if value is None else format(value, spec)


def loss_figure(draw, path, xlabel, title=None, tight=False, fontsize=8, size=(7, 4.5)):
    """A loss plot: `draw(axis)` draws the lines, the rest is shared; returns `path`."""
    figure, axis = records.pyplot().subplots(figsize=size)
    draw(axis)
    axis.set_xlabel(xlabel)
    axis.set_ylabel(LOSS_LABEL)
    if title is not None:
        axis.set_title(title, fontsize=10)
    axis.grid(alpha=0.3)
    if tight:
        figure.tight_layout()
    records.legend_outside(axis, fontsize=fontsize)
    return records.save_figure(figure, path)


def write_pages(out_dir, prefix, **pages):
    """Writes each page `kind=(name, content...)` as `<prefix>_<name>` into `out_dir` by its
    ending (CSV: columns, rows, comments; PNG: a function that draws it; Markdown; JSON);
    returns the paths."""
    writers = {".csv": records.write_csv, ".md": records.write_text,
               ".json": records.write_json, ".png": lambda path, draw: draw(path)}
    return {kind: writers[os.path.splitext(name)[1]](os.path.join(out_dir, f"{prefix}_{name}"),
                                                     *content)
            for kind, (name, *content) in pages.items()}


def page_header(config, command):
    """A page's first comment lines: the command that wrote it and its study's config."""
    return [f"command: {command}", f"study config: {config['_path']}"]
