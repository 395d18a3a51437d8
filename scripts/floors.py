"""The lowest declared version of every direct dependency, as a pip constraints file.

Reads ``pyproject.toml`` (core ``dependencies`` and every ``optional-dependencies`` extra; the
project's own name, as in ``all = ["lifecycle-machines[...]"]``, is skipped) and prints one
``name==floor`` line a dependency, the floor being its ``>=`` bound. A dependency declared
without a ``>=`` bound, or with two different floors in two places, is an error: CI could not
test the floor it does not know.

    python3 scripts/floors.py [PYPROJECT] > floors.txt
    python scripts/floors.py --verify floors.txt   # in the floor environment: installed == floor

``scripts/floors.sh`` installs the wheel under these constraints (``make floors``).
"""

from __future__ import annotations

import re
import sys
import tomllib
from collections.abc import Iterable
from pathlib import Path

__all__ = [
    "FloorError",
    "Requirement",
    "constraints",
    "floors",
    "mismatches",
    "normalize",
    "parse",
    "same_version",
]

_NAME = r"[A-Za-z0-9](?:[A-Za-z0-9._-]*[A-Za-z0-9])?"
_REQUIREMENT = re.compile(
    rf"^\s*(?P<name>{_NAME})\s*(?:\[(?P<extras>[^\]]*)\])?\s*(?P<specs>[^;]*?)\s*(?:;(?P<marker>.*))?$"
)
_SPEC = re.compile(r"^\s*(?P<op>~=|==|!=|<=|>=|<|>|===)\s*(?P<version>[A-Za-z0-9.*+!_-]+)\s*$")


class FloorError(ValueError):
    """A dependency whose floor cannot be read from its requirement string."""


class Requirement:
    """One requirement string, as much of PEP 508 as a floor needs: name, extras, specifiers."""

    __slots__ = ("extras", "marker", "name", "specifiers")

    def __init__(
        self,
        name: str,
        extras: tuple[str, ...],
        specifiers: tuple[tuple[str, str], ...],
        marker: str,
    ) -> None:
        self.name = name
        self.extras = extras
        self.specifiers = specifiers
        self.marker = marker

    @property
    def floor(self) -> str | None:
        """The ``>=`` bound (or the ``~=`` / ``==`` one, which is a floor too), if any."""
        for op, version in self.specifiers:
            if op in {">=", "~=", "==", "==="} and "*" not in version:
                return version
        return None


def normalize(name: str) -> str:
    """PEP 503's normal form: case and runs of ``-``, ``_``, ``.`` do not matter."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse(text: str) -> Requirement:
    """Parse one requirement string; :class:`FloorError` when it is not one."""
    if "@" in text.split(";", 1)[0]:
        raise FloorError(f"{text!r}: a direct reference (name @ url) has no version floor")
    match = _REQUIREMENT.match(text)
    if match is None:
        raise FloorError(f"{text!r} is not a requirement string")
    extras = tuple(e.strip() for e in (match["extras"] or "").split(",") if e.strip())
    specs: list[tuple[str, str]] = []
    raw = match["specs"].strip().removeprefix("(").removesuffix(")")
    for part in filter(None, (p.strip() for p in raw.split(","))):
        spec = _SPEC.match(part)
        if spec is None:
            raise FloorError(f"{text!r}: cannot read the version specifier {part!r}")
        specs.append((spec["op"], spec["version"]))
    return Requirement(match["name"], extras, tuple(specs), (match["marker"] or "").strip())


def floors(pyproject: dict[str, object]) -> dict[str, str]:
    """Each direct dependency's normalized name -> its floor, from a parsed pyproject."""
    project = pyproject.get("project")
    if not isinstance(project, dict):
        raise FloorError("pyproject.toml has no [project] table")
    own = normalize(str(project.get("name", "")))
    declared: list[str] = list(project.get("dependencies", []))
    for extra in dict(project.get("optional-dependencies", {})).values():
        declared.extend(extra)
    found: dict[str, str] = {}
    for text in declared:
        requirement = parse(text)
        name = normalize(requirement.name)
        if name == own:
            continue  # `all = ["<this project>[...]"]` names extras, not a dependency
        floor = requirement.floor
        if floor is None:
            raise FloorError(f"{text!r} declares no floor (>=): CI cannot test its lowest version")
        if found.get(name, floor) != floor:
            raise FloorError(f"{name} has two floors: {found[name]} and {floor}")
        found[name] = floor
    return found


def constraints(found: dict[str, str]) -> Iterable[str]:
    """The constraints file's lines, sorted by name."""
    return (f"{name}=={floor}" for name, floor in sorted(found.items()))


def same_version(a: str, b: str) -> bool:
    """``23.2`` and ``23.2.0`` are one release; anything not plain numbers compares as text."""

    def release(v: str) -> tuple[int, ...] | str:
        parts = v.split(".")
        if not all(part.isdigit() for part in parts):
            return v
        numbers = [int(part) for part in parts]
        while len(numbers) > 1 and numbers[-1] == 0:
            numbers.pop()
        return tuple(numbers)

    return release(a) == release(b)


def mismatches(wanted: dict[str, str], installed: dict[str, str | None]) -> list[str]:
    """Each floor the environment does not hold, as one line."""
    problems = []
    for name, floor in sorted(wanted.items()):
        have = installed.get(name)
        if have is None:
            problems.append(f"{name}: not installed (floor {floor})")
        elif not same_version(have, floor):
            problems.append(f"{name}: {have} installed, floor {floor}")
    return problems


def _verify(path: Path) -> int:
    import importlib.metadata

    wanted = dict(line.split("==", 1) for line in path.read_text().split() if "==" in line)
    installed: dict[str, str | None] = {}
    for name in wanted:
        try:
            installed[name] = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            installed[name] = None
    problems = mismatches(wanted, installed)
    print(
        "\n".join(problems) or f"floors: all {len(wanted)} installed at their floor",
        file=sys.stderr,
    )
    return 1 if problems else 0


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[1] == "--verify":
        return _verify(Path(argv[2]))
    path = (
        Path(argv[1])
        if len(argv) > 1
        else Path(__file__).resolve().parent.parent / "pyproject.toml"
    )
    try:
        lines = list(constraints(floors(tomllib.loads(path.read_text(encoding="utf-8")))))
    except FloorError as e:
        print(f"floors: {e}", file=sys.stderr)
        return 1
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
