"""``lifecycle.kubernetes_status``: a status as Kubernetes writes it (ADR 0099). Every key is
checked against the Kubernetes client's own models (``attribute_map`` names the API fields),
for every status every shipped example trace passes through; the stored format keeps its
Python names."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from typing import Any, ClassVar

import attrs
import pytest

from lifecycle import Machine, MemoryStore, default_registry, kubernetes_status
from lifecycle._k8s_status import kubernetes_condition, kubernetes_time
from lifecycle.machines.pod import PodStatus
from lifecycle.machines.workflow import WorkflowMachine
from lifecycle.runner import Result
from lifecycle.tables import Condition
from lifecycle.trace import read_trace, replay

client = pytest.importorskip("kubernetes.client")

TRACES = Path(__file__).resolve().parent.parent / "examples" / "traces"
AT = datetime(2026, 11, 30, 10, 0, 0, 123456, tzinfo=UTC)
MACHINES = default_registry()


def api_names(model: type[Any]) -> dict[str, str]:
    """API name -> Python attribute of a kubernetes client model."""
    return {api: py for py, api in model.attribute_map.items()}


def as_model(model: type[Any], body: dict[str, Any]) -> Any:
    """Build the client model from ``body``: an unknown key is a KeyError; a required field
    missing is the client's own ValueError."""
    names = api_names(model)
    return model(**{names[key]: value for key, value in body.items()})


def check_condition(body: dict[str, Any], model: type[Any]) -> None:
    assert set(body) <= set(model.attribute_map.values()), body
    as_model(model, body)
    if "lastTransitionTime" in body:
        assert body["lastTransitionTime"].endswith("Z")
        datetime.strptime(body["lastTransitionTime"], "%Y-%m-%dT%H:%M:%SZ")


def check_pod_status(body: dict[str, Any]) -> None:
    assert set(body) <= set(client.V1PodStatus.attribute_map.values()), body
    for condition in body.get("conditions", []):
        check_condition(condition, client.V1PodCondition)
    as_model(client.V1PodStatus, {k: v for k, v in body.items() if k != "conditions"})


def statuses() -> Iterator[tuple[str, Machine[Any], Any]]:
    """Every status written while the shipped example traces replay."""
    for path in sorted(TRACES.glob("*.jsonl")):
        results = replay(read_trace(path, MACHINES), MemoryStore(), name=path.name)
        stack: list[Result] = list(results)
        while stack:
            result = stack.pop()
            stack.extend(result.linked)
            if result.status is not None:
                yield path.name, MACHINES.for_kind(result.ref.kind), result.status


ALL = list(statuses())


def test_the_example_traces_cover_every_shipped_machine() -> None:
    assert {m.name for _, m, _ in ALL} == set(MACHINES)


@pytest.mark.parametrize("machine_name", sorted({m.name for _, m, _ in ALL}))
def test_every_key_is_a_field_of_the_kubernetes_api(machine_name: str) -> None:
    checked = 0
    for trace, machine, status in ALL:
        if machine.name != machine_name:
            continue
        if machine.name == "nodeclaim" and status.state == "Deleted":
            with pytest.raises(ValueError, match="deleted NodeClaim"):
                kubernetes_status(machine, status)
            continue
        body = kubernetes_status(machine, status)
        if machine.name == "pod":
            check_pod_status(body)
        elif machine.name == "restore":
            assert set(body) == {"conditions"}
            for condition in body["conditions"]:
                check_condition(condition, client.V1PodCondition)
        elif machine.name == "nodeclaim":
            assert set(body) <= {"phase", "instanceID"}, (trace, body)
        else:
            assert set(body) == {"conditions"}, (trace, body)
            for condition in body["conditions"]:
                check_condition(condition, client.V1Condition)
        checked += 1
    assert checked


