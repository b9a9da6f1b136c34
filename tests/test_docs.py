"""The docs name every public layer and every preset (issue 51, item 6).

README.md is a front page and the manual lives in docs/*.md; a layer or preset added to the
code and left out of both fails here. The check is a pure function of the text, so the tests
below also show it failing on the real docs with one name taken out. No model is built.
"""

import re
from pathlib import Path

import pytest

from keras_tupe import layers
from keras_tupe_base.presets import PRESETS, SIZES, VARIANTS

ROOT = Path(__file__).resolve().parents[1]


def docs_text(root=ROOT):
    """README.md and every docs/*.md page, joined."""
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    return "\n".join(page.read_text(encoding="utf-8") for page in pages)


def _table_first_cells(text, header):
    """The backticked names in the first column of every Markdown table whose first header
    cell is `header`."""
    names, in_table = set(), False
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if not line.lstrip().startswith("|"):
            in_table = False
        elif cells[0] == header:
            in_table = True
        elif in_table:
            names.update(re.findall(r"`([^`]+)`", cells[0]))
    return names


def named_presets(text):
    """Preset names the text gives: written out in backticks, or as a row of a `variant`
    table times a row of a `size` table (`f"{variant}_{size}"`, the presets' rule)."""
    written = set(re.findall(r"`([a-z0-9_]+)`", text))
    variants = _table_first_cells(text, "variant")
    sizes = _table_first_cells(text, "size")
    return written | {f"{variant}_{size}" for variant in variants for size in sizes}


def missing_layers(text, names=tuple(layers.__all__)):
    """Public layer names the text never writes in backticks."""
    return sorted(name for name in names if f"`{name}`" not in text)


def missing_presets(text, names=tuple(PRESETS)):
    return sorted(set(names) - named_presets(text))


def test_every_public_layer_is_named_in_the_docs():
    assert len(layers.__all__) >= 14  # 11 classes and 3 functions at the time of writing
    assert missing_layers(docs_text()) == []


def test_every_preset_is_named_in_the_docs():
    assert len(PRESETS) == len(VARIANTS) * len(SIZES)
    assert missing_presets(docs_text()) == []


def test_the_readme_presets_tables_are_exactly_the_variants_and_sizes():
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    assert _table_first_cells(text, "variant") == set(VARIANTS)
    assert _table_first_cells(text, "size") == set(SIZES)


@pytest.mark.parametrize("name", layers.__all__)
def test_a_layer_left_out_of_the_docs_is_reported(name):
    text = docs_text().replace(f"`{name}`", "a layer")
    assert missing_layers(text) == [name]


@pytest.mark.parametrize("variant", ["tupe_r", "deberta"])
def test_a_variant_left_out_of_the_docs_is_reported(variant):
    lines = docs_text().splitlines()
    text = "\n".join(line for line in lines if not line.startswith(f"| `{variant}` |"))
    text = re.sub(rf"`{variant}(_({'|'.join(SIZES)}))?`", "a variant", text)
    assert missing_presets(text) == sorted(f"{variant}_{size}" for size in SIZES)


def test_a_size_left_out_of_the_docs_is_reported():
    text = "\n".join(line for line in docs_text().splitlines() if not line.startswith("| `base` |"))
    text = re.sub(r"`[a-z0-9_]*base`", "a size", text)
    assert missing_presets(text) == sorted(f"{variant}_base" for variant in VARIANTS)
