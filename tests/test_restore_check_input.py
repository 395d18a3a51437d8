"""``lifecycle restore check`` reads untrusted files: each finding of the input review as a test,
the shipped examples, and a Hypothesis suite of hostile manifests and targets.

Every refusal is exit 2 with exactly one bounded line on stderr naming the file (and the field
path where there is one); nothing raises out of the check, whatever the files hold.
"""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml  # type: ignore[import-untyped]
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lifecycle.machines.restore._input import MAX_DEPTH, MAX_FILE_BYTES, MAX_MESSAGE
from lifecycle.machines.restore._offline import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "restore"
SOAK = os.environ.get("LIFECYCLE_SOAK") == "1"
MANIFEST: dict[str, Any] = yaml.safe_load((EXAMPLES / "manifest.yaml").read_text())
TARGET: dict[str, Any] = yaml.safe_load((EXAMPLES / "target.yaml").read_text())
#: The longest stderr line a refusal may print: the file name, then one bounded message.
MAX_ERR = MAX_MESSAGE + 200


def run(tmp: Path, manifest: str | bytes, target: str | bytes, *extra: str) -> tuple[int, str, str]:
    m, t = tmp / "manifest.yaml", tmp / "target.yaml"
    for path, body in ((m, manifest), (t, target)):
        path.write_bytes(body if isinstance(body, bytes) else body.encode("utf-8", "surrogatepass"))
    out, err = io.StringIO(), io.StringIO()
    code = main([str(m), str(t), *extra], out=out, err=err)
    return code, out.getvalue(), err.getvalue()


def dump(doc: Any) -> str:
    return json.dumps(doc)


def with_(doc: dict[str, Any], path: str, value: Any) -> dict[str, Any]:
    """``doc`` (deep-copied) with the value at dotted ``path`` replaced (or added)."""
    copy: dict[str, Any] = json.loads(json.dumps(doc))
    *parents, last = path.split(".")
    node: Any = copy
    for key in parents:
        node = node[int(key)] if isinstance(node, list) else node.setdefault(key, {})
    if isinstance(node, list):
        node[int(last)] = value
    else:
        node[last] = value
    return copy


def refused(tmp: Path, manifest: Any, target: Any, needle: str) -> str:
    """Assert exit 2, nothing on stdout, one line on stderr containing ``needle``."""
    m = manifest if isinstance(manifest, str | bytes) else dump(manifest)
    t = target if isinstance(target, str | bytes) else dump(target)
    code, out, err = run(tmp, m, t)
    assert (code, out) == (2, ""), err
    assert err.count("\n") == 1, err
    assert err.endswith("\n"), err
    assert len(err) <= MAX_ERR, len(err)
    assert needle in err, err
    return err


# -- the shipped examples --------------------------------------------------------------------
@pytest.mark.parametrize(
    ("target", "code", "first"),
    [
        ("target.yaml", 0, "verdict: compatible"),
        ("target-incompatible.yaml", 1, "verdict: incompatible code=VolumeIdentityMismatch"),
        ("target-unknown.yaml", 3, "verdict: unknown code=TargetFactsUnavailable"),
    ],
)
def test_the_shipped_examples(target: str, code: int, first: str) -> None:
    out, err = io.StringIO(), io.StringIO()
    argv = [str(EXAMPLES / "manifest.yaml"), str(EXAMPLES / target)]
    assert main(argv, out=out, err=err) == code
    assert err.getvalue() == ""
    assert out.getvalue().splitlines()[0] == first


