"""The Modal fake cannot drift from the ``modal`` SDK: the installed one, and the lowest one
the package allows.

Every fake surface the adapter calls is compared with the real one by ``inspect.signature``
(each fake parameter exists in the SDK with the same kind and default; every required SDK
parameter exists in the fake), and every call the fake received while the adapter ran a full
scenario is bound against the SDK's real signature. The same checks run against
``data/modal_floor_api.json``, a record of the floor version's API (the ``modal>=X`` of
``pyproject.toml``, written by ``scripts/record_modal_floor.py``), so a call that only newer
releases accept fails here even when a newer SDK is installed.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import json
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lifecycle.adapters.modal import ModalAdapter, SandboxSpec, probe_plan
from lifecycle.testing.fakes import FakeModal, FakeProbe, FakeSandbox

from .conftest import pod, sandbox, ticking_clock, tracked

#: the fake's ``modal.exception``
exception = FakeModal.exception

modal = pytest.importorskip("modal")

_EMPTY = inspect.Parameter.empty
_VARIADIC = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)


def _real_static() -> dict[str, Any]:
    return {
        "App.lookup": modal.App.lookup.aio,
        "Image.from_registry": modal.Image.from_registry,
        "Sandbox.create": modal.Sandbox.create.aio,
        "Sandbox.list": modal.Sandbox.list.aio,
        "Sandbox.from_id": modal.Sandbox.from_id.aio,
        "Sandbox.from_name": modal.Sandbox.from_name.aio,
    }


def _real_methods() -> dict[str, Any]:
    return {
        "Sandbox.get_tags": modal.Sandbox.get_tags.aio,
        "Sandbox.poll": modal.Sandbox.poll.aio,
        "Sandbox.wait_until_ready": modal.Sandbox.wait_until_ready.aio,
        "Sandbox.terminate": modal.Sandbox.terminate.aio,
    }


def _fake_static(fake: FakeModal) -> dict[str, Any]:
    return {
        "App.lookup": fake.App.lookup.aio,
        "Image.from_registry": fake.Image.from_registry,
        "Sandbox.create": fake.Sandbox.create.aio,
        "Sandbox.list": fake.Sandbox.list.aio,
        "Sandbox.from_id": fake.Sandbox.from_id.aio,
        "Sandbox.from_name": fake.Sandbox.from_name.aio,
    }


def _fake_methods() -> dict[str, Any]:
    return {
        "Sandbox.get_tags": FakeSandbox.get_tags.fn,
        "Sandbox.poll": FakeSandbox.poll.fn,
        "Sandbox.wait_until_ready": FakeSandbox.wait_until_ready.fn,
        "Sandbox.terminate": FakeSandbox.terminate.fn,
    }


def _signature(obj: Any) -> inspect.Signature:
    return obj if isinstance(obj, inspect.Signature) else inspect.signature(obj)


def assert_compatible(name: str, fake: Any, real: Any) -> None:
    """``real``: the SDK callable, or a signature recorded from the floor version."""
    fake_sig, real_sig = _signature(fake), _signature(real)
    real_params = real_sig.parameters
    for pname, p in fake_sig.parameters.items():
        assert pname in real_params, f"{name}: the SDK has no parameter {pname!r}"
        r = real_params[pname]
        assert p.kind == r.kind, f"{name}({pname}): kind {p.kind} != SDK {r.kind}"
        assert p.default == r.default, f"{name}({pname}): default {p.default!r} != {r.default!r}"
    for pname, r in real_params.items():
        if r.default is _EMPTY and r.kind not in _VARIADIC:
            assert pname in fake_sig.parameters, f"{name}: the SDK requires {pname!r}"


@pytest.mark.parametrize("name", sorted(_real_static()))
def test_static_surfaces_match_the_sdk(name: str) -> None:
    assert_compatible(name, _fake_static(FakeModal())[name], _real_static()[name])


@pytest.mark.parametrize("name", sorted(_real_methods()))
def test_sandbox_methods_match_the_sdk(name: str) -> None:
    assert_compatible(name, _fake_methods()[name], _real_methods()[name])


@pytest.mark.parametrize("name", ["Sandbox.get_tags", "Sandbox.poll", "Sandbox.terminate"])
def test_sandbox_method_return_types_match(name: str) -> None:
    fake = inspect.signature(_fake_methods()[name]).return_annotation
    real = inspect.signature(_real_methods()[name]).return_annotation
    assert str(fake).replace("typing.", "") == str(real).replace("typing.", "")


def test_sandbox_handles_have_the_properties_the_adapter_reads() -> None:
    for attr in ("object_id", "returncode"):
        assert isinstance(inspect.getattr_static(modal.Sandbox, attr), property)
        assert isinstance(inspect.getattr_static(FakeSandbox, attr), property)
    assert isinstance(inspect.getattr_static(modal.App, "app_id"), property)


def test_probe_matches_modal_probe() -> None:
    real_fields = [(f.name, f.default) for f in dataclasses.fields(modal.Probe)]
    fake_fields = [(f.name, f.default) for f in dataclasses.fields(FakeProbe)]
    assert fake_fields == real_fields
    for ctor in ("with_tcp", "with_exec"):
        assert_compatible(f"Probe.{ctor}", getattr(FakeProbe, ctor), getattr(modal.Probe, ctor))


def test_the_real_probe_is_built_from_a_plan() -> None:
    """ProbePlan.build on the real SDK (pure dataclasses, no network)."""
    tcp = probe_plan({"httpGet": {"port": 8080, "path": "/healthz"}, "periodSeconds": 2})
    assert tcp is not None
    assert tcp.build(modal) == modal.Probe.with_tcp(8080, interval_ms=2000)
    exec_ = probe_plan({"exec": {"command": ["cat", "/tmp/ready"]}})
    assert exec_ is not None
    assert exec_.build(modal) == modal.Probe.with_exec("cat", "/tmp/ready")


@pytest.mark.parametrize(
    "name",
    [n for n, v in vars(exception).items() if isinstance(v, type) and n[0].isupper()],
)
def test_exception_classes_exist_with_the_sdk_hierarchy(name: str) -> None:
    fake_cls = getattr(exception, name)
    real_cls = getattr(modal.exception, name)
    real_mro = {c.__name__ for c in real_cls.__mro__}
    for base in fake_cls.__mro__:
        if base.__module__ == "builtins":
            continue
        assert base.__name__ in real_mro, f"{name}: the SDK's {name} is not a {base.__name__}"


def test_the_sdk_maps_the_statuses_the_adapter_relies_on_to_public_types() -> None:
    """The adapter reads only public exception types. It latches 'no probe configured' on
    ConflictError (FAILED_PRECONDITION, but ABORTED too: hence its second ask) and adopts a
    sandbox whose name is taken on AlreadyExistsError. (The mapping table is the SDK's own,
    private; reading it here documents the assumption.)"""
    from grpclib import Status
    from modal._grpc_client import _STATUS_TO_EXCEPTION

    assert _STATUS_TO_EXCEPTION[Status.FAILED_PRECONDITION] is modal.exception.ConflictError
    assert _STATUS_TO_EXCEPTION[Status.ABORTED] is modal.exception.ConflictError
    assert _STATUS_TO_EXCEPTION[Status.ALREADY_EXISTS] is modal.exception.AlreadyExistsError
    assert _STATUS_TO_EXCEPTION[Status.NOT_FOUND] is modal.exception.NotFoundError


def _scenario() -> FakeModal:
    """Every adapter path on the fake; the fake, with every call it received."""
    fake = FakeModal(list_lags=False)
    probe = {"tcpSocket": {"port": 8080}, "periodSeconds": 1}
    spec = SandboxSpec(
        image="python:3.12",
        command=("python", "-m", "http.server", "8080"),
        env={"A": "1"},
        gpu="A10G",
        cpu=2.0,
        memory_mib=4096,
        active_deadline_seconds=600,
        readiness_probe=probe,
    )
    a, b = pod("a"), pod("b")
    with ModalAdapter(sdk=fake, clock=ticking_clock(), call_timeout=1.0) as adapter:
        pa = adapter.provision(a, spec)
        pb = adapter.provision(b, SandboxSpec(image="python:3.12"))
        ids = {a: pa.instance_id, b: pb.instance_id}  # type: ignore[union-attr]
        adapter.observe(tracked(ids))
        fake.set_ready(ids[a])
        adapter.drain()
        fake.exit(ids[b], 1)
        adapter.observe(tracked(ids))
        adapter.terminate(a, sandbox(ids[a]))
        adapter.terminate(b, sandbox(""))
        fake.list_lags = True
        adapter.provision(pod("c"), spec)
        adapter.provision(pod("c"), spec)  # not listed yet: adopted by name
    return fake


@functools.cache
def _scenario_calls() -> tuple[Any, ...]:
    return tuple(_scenario().calls)


def test_every_call_the_adapter_made_binds_to_the_sdk() -> None:
    """Run every adapter path on the fake, then bind each recorded call to the real SDK."""
    real = {**_real_static(), **_real_methods()}
    calls = _scenario_calls()
    assert {c.name for c in calls} == set(real)
    for call in calls:
        sig = inspect.signature(real[call.name])
        args = (None, *call.args) if call.name in _real_methods() else call.args
        sig.bind(*args, **call.kwargs)  # raises TypeError on any drift


# -- the floor version's API, as recorded ---------------------------------------------------
FLOOR_RECORD = Path(__file__).parent / "data" / "modal_floor_api.json"


class _Repr:
    """A recorded default that JSON cannot hold: equal to any value with that repr."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return repr(other) == self.text or (isinstance(other, _Repr) and other.text == self.text)

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return self.text


