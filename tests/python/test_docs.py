"""Every fenced ``python`` block of README.md and docs/*.md runs (issue 29, item 15).

A page's blocks run in order, in one namespace per page, in a fresh interpreter (a block may build on
the blocks above it, as a reader does). A block that is an excerpt of a longer program (an API
summary with placeholders, a method body) is marked as a fragment by the line

    <!-- fragment -->

right above its fence: it is not run, but it must still compile, so a typo or a placeholder that is
not Python fails here too. Blocks run from a temporary working directory (a block that saves files
leaves nothing in the checkout).
"""
from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import List

import pytest

ROOT = Path(__file__).resolve().parents[2]
FRAGMENT_MARKER = "<!-- fragment -->"
FENCE = re.compile(r"^```(\S*)")


@dataclass
class Block:
    page: Path
    line: int          # 1-based line of the opening fence
    code: str
    fragment: bool


def python_blocks(page: Path) -> List[Block]:
    """The fenced python blocks of a Markdown page, with their fragment markers."""
    blocks, lines = [], page.read_text(encoding="utf-8").splitlines()
    i = 0
    while i < len(lines):
        match = FENCE.match(lines[i])
        if not match:
            i += 1
            continue
        start, body = i, []
        i += 1
        while i < len(lines) and not lines[i].startswith("```"):
            body.append(lines[i])
            i += 1
        i += 1  # the closing fence
        if match.group(1) == "python":
            marked = start > 0 and lines[start - 1].strip() == FRAGMENT_MARKER
            blocks.append(Block(page, start + 1, "\n".join(body) + "\n", marked))
    return blocks


def documented_pages() -> List[Path]:
    return [ROOT / "README.md"] + sorted((ROOT / "docs").glob("*.md"))


PAGES = [p for p in documented_pages() if python_blocks(p)]


def _label(block: Block) -> str:
    return f"{block.page.relative_to(ROOT)}:{block.line}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_fragment_compiles(page):
    for block in python_blocks(page):
        try:
            compile(block.code, _label(block), "exec")
        except SyntaxError as e:
            pytest.fail(f"{_label(block)}: the block does not compile: {e}")


RUNNER = textwrap.dedent("""
    namespace = {"__name__": "__docs__"}
    for label, code in BLOCKS:
        print("=== running", label, flush=True)
        exec(compile(code, label, "exec"), namespace)
""")


@pytest.mark.parametrize("page", [p for p in PAGES if any(not b.fragment for b in python_blocks(p))],
                         ids=lambda p: str(p.relative_to(ROOT)))
def test_every_runnable_block_runs(page, tmp_path):
    blocks = [(_label(b), b.code) for b in python_blocks(page) if not b.fragment]
    script = tmp_path / "blocks.py"
    script.write_text(f"BLOCKS = {blocks!r}\n" + RUNNER, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True,
                            timeout=600, env=dict(os.environ))
    assert result.returncode == 0, (f"a block of {page.relative_to(ROOT)} failed\n"
                                    f"stdout:\n{result.stdout[-4000:]}\nstderr:\n{result.stderr[-4000:]}")


def test_the_collector_sees_markers(tmp_path):
    """The collector itself: a marked block is a fragment, an unmarked one runs, other fences are ignored."""
    page = tmp_path / "page.md"
    page.write_text("text\n\n```python\nx = 1\n```\n\n<!-- fragment -->\n```python\ny = x +\n```\n\n"
                    "```bash\nls\n```\n", encoding="utf-8")
    blocks = python_blocks(page)
    assert [(b.line, b.fragment, b.code) for b in blocks] == [(3, False, "x = 1\n"), (8, True, "y = x +\n")]
    with pytest.raises(SyntaxError):
        compile(blocks[1].code, "fragment", "exec")
