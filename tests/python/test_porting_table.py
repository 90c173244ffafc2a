"""docs/porting.md "Every training class": one row per class of the MPS training inventory
(../shared/reference/mps_training_classes.txt beside the repository, as in CI), each giving the
mpsgrad name the naming rule gives, and every name given exists in the module (rows saying "not
yet" name the classes still to come, which must then not exist under another spelling)."""
import pathlib
import re

import pytest

import mpsgrad as m

ROOT = pathlib.Path(__file__).resolve().parents[2]
INVENTORY = ROOT.parent / "shared" / "reference" / "mps_training_classes.txt"


def _inventory():
    if not INVENTORY.exists():
        pytest.skip(f"{INVENTORY} is not beside the repository")
    rows = [line.rstrip("\n").split("\t") for line in INVENTORY.read_text().splitlines() if line.strip()]
    return [(r[0], r[1]) for r in rows if len(r) >= 2]


def _table():
    text = (ROOT / "docs" / "porting.md").read_text()
    section = text.split("## Every training class", 1)[1]
    return {row[0]: row[1] for row in re.findall(r"^\| `(MPS\w+)` \| (.*?) \|", section, flags=re.M)}


def test_every_training_class_has_a_row_with_its_mpsgrad_name():
    table = _table()
    for mps, name in _inventory():
        assert mps in table, f"docs/porting.md: no row for {mps}"
        row = table[mps]
        if row.startswith("not yet"):
            assert f"`{name}`" in row and not hasattr(m, name), f"{mps}: {name} exists now; update its row"
        else:
            assert row == f"`mpsgrad.{name}` / `mpsgrad::{name}`", f"{mps}: {row}"
            assert hasattr(m, name), f"{mps}: mpsgrad.{name} does not exist"
    assert len(table) == len(_inventory())
