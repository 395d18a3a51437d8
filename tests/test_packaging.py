"""The package as the Python world sees it (issue 24): one distribution name in every install
hint and metadata look-up, the licence shipped in the current metadata form, one list of
supported Pythons, floors that CI can read, and an sdist that holds only what it declares.

The floor, Python and file-list checks that need a build or an install run in CI
(``make floors``, ``make test-pythons``, ``make wheel-check``); these hold the declarations
they read to each other, so neither side can drift.
"""

from __future__ import annotations

import ast
import re
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement as Oracle
from scripts import dist_contents, floors

from lifecycle.stores._sqlite_history import SUFFIX

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT: dict[str, Any] = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
PROJECT: dict[str, Any] = PYPROJECT["project"]
NAME: str = PROJECT["name"]
EXTRAS = set(PROJECT["optional-dependencies"])


def texts() -> list[tuple[str, str]]:
    """Every file a user or a message reads a distribution name from, as (name, text)."""
    paths = [ROOT / "README.md", ROOT / "Makefile", ROOT / "pyproject.toml"]
    for folder in ("src", "docs", "examples", "scripts", "benchmarks"):
        paths += [p for p in (ROOT / folder).rglob("*") if p.suffix in {".py", ".md", ".sh"}]
    return [(str(p.relative_to(ROOT)), p.read_text(encoding="utf-8")) for p in paths]


#: ``lifecycle[extra,...]`` or ``lifecycle-anything[...]``: a distribution named with extras.
_WITH_EXTRAS = re.compile(r"(?<![\w.])(lifecycle[A-Za-z0-9._-]*)\[([a-z{][a-z0-9_,{} -]*)\]")
#: ``pip install lifecycle`` with no extras (any quoting, any options before it).
_BARE = re.compile(r"pip install\s+(?:-\S+\s+)*['\"]?(lifecycle[A-Za-z0-9._-]*)(?![\w\[-])")


def test_the_distribution_is_not_the_taken_name() -> None:
    """``lifecycle`` on the index is an unrelated 2015 package."""
    assert floors.normalize(NAME) == "lifecycle-machines"


def test_every_hint_names_the_distribution_and_extras_that_exist() -> None:
    """Each ``pip install 'lifecycle...[x]'`` (error hints, README, docs, scripts) names this
    distribution and a declared extra; no bare ``pip install lifecycle`` remains."""
    wrong: list[str] = []
    for path, text in texts():
        for match in _WITH_EXTRAS.finditer(text):
            line = text.count("\n", 0, match.start()) + 1
            if floors.normalize(match[1]) != floors.normalize(NAME):
                wrong.append(f"{path}:{line}: {match[0]}")
            named = {e.strip() for e in match[2].split(",")} - {""}
            if not any("{" in e for e in named) and not named <= EXTRAS:
                wrong.append(f"{path}:{line}: unknown extra in {match[0]}")
        for match in _BARE.finditer(text):
            if floors.normalize(match[1]) != floors.normalize(NAME):
                wrong.append(f"{path}: {match[0]}")
    assert wrong == []


def test_the_hint_checks_find_the_old_name() -> None:
    """The two patterns above see the forms the old hints had."""
    assert _WITH_EXTRAS.search("pip install 'lifecycle[diagrams]'")
    assert _WITH_EXTRAS.search('f"pip install lifecycle[{extra}]"')
    assert _BARE.search("Outside this checkout: `pip install lifecycle` (core)")
    bare = _BARE.search(f"pip install {NAME}")
    assert bare is not None
    assert bare[1] == NAME
    assert not _WITH_EXTRAS.search('failure.lifecycle["emitter"]')


_METADATA_CALLS = {"version", "metadata", "distribution", "requires", "files"}


def test_every_metadata_look_up_uses_the_distribution_name() -> None:
    """``importlib.metadata.version("lifecycle")`` would read the unrelated package."""
    wrong: list[str] = []
    for path, text in texts():
        if not path.endswith(".py") or "metadata" not in text:
            continue
        for node in ast.walk(ast.parse(text)):
            if not (isinstance(node, ast.Call) and node.args):
                continue
            func = node.func
            called = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
            arg = node.args[0]
            if (
                called in _METADATA_CALLS
                and isinstance(arg, ast.Constant)
                and isinstance(arg.value, str)
                and arg.value.lower().startswith("lifecycle")
                and floors.normalize(arg.value) != floors.normalize(NAME)
            ):
                wrong.append(f"{path}:{node.lineno}: {called}({arg.value!r})")
    assert wrong == []


# -- the licence and the metadata ----------------------------------------------------------------


