"""The guides of the documentation site say what the library does (issue 24).

Every ```` ```python ```` block of a guide (``docs/guides/*.md``) runs, in order, in one
namespace per guide, in a fresh working directory, as a reader would paste them: a guide that
promises ``await open_async_store(...)`` or an ``ANY`` row losing to a named one shows it
happening, and goes red when the library stops doing it. Blocks meant to be read only are
fenced ```` ```py ```` (they need a cluster, a provider account, a shell).
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
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
    assert {"kubernetes", "replay", "testing", "walkthrough"} <= names
    assert sum(len(python_blocks(p.read_text(encoding="utf-8"))) for p in guides()) >= 15


def test_the_block_finder_takes_python_fences_only() -> None:
    text = "a\n```python\nx = 1\n```\n\n```py\nnot run\n```\n```sh\nls\n```\n```python\ny\n```\n"
    assert python_blocks(text) == ["x = 1\n", "y\n"]


@pytest.mark.parametrize("guide", guides(), ids=[p.stem for p in guides()])
def test_every_python_block_of_a_guide_runs(
    guide: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    # the walkthrough imports the example controller and starts it as a subprocess
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "controller"))
    path = os.environ.get("PYTHONPATH", "")
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT / "src"), path])))
    try:  # a guide loads a kubeconfig (the fake API server's): the default is restored after
        from kubernetes import client  # type: ignore[import-untyped]

        monkeypatch.setattr(client.Configuration, "_default", None)
    except ImportError:
        pass
    namespace: dict[str, object] = {"__name__": f"guide_{guide.stem.replace('-', '_')}"}
    try:
        for number, block in enumerate(python_blocks(guide.read_text(encoding="utf-8")), 1):
            code = compile(block, f"{guide.relative_to(ROOT)} (block {number})", "exec")
            exec(code, namespace)
    finally:  # a process a guide started (the walkthrough's controller) ends with the test
        for value in namespace.values():
            if isinstance(value, subprocess.Popen) and value.poll() is None:
                value.kill()
                value.wait(10)


KUBERNETES = GUIDES / "kubernetes.md"
TOML = re.compile(r"^```toml\n(.*?)^```$", re.S | re.M)


def test_every_code_block_of_the_kubernetes_guide_is_checked() -> None:
    """Issue 35 (5): the guide's controller blocks named ``informer_lookup`` and
    ``informer_get``, defined nowhere, in ```` ```py ```` fences nothing ran. Every block is
    Python that runs against the shipped fake API server, except the ``kind`` shell commands
    and the mypy override (checked below)."""
    text = KUBERNETES.read_text(encoding="utf-8")
    fences = re.findall(r"^```(\w*)$", text, re.M)
    opened = fences[0::2]
    assert set(opened) == {"python", "sh", "toml"}, opened
    assert opened.count("sh") == 1
    for name in ("informer_lookup", "informer_get"):
        assert name not in text
    assert "FakeApiServer" in python_blocks(text)[0]


def run_mypy(tmp_path: Path, override: str) -> subprocess.CompletedProcess[str]:
    text = KUBERNETES.read_text(encoding="utf-8")
    (tmp_path / "guide.py").write_text("\n".join(python_blocks(text)))
    config = '[tool.mypy]\nstrict = true\npython_version = "3.11"\n\n' + override
    # the library as mypy reads an installed package: its own modules are not reported on
    config += '\n[[tool.mypy.overrides]]\nmodule = ["lifecycle", "lifecycle.*"]\n'
    config += 'follow_imports = "silent"\n'
    (tmp_path / "pyproject.toml").write_text(config)
    env = {**os.environ, "MYPYPATH": str(ROOT / "src")}
    return subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(tmp_path / "cache"), "guide.py"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_kubernetes_guide_type_checks_strictly_with_the_override_it_gives(
    tmp_path: Path,
) -> None:
    """The guide's blocks pass ``mypy --strict`` with its ``pyproject.toml`` override for the
    untyped ``kubernetes`` client, and fail without it: the advice is needed and enough."""
    pytest.importorskip("mypy")
    (override,) = TOML.findall(KUBERNETES.read_text(encoding="utf-8"))
    assert 'module = ["kubernetes", "kubernetes.*"]' in override
    checked = run_mypy(tmp_path, override)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    refused = run_mypy(tmp_path, "")
    assert refused.returncode == 1, refused.stdout
    assert 'Skipping analyzing "kubernetes"' in refused.stdout
    assert "import-untyped" in refused.stdout


WALKTHROUGH = GUIDES / "walkthrough.md"


def test_every_block_of_the_walkthrough_runs_but_the_kind_recipe() -> None:
    """Issue 38: the walkthrough's blocks are Python the suite runs, except one ``sh`` block,
    the ``kind`` recipe, under its own heading (it needs a cluster and Docker), which uses the
    example's committed manifests and Dockerfile."""
    text = WALKTHROUGH.read_text(encoding="utf-8")
    fences = re.findall(r"^```(\w*)$", text, re.M)[0::2]
    assert set(fences) == {"python", "sh"}, fences
    assert fences.count("sh") == 1, fences
    recipe = text[text.index("## On kind") :]
    assert "```sh" in recipe
    assert "```python" not in recipe
    for needed in ("kind create cluster", "kind load docker-image", "kubectl apply -f"):
        assert needed in recipe
    assert (ROOT / "examples" / "controller" / "Dockerfile").is_file()
    assert "## What the fake cluster cannot show" in text
