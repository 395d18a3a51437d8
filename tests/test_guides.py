"""The guides of the documentation site say what the library does (issue 24).

Every ```` ```python ```` block of a guide (``docs/guides/*.md``) runs, in order, in one
namespace per guide, in a fresh working directory, as a reader would paste them: a guide that
promises ``await open_async_store(...)`` or an ``ANY`` row losing to a named one shows it
happening, and goes red when the library stops doing it. Blocks meant to be read only are
fenced ```` ```py ```` (they need a cluster, a provider account, a shell).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
GUIDES = ROOT / "docs" / "guides"
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.S | re.M)


def python_blocks(text: str) -> list[str]:
    return BLOCK.findall(text)


def guides() -> list[Path]:
    return sorted(GUIDES.glob("*.md"))


def test_the_guides_exist_and_hold_code() -> None:
    names = {p.stem for p in guides()}
    assert {"getting-started", "controller", "tables", "stores", "emitters"} <= names
    assert {"kubernetes", "replay", "testing"} <= names
    assert sum(len(python_blocks(p.read_text(encoding="utf-8"))) for p in guides()) >= 15


def test_the_block_finder_takes_python_fences_only() -> None:
    text = "a\n```python\nx = 1\n```\n\n```py\nnot run\n```\n```sh\nls\n```\n```python\ny\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y\n"]


@pytest.mark.parametrize("guide", guides(), ids=[p.stem for p in guides()])
def test_every_python_block_of_a_guide_runs(
    guide: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    namespace: dict[str, object] = {"__name__": f"guide_{guide.stem.replace('-', '_')}"}
    for number, block in enumerate(python_blocks(guide.read_text(encoding="utf-8")), 1):
        code = compile(block, f"{guide.relative_to(ROOT)} (block {number})", "exec")
        exec(code, namespace)