def test_the_licence_text_ships_in_the_current_metadata_form() -> None:
    text = (ROOT / "LICENSE").read_text(encoding="utf-8")
    assert "Apache License" in text.splitlines()[1]
    assert "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text
    assert PROJECT["license"] == "Apache-2.0"  # an SPDX expression, not a table
    assert PROJECT["license-files"] == ["LICENSE"]
    # PEP 639: a licence expression replaces the License :: classifiers.
    assert not [c for c in PROJECT["classifiers"] if c.startswith("License ::")]
    hatchling = floors.parse(PYPROJECT["build-system"]["requires"][0])
    assert hatchling.name == "hatchling"
    assert tuple(int(p) for p in (hatchling.floor or "0").split(".")) >= (1, 27)


def test_the_metadata_has_authors_urls_and_a_changelog() -> None:
    assert PROJECT["authors"]
    assert all(u.startswith("https://") for u in PROJECT["urls"].values())
    changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
    assert changelog.startswith("# Changelog")
    assert "## [Unreleased]" in changelog
    kinds = set(re.findall(r"^### (.+)$", changelog, re.M))
    assert kinds, "no change kinds"
    assert kinds <= {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}
    for heading in re.findall(r"^## (.+)$", changelog, re.M):
        assert heading == "[Unreleased]" or re.fullmatch(
            r"\[\d+\.\d+\.\d+\] - \d{4}-\d{2}-\d{2}", heading
        ), heading


def test_one_list_of_supported_pythons() -> None:
    """The Makefile's SUPPORTED_PYTHONS (what CI runs), the classifiers (what the index says),
    requires-python and the type checker's and linter's target are one list."""
    make = (ROOT / "Makefile").read_text(encoding="utf-8")
    listed = re.search(r"^SUPPORTED_PYTHONS := (.+)$", make, re.M)
    assert listed is not None
    pythons = listed[1].split()
    prefix = "Programming Language :: Python :: 3."
    declared = [
        c.removeprefix("Programming Language :: Python :: ")
        for c in PROJECT["classifiers"]
        if c.startswith(prefix) and c[len(prefix) :].isdigit()
    ]
    assert declared == pythons
    assert PROJECT["requires-python"] == f">={pythons[0]}"
    assert PYPROJECT["tool"]["mypy"]["python_version"] == pythons[0]
    assert PYPROJECT["tool"]["ruff"]["target-version"] == "py" + pythons[0].replace(".", "")


# -- floors ---------------------------------------------------------------------------------------


def test_every_direct_dependency_has_a_floor_ci_installs() -> None:
    """The constraints ``make floors`` installs name each dependency of the core and of every
    extra (and nothing else), at the bound pyproject declares."""
    found = floors.floors(PYPROJECT)
    declared = list(PROJECT["dependencies"]) + [
        r for extra in PROJECT["optional-dependencies"].values() for r in extra
    ]
    expected = {}
    for text in declared:
        oracle = Oracle(text)
        if floors.normalize(oracle.name) == floors.normalize(NAME):
            continue
        (bound,) = [s.version for s in oracle.specifier if s.operator == ">="]
        expected[floors.normalize(oracle.name)] = bound
    assert found == expected
    assert {"attrs", "cattrs", "structlog", "pyyaml", "orjson", "modal", "boto3"} <= set(found)
    assert {"kubernetes", "psycopg", "psycopg-pool", "transitions", "graphviz"} <= set(found)
    assert "hypothesis" in found


def test_the_development_group_repeats_no_floor_differently() -> None:
    """A dependency the dev group names again carries the same floor there (else ``make test``
    and the floors run would test two different promises)."""
    found = floors.floors(PYPROJECT)
    for text in PYPROJECT["dependency-groups"]["dev"]:
        requirement = floors.parse(text)
        name = floors.normalize(requirement.name)
        if name in found:
            assert floors.same_version(requirement.floor or "", found[name]), text


def test_a_dependency_without_a_floor_or_with_two_is_refused() -> None:
    def project(*deps: str, **extras: list[str]) -> dict[str, object]:
        return {
            "project": {"name": "x", "dependencies": list(deps), "optional-dependencies": extras}
        }

    with pytest.raises(floors.FloorError, match="declares no floor"):
        floors.floors(project("attrs"))
    with pytest.raises(floors.FloorError, match="declares no floor"):
        floors.floors(project("attrs<26"))
    with pytest.raises(floors.FloorError, match="two floors"):
        floors.floors(project("attrs>=25.4", extra=["attrs>=23.2"]))
    with pytest.raises(floors.FloorError, match="direct reference"):
        floors.floors(project("attrs @ https://example.invalid/attrs.whl"))
    assert floors.floors(project("Py_YAML>=6", all=["X[a,b]"])) == {"py-yaml": "6"}


_names = st.from_regex(r"[A-Za-z][A-Za-z0-9]{0,6}([-_.][A-Za-z0-9]{1,4}){0,2}", fullmatch=True)
_versions = st.lists(st.integers(0, 40), min_size=1, max_size=4).map(
    lambda parts: ".".join(map(str, parts))
)
_spaces = st.sampled_from(["", " ", "  "])


