"""The README's newcomer path, command by command, on a fresh clone of this checkout.

Every ``sh`` block of the README runs, in the README's order, in one bash shell (so an
activated virtualenv carries over), inside a fresh ``git clone`` of HEAD. A block that includes
an example file (``<!-- example: PATH -->`` above it) runs that file. The run fails on the first
non-zero exit, or when a command does not print what the README says it prints: a ```text
block right after a ``<!-- output: exit N -->`` comment is the output of the last command of
the ``sh`` block before it (which must exit N): each of its lines must match a line of the
command's standard output, in order (``...`` stands for any text). The run also fails
before anything runs when a Markdown link in the README or under ``docs/``
points outside the repository or at a file that does not exist, or when any tracked file
names material outside the repository.

    python3 scripts/newcomer.py [--skip-make-test]
    python3 scripts/newcomer.py --match EXPECTED OUTPUT   (one declared output, checked)

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
#: A declared output: the exit code and the lines of the ```text block after the comment.
_OUTPUT = re.compile(r"<!-- output: exit (?P<code>\d+) -->\n```text\n(?P<body>.*?)```", re.S)
_LINK = re.compile(r"\]\(([^)\s]+)\)")
#: Names of material that lives beside the repository, never in it.
_OUTSIDE = re.compile(r"\.\./shared|shared/domain|/work/")


def declared_outputs(readme: str) -> dict[int, tuple[int, str]]:
    """Each declared output, keyed by the offset of the ``sh`` block it follows: (the exit
    code, the expected text)."""
    blocks = [b.end() for b in _BLOCK.finditer(readme)]
    found: dict[int, tuple[int, str]] = {}
    for output in _OUTPUT.finditer(readme):
        before = [end for end in blocks if end <= output.start()]
        if not before:
            raise ValueError("a declared output before any sh block")
        found[before[-1]] = (int(output["code"]), output["body"])
    return found


def readme_script(readme: str, skip_make_test: bool, expected_dir: Path | None = None) -> str:
    """The README's ``sh`` blocks as one bash script, in order; with ``expected_dir``, each
    declared output is written there and checked after its command."""
    lines = ["set -euo pipefail"]
    outputs = declared_outputs(readme)
    for block in _BLOCK.finditer(readme):
        if block["path"]:
            lines.append(f"echo '+ bash {block['path']}' >&2")
            lines.append(f"bash {block['path']}")
            continue
        commands = [
            line.split("  #", 1)[0].strip()
            for line in block["body"].splitlines()
            if line.split("  #", 1)[0].strip() and not line.strip().startswith("#")
        ]
        declared = outputs.get(block.end())
        for n, command in enumerate(commands):
            if skip_make_test and command == "make test":
                lines.append("echo '+ make test (skipped: CI runs it on its own clone)' >&2")
                continue
            lines.append(f"echo {_quote('+ ' + command)} >&2")
            if declared is None or n != len(commands) - 1 or expected_dir is None:
                lines.append(command)
                continue
            code, text = declared
            expected = expected_dir / f"expected-{len(lines)}.txt"
            expected.write_text(text, encoding="utf-8")
            got = expected_dir / f"output-{len(lines)}.txt"
            lines.append(f"set +e; {{ {command}\n}} > {_quote(str(got))}; code=$?; set -e")
            lines.append(
                f'[ "$code" = {code} ] || {{ echo "exit $code, the README says {code}" >&2; '
                "exit 1; }"
            )
            lines.append(
                f"python3 {_quote(str(ROOT / 'scripts' / 'newcomer.py'))} --match "
                f"{_quote(str(expected))} {_quote(str(got))}"
            )
    return "\n".join(lines) + "\n"


def mismatch(expected: str, output: str) -> str | None:
    """Why ``output`` does not show ``expected`` (``None``: it does). Each expected line
    (``...`` standing for any text) must match a whole output line, in order."""
    lines = output.splitlines()
    at = 0
    for want in expected.splitlines():
        if not want.strip():
            continue
        pattern = re.compile(".*?".join(re.escape(part) for part in want.strip().split("...")))
        while at < len(lines) and not pattern.fullmatch(lines[at].strip()):
            at += 1
        if at == len(lines):
            return f"the README says it prints {want!r}; it did not (in this order)"
        at += 1
    return None


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
    parser.add_argument(
        "--skip-make-test", action="store_true", help="leave out make test (CI runs it apart)"
    )
    parser.add_argument(
        "--match",
        nargs=2,
        metavar=("EXPECTED", "OUTPUT"),
        help="check one declared output against what the command printed, and exit",
    )
    args = parser.parse_args(argv)
    if args.match:
        expected, output = (Path(p).read_text(encoding="utf-8") for p in args.match)
        problem = mismatch(expected, output)
        if problem is not None:
            print(problem, file=sys.stderr)
            return 1
        return 0
    problems = outside_references(ROOT)
    if problems:
        print("\n".join(problems), file=sys.stderr)
        return 1
    with tempfile.TemporaryDirectory(prefix="newcomer-") as tmp:
        clone = Path(tmp) / "lifecycle"
        subprocess.run(["git", "clone", "--quiet", str(ROOT), str(clone)], check=True)
        readme = (clone / "README.md").read_text()
        script = readme_script(readme, args.skip_make_test, Path(tmp))
        (Path(tmp) / "newcomer.sh").write_text(script)
        done = subprocess.run(["bash", str(Path(tmp) / "newcomer.sh")], cwd=clone)
        if done.returncode:
            print(f"newcomer path failed (exit {done.returncode})", file=sys.stderr)
            return 1
    print("newcomer path: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