def _decode(value: Any) -> Any:
    return _Repr(value["repr"]) if isinstance(value, dict) and "repr" in value else value


@functools.cache
def floor() -> dict[str, Any]:
    record: dict[str, Any] = json.loads(FLOOR_RECORD.read_text())
    return record


def floor_signature(name: str) -> inspect.Signature:
    surface = floor()["surfaces"][name]
    return inspect.Signature(
        [
            inspect.Parameter(
                p["name"],
                inspect.Parameter.__dict__[p["kind"]],
                default=_decode(p["default"]) if "default" in p else _EMPTY,
            )
            for p in surface["parameters"]
        ]
    )


def test_the_floor_record_is_of_the_floor_pyproject_names() -> None:
    """Moving the floor means recording its API again (scripts/record_modal_floor.py)."""
    pyproject = (Path(__file__).parents[2] / "pyproject.toml").read_text()
    match = re.search(r'^modal = \["modal>=([^",\]]+)"\]', pyproject, re.M)
    assert match is not None
    assert floor()["version"] == match.group(1)
    dev = re.search(r'^    "modal>=([^"]+)",$', pyproject, re.M)
    assert dev is not None
    assert dev.group(1) == match.group(1)  # the development group tests the same floor


@pytest.mark.parametrize("name", sorted({*_real_static(), *_real_methods()}))
def test_fake_surfaces_match_the_floor_sdk(name: str) -> None:
    fake = {**_fake_static(FakeModal()), **_fake_methods()}[name]
    assert_compatible(f"{name} (floor)", fake, floor_signature(name))


