"""The README's newcomer path, command by command, on a fresh clone of this checkout.

Every ``sh`` block of the README runs, in the README's order, in one bash shell (so an
activated virtualenv carries over), inside a fresh ``git clone`` of HEAD. A block that includes
an example file (``<!-- example: PATH -->`` above it) runs that file. The run fails on the first
non-zero exit, and before anything runs when a Markdown link in the README or under ``docs/``
points outside the repository or at a file that does not exist, or when any tracked file
names material outside the repository.

    python3 scripts/newcomer.py [--skip-make-test]

``--skip-make-test`` leaves out ``make test`` (CI runs it on its own fresh clone just before).
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_BLOCK = re.compile(r"(?:<!-- example: (?P<path>\S+) -->\n)?```sh\n(?P<body>.*?)```", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Names of material that lives beside the repository, never in it.
_OUTSIDE = re.compile(r"\.\./shared|shared/domain|/work/")


def readme_script(readme: str, skip_make_test: bool) -> str:
    """The README's ``sh`` blocks as one bash script, in order."""
    lines = ["set -euo pipefail"]
    for block in _BLOCK.finditer(readme):
        if block["path"]:
            lines.append(f"echo '+ bash {block['path']}' >&2")
            lines.append(f"bash {block['path']}")
            continue
        for line in block["body"].splitlines():
            command = line.split("  #", 1)[0].strip()
            if not command or command.startswith("#"):
                continue
            if skip_make_test and command == "make test":
                lines.append("echo '+ make test (skipped: CI runs it on its own clone)' >&2")
                continue
            lines.append(f"echo {_quote('+ ' + command)} >&2")
            lines.append(command)
    return "\n".join(lines) + "\n"


def _quote(text: str) -> str:
    return "'" + text.replace("'", "'\\''") + "'"


def outside_references(root: Path) -> list[str]:
    """Links that leave the repository or lead nowhere, and names of outside material."""
    problems: list[str] = []
    tracked = subprocess.run(
        ["git", "ls-files"], cwd=root, capture_output=True, text=True, check=True
    ).stdout.split()
    for name in tracked:
        path = root / name
        if name.startswith("scripts/newcomer") or path.suffix in {".png", ".db"}:
            continue
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, FileNotFoundError):
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if _OUTSIDE.search(line):
                problems.append(f"{name}:{n}: names material outside the repository")
        if path.suffix != ".md":
            continue
        for target in _LINK.findall(text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue  # a URL or an anchor
            resolved = (path.parent / target.split("#", 1)[0]).resolve()
            if not resolved.is_relative_to(root):
                problems.append(f"{name}: link {target} leaves the repository")
            elif not resolved.exists():
                problems.append(f"{name}: link {target} leads nowhere")
    return problems


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--skip-make-test", action="store_true")
    args = parser.parse_args(argv)
    problems = outside_references(ROOT)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="newcomer-") as tmp:
        clone = Path(tmp) / "lifecycle"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        script = readme_script((clone / "README.md").read_text(), args.skip_make_test)
        (Path(tmp) / "newcomer.sh").write_text(script)
        done = subprocess.run(["bash", str(Path(tmp) / "newcomer.sh")], cwd=clone)
        if done.returncode:
            print(f"newcomer path failed (exit {done.returncode})", file=sys.stderr)
            return 1
    print("newcomer path: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