def test_a_pod_status_in_the_apis_names() -> None:
    ready = Condition("Ready", "True", "", "", AT, None)
    status = PodStatus(
        state="Running",
        phase="Running",
        message="external instance is running",
        ready=ready,
        pod_ip="10.0.0.7",
        instance_id="sb-1",
        start_time=AT,
    )
    assert kubernetes_status(MACHINES.for_kind("Pod"), status) == {
        "phase": "Running",
        "reason": "Running",
        "message": "external instance is running",
        "conditions": [
            {"type": "Ready", "status": "True", "lastTransitionTime": "2026-11-30T10:00:00Z"}
        ],
        "podIP": "10.0.0.7",
        "startTime": "2026-11-30T10:00:00Z",
    }
    # A Pod fresh from a reserved create has no Ready condition and no IP: nothing is made up.
    assert kubernetes_status(
        MACHINES.for_kind("Pod"), PodStatus(state="Initializing", phase="Pending")
    ) == {"phase": "Pending", "reason": "Initializing"}


def test_a_condition_in_the_apis_names() -> None:
    condition = Condition("Failed", "True", "BackoffLimitExceeded", "gave up", AT, 3)
    body = kubernetes_condition(condition)
    assert body == {
        "type": "Failed",
        "status": "True",
        "reason": "BackoffLimitExceeded",
        "message": "gave up",
        "lastTransitionTime": "2026-11-30T10:00:00Z",
        "observedGeneration": 3,
    }
    check_condition(body, client.V1Condition)
    # A metav1.Condition always carries reason and message, empty or not; its time is required.
    bare = kubernetes_condition(Condition("Ready", "False", "", "", AT))
    assert bare == {
        "type": "Ready",
        "status": "False",
        "reason": "",
        "message": "",
        "lastTransitionTime": "2026-11-30T10:00:00Z",
    }
    with pytest.raises(ValueError, match="needs its time"):
        kubernetes_condition(Condition("Ready", "False"))


def test_times_are_rfc3339_utc_whole_seconds() -> None:
    plus_two = timezone(timedelta(hours=2))
    assert kubernetes_time(datetime(2026, 11, 30, 12, 0, 1, 999999, tzinfo=plus_two)) == (
        "2026-11-30T10:00:01Z"
    )
    with pytest.raises(ValueError, match="timezone"):
        kubernetes_time(datetime(2026, 11, 30, 10, 0, 0))  # no timezone: refused


def test_the_stored_format_keeps_python_names() -> None:
    """Only the Kubernetes body is camelCase: ``dump_status`` (what stores write) is unchanged."""
    machine = MACHINES.for_kind("Job")
    status = next(s for _, m, s in ALL if m.name == "job" and s.conditions)
    stored = machine.dump_status(status)
    assert "last_transition_time" in stored["conditions"][0]
    assert "lastTransitionTime" not in repr(stored)
    assert machine.load_status(stored) == status


# -- host machines -----------------------------------------------------------------------------
@attrs.frozen
class GateStatus:
    state: str = ""
    conditions: tuple[Condition, ...] = ()


@attrs.frozen
class PlainStatus:
    state: str = ""


class GateMachine(WorkflowMachine):
    """A host's machine (the shipped Workflow's table, another name and status)."""

    name: ClassVar[str] = "gate"
    kind: ClassVar[str] = "Gate"
    status_type: ClassVar[type[Any]] = GateStatus


class PlainMachine(GateMachine):
    name: ClassVar[str] = "plain"
    status_type: ClassVar[type[Any]] = PlainStatus


class OwnShapeMachine(PlainMachine):
    name: ClassVar[str] = "own"

    def kubernetes_status(self, status: PlainStatus) -> dict[str, Any]:  # type: ignore[override]
        return {"phase": status.state}


def test_a_host_machine_with_conditions_gets_them_written() -> None:
    status = GateStatus("Open", (Condition("Open", "True", "Opened", "", AT, 2),))
    body = kubernetes_status(GateMachine(), status)
    assert body == {"conditions": [kubernetes_condition(status.conditions[0])]}


def test_a_host_machine_can_give_its_own_shape() -> None:
    assert kubernetes_status(OwnShapeMachine(), PlainStatus("Open")) == {"phase": "Open"}


def test_a_status_without_a_kubernetes_shape_is_refused() -> None:
    with pytest.raises(ValueError, match="'plain': a PlainStatus has no Kubernetes status"):
        kubernetes_status(PlainMachine(), PlainStatus("Open"))