def test_every_call_the_adapter_made_binds_to_the_floor_sdk() -> None:
    calls = _scenario_calls()
    assert {c.name for c in calls} <= set(floor()["surfaces"])
    for call in calls:
        sig = floor_signature(call.name)
        args = (None, *call.args) if call.name in _real_methods() else call.args
        try:
            sig.bind(*args, **call.kwargs)
        except TypeError as e:
            pytest.fail(
                f"{call.name}{call.kwargs} does not bind on modal {floor()['version']}: {e}"
            )


def test_the_floor_has_the_probe_properties_and_exceptions_the_adapter_uses() -> None:
    record = floor()
    for ctor in ("with_tcp", "with_exec"):
        name = f"Probe.{ctor}"
        assert_compatible(f"{name} (floor)", getattr(FakeProbe, ctor), floor_signature(name))
    fake_fields = [[f.name, f.default] for f in dataclasses.fields(FakeProbe)]
    assert fake_fields == record["probe_fields"]
    assert record["properties"] == {"App": ["app_id"], "Sandbox": ["object_id", "returncode"]}
    fake_names = [n for n, v in vars(exception).items() if isinstance(v, type) and n[0].isupper()]
    for name in fake_names:
        assert name in record["exceptions"], f"modal {record['version']} has no {name}"
        for base in getattr(exception, name).__mro__:
            if base.__module__ != "builtins":
                assert base.__name__ in record["exceptions"][name]


def test_a_call_the_floor_lacks_is_caught() -> None:
    """The check has teeth: ``tags=`` on Sandbox.create first appears in 1.4.3 (the floor
    recorded is 1.5.0, pyproject's); against a signature without it, binding fails."""
    sig = floor_signature("Sandbox.create")
    without_tags = sig.replace(parameters=[p for n, p in sig.parameters.items() if n != "tags"])
    with pytest.raises(TypeError):
        without_tags.bind(app=None, name="x", tags={})


def test_importing_the_adapter_does_not_import_modal() -> None:
    code = (
        "import sys, lifecycle.adapters.modal as m, lifecycle.testing.fakes; "
        "assert 'modal' not in sys.modules, 'imported eagerly'; "
        "a = m.AsyncModalAdapter(); assert 'modal' not in sys.modules; "
        "assert a.sdk is sys.modules['modal']"
    )
    subprocess.run([sys.executable, "-c", code], check=True, timeout=60)
