"""Hold a built wheel and sdist to the file lists the repository declares.

The sdist must hold exactly the tracked files that ``[tool.hatch.build.targets.sdist]``
includes and does not exclude (plus ``PKG-INFO``); the wheel exactly the tracked files of the
package (plus its ``.dist-info``, with the licence under ``licenses/``). A file a local run
left behind (``controller.db.lifecycle-history``), a build by-product or a missing LICENSE is
reported by name.

    python3 scripts/dist_contents.py WHEEL SDIST   # from the repository root (a git checkout)

``scripts/wheel_check.sh`` runs it on what it built.
"""

from __future__ import annotations

import fnmatch
import subprocess
import sys
import tarfile
import tomllib
import zipfile
from collections.abc import Iterable, Sequence
from pathlib import Path, PurePosixPath

__all__ = [
    "PatternError",
    "differences",
    "expected_sdist",
    "expected_wheel",
    "matches",
    "sdist_names",
    "wheel_names",
]

ROOT = Path(__file__).resolve().parent.parent
#: Files hatchling writes into every wheel's ``.dist-info`` beside the licences.
WHEEL_METADATA = ("METADATA", "WHEEL", "RECORD", "entry_points.txt")
#: Members each artefact must hold whatever the lists say (``{stem}`` is ``name-version``).
REQUIRED = {
    "sdist": ("{stem}/LICENSE", "{stem}/pyproject.toml", "{stem}/src/lifecycle/py.typed"),
    "wheel": ("{stem}.dist-info/licenses/LICENSE", "lifecycle/py.typed"),
}


class PatternError(ValueError):
    """An include/exclude pattern of a form this check does not read (it would drift)."""


def matches(path: str, pattern: str) -> bool:
    """Whether ``path`` (relative, ``/``-separated) falls under one hatch build pattern.

    Two forms, the ones ``pyproject.toml`` uses: ``/a/b`` is anchored at the root and takes
    that file or everything under that folder; a pattern without ``/`` (``*.db``,
    ``__pycache__``) takes any path one of whose parts it matches.
    """
    if pattern.startswith("!") or "**" in pattern:
        raise PatternError(f"pattern {pattern!r}: negation and ** are not read here")
    if pattern.startswith("/"):
        anchored = pattern.strip("/")
        return path == anchored or path.startswith(anchored + "/")
    if "/" in pattern.rstrip("/"):
        raise PatternError(f"pattern {pattern!r}: a pattern with a folder must start with /")
    return any(fnmatch.fnmatchcase(part, pattern.rstrip("/")) for part in path.split("/"))


def _selected(path: str, include: Sequence[str], exclude: Sequence[str]) -> bool:
    return any(matches(path, p) for p in include) and not any(matches(path, p) for p in exclude)


def expected_sdist(
    tracked: Iterable[str], include: Sequence[str], exclude: Sequence[str], prefix: str
) -> set[str]:
    """The sdist's members: the selected tracked files and PKG-INFO, under ``prefix/``."""
    chosen = {p for p in tracked if _selected(p, include, exclude)}
    return {f"{prefix}/{p}" for p in chosen | {"PKG-INFO"}}


def expected_wheel(
    tracked: Iterable[str],
    packages: Sequence[str],
    exclude: Sequence[str],
    dist_info: str,
    licenses: Sequence[str],
) -> set[str]:
    """The wheel's members: each package's tracked files at their import path, and the
    ``.dist-info`` (metadata files and each licence file under ``licenses/``)."""
    names: set[str] = set()
    for package in packages:
        base = PurePosixPath(package)
        for path in tracked:
            if PurePosixPath(path).is_relative_to(base) and not any(
                matches(path, p) for p in exclude
            ):
                names.add(str(base.name / PurePosixPath(path).relative_to(base)))
    names |= {f"{dist_info}/{n}" for n in WHEEL_METADATA}
    names |= {f"{dist_info}/licenses/{n}" for n in licenses}
    return names


def differences(kind: str, built: set[str], expected: set[str]) -> list[str]:
    """One line for each member that should not be there, and each that is missing."""
    return [f"{kind}: unexpected {n}" for n in sorted(built - expected)] + [
        f"{kind}: missing {n}" for n in sorted(expected - built)
    ]


def wheel_names(wheel: Path) -> set[str]:
    with zipfile.ZipFile(wheel) as z:
        return {n for n in z.namelist() if not n.endswith("/")}


def sdist_names(sdist: Path) -> set[str]:
    with tarfile.open(sdist) as t:
        return {m.name for m in t.getmembers() if not m.isdir()}


def _tracked(root: Path) -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "-z"], cwd=root, capture_output=True, check=True
    ).stdout.decode()
    return [p for p in out.split("\0") if p and (root / p).is_file()]


def check(wheel: Path, sdist: Path, root: Path = ROOT) -> list[str]:
    """Every difference between the built files and the declared lists (empty: all good)."""
    pyproject = tomllib.loads((root / "pyproject.toml").read_text(encoding="utf-8"))
    project = pyproject["project"]
    targets = pyproject["tool"]["hatch"]["build"]["targets"]
    stem = f"{project['name'].replace('-', '_')}-{_version(wheel)}"
    licenses = list(project.get("license-files", []))
    tracked = _tracked(root)
    problems = [f"LICENSE file {n} is not tracked" for n in licenses if n not in tracked]
    sdist_cfg = targets["sdist"]
    problems += differences(
        "sdist",
        sdist_names(sdist),
        expected_sdist(tracked, sdist_cfg["include"], sdist_cfg.get("exclude", []), stem),
    )
    problems += differences(
        "wheel",
        wheel_names(wheel),
        expected_wheel(
            tracked,
            targets["wheel"]["packages"],
            sdist_cfg.get("exclude", []),
            f"{stem}.dist-info",
            [Path(n).name for n in licenses],
        ),
    )
    built = {"sdist": sdist_names(sdist), "wheel": wheel_names(wheel)}
    for kind, names in REQUIRED.items():
        problems += [
            f"{kind}: lacks {n}"
            for n in (m.format(stem=stem) for m in names)
            if n not in built[kind]
        ]
    return problems


def _version(wheel: Path) -> str:
    return wheel.name.split("-")[1]


def main(argv: list[str]) -> int:
    if len(argv) != 3:
        print(__doc__, file=sys.stderr)
        return 2
    problems = check(Path(argv[1]), Path(argv[2]))
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    print(f"dist contents: ok ({Path(argv[1]).name}, {Path(argv[2]).name})")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