@given(
    name=_names,
    extras=st.lists(st.from_regex(r"[a-z][a-z0-9]{0,5}", fullmatch=True), max_size=3),
    floor=_versions,
    upper=st.none() | _versions,
    marker=st.sampled_from(["", "; python_version < '3.13'", ";extra == 'x'"]),
    gap=_spaces,
)
def test_the_parser_agrees_with_packaging(
    name: str, extras: list[str], floor: str, upper: str | None, marker: str, gap: str
) -> None:
    """Whatever the spelling, the parser reads the name, extras and ``>=`` bound that
    ``packaging`` (pip's own parser) reads."""
    specs = [f">={gap}{floor}"] + ([f"<{upper}"] if upper else [])
    text = f"{name}{gap}" + (f"[{','.join(extras)}]" if extras else "") + gap + ",".join(specs)
    text += marker
    ours, oracle = floors.parse(text), Oracle(text)
    assert floors.normalize(ours.name) == floors.normalize(oracle.name)
    assert set(ours.extras) == oracle.extras
    assert ours.floor == floor
    assert bool(ours.marker) == (oracle.marker is not None)


def test_installed_versions_are_checked_against_the_floors() -> None:
    assert floors.same_version("23.2", "23.2.0")
    assert floors.same_version("36.0.0", "36")
    assert not floors.same_version("25.4.0", "25.3")
    assert floors.mismatches({"attrs": "25.4"}, {"attrs": "26.1.0"}) == [
        "attrs: 26.1.0 installed, floor 25.4"
    ]
    assert floors.mismatches({"attrs": "25.4"}, {"attrs": None}) == [
        "attrs: not installed (floor 25.4)"
    ]
    assert floors.mismatches({"attrs": "25.4"}, {"attrs": "25.4.0"}) == []


# -- what the sdist and the wheel hold -------------------------------------------------------------

SDIST = PYPROJECT["tool"]["hatch"]["build"]["targets"]["sdist"]


@pytest.mark.parametrize("suffix", ["", "-wal", "-shm", "-journal", SUFFIX])
@pytest.mark.parametrize("folder", ["", "examples/", "tests/stores/", "src/lifecycle/"])
def test_what_a_local_run_leaves_is_kept_out(folder: str, suffix: str) -> None:
    """A SQLite database, its side files and the history tag file (``<db>.lifecycle-history``),
    wherever a quick-start or a test leaves them: outside the sdist's selection and ignored by
    git (so neither ``git add`` nor the build's VCS view picks them up)."""
    path = f"{folder}controller.db{suffix}"
    assert any(dist_contents.matches(path, p) for p in SDIST["exclude"]), path
    ignored = subprocess.run(["git", "check-ignore", "-q", path], cwd=ROOT, check=False)
    if ignored.returncode == 128:
        pytest.skip("not a git checkout (an unpacked sdist)")
    assert ignored.returncode == 0, f"{path} is not in .gitignore"


def test_the_file_lists_report_a_stray_and_a_missing_file() -> None:
    tracked = ["src/lifecycle/__init__.py", "src/lifecycle/py.typed", "LICENSE", "tests/t.py"]
    include, exclude = SDIST["include"], SDIST["exclude"]
    expected = dist_contents.expected_sdist(tracked, include, exclude, "p-1")
    assert expected == {
        "p-1/PKG-INFO",
        "p-1/LICENSE",
        "p-1/src/lifecycle/__init__.py",
        "p-1/src/lifecycle/py.typed",
        "p-1/tests/t.py",
    }
    built = (expected - {"p-1/LICENSE"}) | {"p-1/controller.db.lifecycle-history"}
    assert dist_contents.differences("sdist", built, expected) == [
        "sdist: unexpected p-1/controller.db.lifecycle-history",
        "sdist: missing p-1/LICENSE",
    ]
    wheel = dist_contents.expected_wheel(
        tracked, ["src/lifecycle"], exclude, "p-1.dist-info", ["LICENSE"]
    )
    assert "lifecycle/py.typed" in wheel
    assert "p-1.dist-info/licenses/LICENSE" in wheel
    assert not any(n.startswith("tests/") for n in wheel)


def test_the_patterns_read_only_what_they_understand() -> None:
    assert dist_contents.matches("src/lifecycle/x.py", "/src/lifecycle")
    assert not dist_contents.matches("src/lifecycle_extra/x.py", "/src/lifecycle")
    assert dist_contents.matches("a/__pycache__/x.pyc", "__pycache__")
    assert not dist_contents.matches("benchmarks/output.py", "/benchmarks/out")
    for pattern in ("**/x", "!keep", "docs/out"):
        with pytest.raises(dist_contents.PatternError):
            dist_contents.matches("docs/out", pattern)
