"""Every dependency version the README and the top-level docs state is one ``pyproject.toml``
declares (issue 35, point 6): ``modal>=1.4.3`` stayed in the README after the floor moved to
1.5.0. A statement is a requirement written out (``name>=1.2``, ``name<37``,
``name[extra]>=3.2.4``); each of its clauses must be a clause that ``pyproject.toml`` declares
for that distribution (dependencies, extras or dependency groups), so a floor changed in one
place fails here until the prose follows it.
"""

from __future__ import annotations

import re
import tomllib
from collections.abc import Iterator
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

ROOT = Path(__file__).resolve().parents[1]
#: Where versions are stated for a reader: the README and the pages beside it in docs/ (the
#: ADRs record what was decided then, and the CHANGELOG what changed when: both historical).
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]

#: ``name``, optional ``[extras]``, then one or more comparison clauses.
_VERSION_TEXT = r"[0-9](?:[0-9A-Za-z*+!-]|\.(?=[0-9A-Za-z*]))*"  # a sentence's full stop is not
_OPERATOR = r"(?:===|==|!=|~=|>=|<=|<|>)"
_STATED = re.compile(
    r"(?<![\w.-])(?P<name>[A-Za-z][A-Za-z0-9._-]*)(?:\[[^\]\s]*\])?"
    rf"(?P<spec>(?:\s*,?\s*{_OPERATOR}\s*{_VERSION_TEXT})+)"
)
_CLAUSE = re.compile(rf"({_OPERATOR})\s*({_VERSION_TEXT})")


def declared(pyproject: dict[str, object]) -> dict[str, set[str]]:
    """Each distribution ``pyproject.toml`` names -> every clause declared for it."""
    project = pyproject["project"]
    assert isinstance(project, dict)
    strings: list[str] = list(project.get("dependencies", []))
    for group in project.get("optional-dependencies", {}).values():
        strings += group
    for group in pyproject.get("dependency-groups", {}).values():  # type: ignore[attr-defined]
        strings += [s for s in group if isinstance(s, str)]
    found: dict[str, set[str]] = {}
    for text in strings:
        req = Requirement(text)
        clauses = found.setdefault(canonicalize_name(req.name), set())
        clauses.update(f"{s.operator}{s.version}" for s in req.specifier)
    return found


def stated(text: str) -> Iterator[tuple[str, list[str], str]]:
    """Each requirement written out in ``text``: (name, its clauses, the text as written)."""
    for m in _STATED.finditer(text):
        clauses = [f"{op}{version}" for op, version in _CLAUSE.findall(m["spec"])]
        yield canonicalize_name(m["name"]), clauses, m.group().strip()


def mismatches(text: str, floors: dict[str, set[str]]) -> list[str]:
    """The statements in ``text`` about a declared distribution that ``floors`` does not
    declare, clause for clause."""
    return [
        f"{written!r}: pyproject.toml declares {sorted(floors[name])}"
        for name, clauses, written in stated(text)
        if name in floors and not set(clauses) <= floors[name]
    ]


def pyproject() -> dict[str, object]:
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))


def test_every_version_the_docs_state_is_declared() -> None:
    floors = declared(pyproject())
    found = {
        str(page.relative_to(ROOT)): mismatches(page.read_text(encoding="utf-8"), floors)
        for page in PAGES
    }
    assert {page: bad for page, bad in found.items() if bad} == {}


def test_the_modal_statement_is_the_declared_floor() -> None:
    """The README names the Modal floor its contract test records (the API of the lowest
    version allowed), as pyproject.toml declares it."""
    floors = declared(pyproject())
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    modal = [clauses for name, clauses, _ in stated(readme) if name == "modal"]
    assert modal, "the README names the Modal floor"
    assert all(set(c) <= floors["modal"] for c in modal)
    record = (ROOT / "tests" / "adapters" / "data" / "modal_floor_api.json").read_text()
    assert f'"version": "{min(floors["modal"]).removeprefix(">=")}"' in record


def test_the_checker_reads_extras_ranges_and_prose() -> None:
    floors = {"kubernetes": {">=36.0", "<37"}, "psycopg": {">=3.2.4"}, "modal": {">=1.5.0"}}
    text = (
        "install `kubernetes>=36.0,<37` and psycopg[binary]>=3.2.4; the fake follows "
        "`modal>=1.4.3`. Python 3.11 and python-statemachine 2.6 are no requirements."
    )
    assert [(n, c) for n, c, _ in stated(text)] == [
        ("kubernetes", [">=36.0", "<37"]),
        ("psycopg", [">=3.2.4"]),
        ("modal", [">=1.4.3"]),
    ]
    assert mismatches(text, floors) == ["'modal>=1.4.3': pyproject.toml declares ['>=1.5.0']"]


_VERSION = st.lists(st.integers(0, 40), min_size=1, max_size=3).map(
    lambda parts: ".".join(map(str, parts))
)


@given(
    declared_floor=_VERSION,
    written=_VERSION,
    op=st.sampled_from([">=", "<", "<=", "==", "~="]),
    before=st.sampled_from(["", "the fake follows ", "(", "`"]),
    after=st.sampled_from(["", ".", ")", "`", ", then"]),
)
def test_any_statement_not_declared_is_found(
    declared_floor: str, written: str, op: str, before: str, after: str
) -> None:
    """Whatever the version and the prose around it, a stated clause that pyproject.toml does
    not declare is reported, and one it declares is not."""
    floors = {"boto3": {f">={declared_floor}"}}
    text = f"{before}boto3{op}{written}{after}"
    assert [w for _, _, w in stated(text)] == [f"boto3{op}{written}"]
    assert bool(mismatches(text, floors)) == (f"{op}{written}" != f">={declared_floor}")