def test_the_shipped_examples_through_the_installed_command() -> None:
    """As an operator runs it: a separate process, the real exit code, nothing on stderr."""
    cmd = [sys.executable, "-m", "lifecycle.cli", "restore", "check"]
    done = subprocess.run(
        [*cmd, str(EXAMPLES / "manifest.yaml"), str(EXAMPLES / "target-incompatible.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stderr) == (1, "")
    assert "gpu pairing: none" in done.stdout


@pytest.mark.parametrize(
    ("body", "needle"),
    [
        ("[" * 100_000 + "]" * 100_000, "nested deeper than"),
        (None, "anchors and aliases"),  # the alias bomb
    ],
)
def test_hostile_files_through_the_installed_command_exit_2_with_one_line(
    tmp_path: Path, body: str | None, needle: str
) -> None:
    """A separate process: no traceback, exit 2 (not 1, "incompatible"), one line."""
    manifest = tmp_path / "manifest.json"
    manifest.write_text(body if body is not None else BOMB + "host: {cpuArch: *g}\n")
    cmd = [sys.executable, "-m", "lifecycle.cli", "restore", "check"]
    done = subprocess.run(
        [*cmd, str(manifest), str(EXAMPLES / "target.yaml")],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert (done.returncode, done.stdout) == (2, "")
    assert done.stderr.count("\n") == 1
    assert len(done.stderr) <= MAX_ERR
    assert needle in done.stderr
    assert "Traceback" not in done.stderr


def test_help_documents_exit_codes_and_bounds() -> None:
    out = io.StringIO()
    with pytest.raises(SystemExit) as stop, _stdout(out):
        main(["--help"])
    assert stop.value.code == 0
    text = out.getvalue()
    assert "0 compatible, 1 incompatible, 3 unknown" in text
    assert "2 bad input" in text
    assert f"{MAX_FILE_BYTES} bytes" in text
    assert "anchors, aliases" in text


class _stdout:
    def __init__(self, stream: io.StringIO) -> None:
        self.stream = stream

    def __enter__(self) -> None:
        self.saved, sys.stdout = sys.stdout, self.stream

    def __exit__(self, *_: object) -> None:
        sys.stdout = self.saved


# -- bounds: nesting, aliases, size ------------------------------------------------------------
def test_a_20000_deep_yaml_mapping_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    deep = "{a: " * 20_000 + "1" + "}" * 20_000
    refused(tmp_path, deep, TARGET, f"nested deeper than {MAX_DEPTH} levels")


def test_a_100000_deep_json_list_is_refused_not_a_recursion_error(tmp_path: Path) -> None:
    deep = "[" * 100_000 + "]" * 100_000
    refused(tmp_path, MANIFEST, deep, f"nested deeper than {MAX_DEPTH} levels")


def test_a_document_just_within_the_depth_bound_is_read(tmp_path: Path) -> None:
    nested: Any = "x"
    for _ in range(MAX_DEPTH - 3):
        nested = {"n": nested}
    code, _, err = run(tmp_path, dump(with_(MANIFEST, "overlay", nested)), dump(TARGET))
    assert (code, err) == (0, "")


BOMB = 'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]\n' + "".join(
    f"{n}: &{n} [{', '.join([f'*{p}'] * 9)}]\n" for p, n in zip("abcdef", "bcdefg", strict=True)
)


def test_an_alias_bomb_gives_a_short_refusal_not_a_226_mb_message(tmp_path: Path) -> None:
    bomb = BOMB + "host: {cpuArch: *g}\n"
    assert len(bomb) < 400
    refused(tmp_path, bomb, TARGET, "anchors and aliases are not accepted")


def test_an_alias_bomb_in_the_targets_paths_is_refused(tmp_path: Path) -> None:
    bomb = BOMB + "paths: *g\n"
    refused(tmp_path, MANIFEST, bomb, "target.yaml: YAML at line 1, column 4: YAML anchors")


def test_a_single_harmless_alias_is_refused_too(tmp_path: Path) -> None:
    text = "cpuArch: &arch amd64\nkernelVersion: *arch\n"
    refused(tmp_path, MANIFEST, text, "anchors and aliases")


def test_merge_keys_and_duplicate_keys_are_refused(tmp_path: Path) -> None:
    refused(tmp_path, MANIFEST, "<<: {cpuArch: amd64}\n", "merge keys")
    refused(tmp_path, MANIFEST, "cpuArch: amd64\ncpuArch: arm64\n", "duplicate key 'cpuArch'")


def test_a_file_over_the_size_bound_is_refused_unread(tmp_path: Path) -> None:
    big = "# " + "x" * MAX_FILE_BYTES + "\n" + dump(TARGET)
    refused(tmp_path, MANIFEST, big, f"larger than {MAX_FILE_BYTES} bytes")


def test_an_unreadable_file_is_one_line(tmp_path: Path) -> None:
    out, err = io.StringIO(), io.StringIO()
    code = main([str(tmp_path / "nope.yaml"), str(tmp_path)], out=out, err=err)
    assert (code, out.getvalue()) == (2, "")
    assert err.getvalue().count("\n") == 1
    assert "nope.yaml: cannot read: No such file or directory" in err.getvalue()


def test_bytes_that_are_not_utf8_are_refused(tmp_path: Path) -> None:
    refused(tmp_path, b"host: {cpuArch: \xff}\n", TARGET, "manifest.yaml: not UTF-8")


# -- type confusion: one type per field, named by its path -----------------------------------------
@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        ("paths", "/models", "target.yaml: paths: expected a list, got '/models'"),
        ("cpuArch", 123, "target.yaml: cpuArch: expected a string, got 123"),
        ("gpus.0.uuid", 7, "target.yaml: gpus[0].uuid: expected a string, got 7"),
        ("memoryLimit", True, "target.yaml: memoryLimit: expected a quantity"),
        ("memoryLimit", "64 gigs", "target.yaml: memoryLimit:"),
        ("volumes.0", "/models", "target.yaml: volumes[0]: expected a mapping"),
        ("cpuarch", "amd64", "target.yaml: cpuarch: unknown field"),
    ],
)
def test_a_wrongly_typed_target_field_is_named(
    tmp_path: Path, path: str, value: Any, needle: str
) -> None:
    refused(tmp_path, MANIFEST, with_(TARGET, path, value), needle)


@pytest.mark.parametrize(
    ("path", "value", "needle"),
    [
        (
            "cudaRestore.sourceGpuUuids",
            "GPU-5d0c9a44",
            "cudaRestore.sourceGpuUuids: expected a list, got 'GPU-5d0c9a44'",
        ),
        ("cudaRestore.pids.0", "abc", "cudaRestore.pids[0]: expected an integer, got 'abc'"),
        ("cudaRestore.pids.0", True, "cudaRestore.pids[0]: expected an integer, got True"),
        ("host.cpuArch", 123, "host.cpuArch: expected a string, got 123"),
        ("compat.schemaVersion", True, "compat.schemaVersion: expected an integer, got True"),
        ("compat.schemaVersion", "1", "compat.schemaVersion: expected an integer, got '1'"),
        ("compat.schemaVersion", -1, "compat.schemaVersion: -1 is outside 0.."),
        ("compat.complete", "false", "compat.complete: expected a boolean (true or false)"),
        ("compat.facts", ["host.cpuArch"], "compat.facts: expected a mapping"),
        (
            "compat.facts.host.cpuArch",
            "maybe",
            "compat.facts['host.cpuArch']: expected 'recorded' or 'unavailable:<errclass>'",
        ),
        ("k8s.memoryLimit", [64], "k8s.memoryLimit: expected a quantity"),
        ("k8s.declaredVolumes.0.path", "", "k8s.declaredVolumes[0].path: must not be empty"),
        ("criuDump.extMnt", ["/models"], "criuDump.extMnt: expected a mapping"),
        ("cudaRestore.sourceGpus.0", "GPU-1", "cudaRestore.sourceGpus[0]: expected a mapping"),
        ("artifact.contentUID", None, "artifact.contentUID: required"),
    ],
)
def test_a_wrongly_typed_manifest_field_is_named(
    tmp_path: Path, path: str, value: Any, needle: str
) -> None:
    if path.startswith("compat.facts.host"):
        manifest = with_(MANIFEST, "compat.facts", {"host.cpuArch": value})
    else:
        manifest = with_(MANIFEST, path, value)
    refused(tmp_path, manifest, TARGET, f"manifest.yaml: {needle}")


def test_target_gpus_with_a_repeated_uuid_are_refused_not_a_traceback(tmp_path: Path) -> None:
    gpus = [dict(TARGET["gpus"][0]), dict(TARGET["gpus"][0])]
    refused(tmp_path, MANIFEST, with_(TARGET, "gpus", gpus), "gpus[1].uuid: repeats gpus[0].uuid")


def test_a_huge_integer_is_refused(tmp_path: Path) -> None:
    text = dump(MANIFEST).replace('"pids": [42]', '"pids": [' + "9" * 5000 + "]")
    refused(tmp_path, text, TARGET, "manifest.yaml:")


@pytest.mark.parametrize(
    ("escape", "shown"), [("\\0", "\\x00"), ("\\ud800", "\\ud800"), ("\\x1b", "\\x1b")]
)
def test_nul_control_characters_and_lone_surrogates_are_refused(
    tmp_path: Path, escape: str, shown: str
) -> None:
    text = f'cpuArch: "amd{escape}64"\n'
    err = refused(tmp_path, MANIFEST, text, "target.yaml: cpuArch: control character")
    assert shown in err
    err.encode("utf-8")  # printable on any terminal


def test_a_string_longer_than_the_bound_is_refused(tmp_path: Path) -> None:
    refused(tmp_path, MANIFEST, with_(TARGET, "kernelVersion", "6" * 5000), "longer than")


# -- a manifest that states nothing proves nothing ----------------------------------------------
def test_an_empty_manifest_is_refused_not_compatible(tmp_path: Path) -> None:
    refused(tmp_path, "{}\n", TARGET, "manifest.yaml: artifact: required")


def test_a_manifest_without_artifact_is_refused(tmp_path: Path) -> None:
    manifest = {k: v for k, v in MANIFEST.items() if k != "artifact"}
    refused(tmp_path, manifest, TARGET, "manifest.yaml: artifact: required")


def test_a_header_without_schema_version_is_refused(tmp_path: Path) -> None:
    manifest = with_(MANIFEST, "compat", {"complete": True})
    refused(tmp_path, manifest, TARGET, "compat.schemaVersion: required")


def test_a_manifest_without_its_dump_is_refused(tmp_path: Path) -> None:
    manifest = {k: v for k, v in MANIFEST.items() if k != "criuDump"}
    refused(tmp_path, manifest, TARGET, "manifest.yaml: criuDump: required")


def test_a_manifest_with_identity_but_no_facts_is_not_compatible(tmp_path: Path) -> None:
    """A legacy manifest with no externalized mounts and no CUDA facts: nothing was compared."""
    bare = {"checkpointId": "ckpt-1", "criuDump": {}}
    code, out, err = run(tmp_path, dump(bare), dump(TARGET))
    assert (code, err) == (3, "")
    assert out.startswith("verdict: unknown code=FactsIncomplete")
    v1 = {"artifact": MANIFEST["artifact"], "compat": {"schemaVersion": 1, "complete": True}}
    code, out, _ = run(tmp_path, dump({**v1, "criuDump": {}}), dump(TARGET))
    assert code == 3
    assert "host.cpuArch not recorded" in out


def test_a_newer_schema_is_read_no_further_than_its_header(tmp_path: Path) -> None:
    newer = {"compat": {"schemaVersion": 2, "complete": True}, "host": "a future shape"}
    code, out, _ = run(tmp_path, dump(newer), dump(TARGET))
    assert code == 3
    assert "ManifestSchemaUnsupported" in out.splitlines()[0]


# -- hostile input: Hypothesis --------------------------------------------------------------------
def _deep(depth: int) -> Any:
    value: Any = "x"
    for i in range(depth):
        value = [value] if i % 2 else {"k": value}
    return value


HOSTILE_SCALARS = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.integers(min_value=-(10**40), max_value=10**40),
    st.floats(allow_nan=True, allow_infinity=True),
    st.text(max_size=40),
    st.text(alphabet=st.sampled_from("\x00\x1b\n\t\ud800\udfff\u2028\ufeffa/-.:"), max_size=20),
    st.sampled_from(["", " ", "x" * 5000, "64Gi", "GPU-1", "/models", "NaN", "1e999", "-1"]),
)
HOSTILE = st.recursive(
    HOSTILE_SCALARS,
    lambda inner: st.one_of(
        st.lists(inner, max_size=4), st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=12,
) | st.integers(min_value=MAX_DEPTH - 2, max_value=MAX_DEPTH + 40).map(_deep)


def _paths(doc: Any, prefix: str = "") -> list[str]:
    """Every dotted path of ``doc``, containers included."""
    found = []
    items = doc.items() if isinstance(doc, dict) else enumerate(doc)
    for key, value in items:
        path = f"{prefix}{key}"
        found.append(path)
        if isinstance(value, dict | list) and value:
            found.extend(_paths(value, f"{path}."))
    return found


MANIFEST_PATHS = [*_paths(MANIFEST), "compat.facts.k8s", "extra", "host.extra"]
TARGET_PATHS = _paths(TARGET)


def _yaml_text(doc: Any) -> str:
    try:
        return str(yaml.safe_dump(doc, allow_unicode=False))
    except (yaml.YAMLError, RecursionError, UnicodeError):
        return json.dumps(doc)


RAW = st.one_of(
    st.binary(max_size=200),
    st.text(max_size=200),
    st.sampled_from(
        [
            BOMB,
            "[" * 5000,
            "{a: " * 3000,
            "!!python/object:os.system {}",
            "a: !!binary aGVsbG8=",
            "a: 2024-13-45",
            "--- 1\n--- 2\n",
            "? [a, b]\n: c\n",
            "a: !!set {x, y}",
            "\ufeff{}",
        ]
    ),
)


@st.composite
def hostile_pair(draw: st.DrawFn) -> tuple[str | bytes, str | bytes]:
    """A manifest and a target: each the valid example with hostile values at some paths,
    written as YAML or JSON, or raw hostile text."""
    out: list[str | bytes] = []
    for base, paths in ((MANIFEST, MANIFEST_PATHS), (TARGET, TARGET_PATHS)):
        if draw(st.integers(0, 9)) == 0:
            out.append(draw(RAW))
            continue
        doc = base
        for path in draw(st.lists(st.sampled_from(paths), max_size=3)):
            try:
                doc = with_(doc, path, draw(HOSTILE))
            except (KeyError, IndexError, ValueError, TypeError, AttributeError):
                continue  # a path that an earlier change removed
        out.append(_yaml_text(doc) if draw(st.booleans()) else json.dumps(doc))
    return out[0], out[1]


@settings(
    max_examples=2000 if SOAK else 150,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(pair=hostile_pair(), extra=st.sampled_from([(), ("--on-unknown", "warn"), ("--volumes",
       "presence")]))  # fmt: skip
def test_hostile_files_give_a_verdict_or_one_line_never_an_exception(
    tmp_path_factory: pytest.TempPathFactory, pair: tuple[str | bytes, str | bytes], extra: Any
) -> None:
    tmp = tmp_path_factory.mktemp("hostile")
    manifest, target = pair
    code, out, err = run(tmp, manifest, target, *extra)  # any exception fails the test
    assert code in (0, 1, 2, 3)
    if code == 2:
        assert out == ""
        assert err.count("\n") == 1
        assert err.endswith("\n")
        assert len(err) <= MAX_ERR
    else:
        assert err == ""
        assert out.startswith(("verdict: compatible", "verdict: incompatible", "verdict: unknown"))
        size = len(manifest) + len(target)
        assert len(out) <= 8_000 + 4 * size
    (out + err).encode("utf-8")  # no lone surrogate reaches a terminal
