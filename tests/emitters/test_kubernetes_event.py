"""The transition -> events.k8s.io/v1 Event mapping: regarding, controllers, names, notes."""

from __future__ import annotations

import subprocess
import sys
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

import attrs
import pytest

from lifecycle import EventType, ObjectRef, Transition
from lifecycle.emitters.kubernetes import (
    NAME_LIMIT,
    NOTE_LIMIT,
    TRUNCATED_SUFFIX,
    Event,
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
    ObjectReference,
    build_event,
    default_controller,
    event_name,
    id_suffix,
    is_derived_uid,
    is_dns_subdomain,
    truncate_note,
)
from lifecycle.links import claim_ref

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
JOB = ObjectRef("Job", "certs", "gpu-burn-0", "job-1")
CLAIM = ObjectRef("NodeClaim", "", "ml-trainer-0", "claim-1")
CLAIM_OF_POD = claim_ref(POD)


def transition(
    ref: ObjectRef = POD,
    machine: str = "pod",
    reason: str = "Running",
    *,
    type: EventType = EventType.NORMAL,
    message: str = "external instance is running",
    version: int = 3,
    n: int = 0,
    fallback: bool = False,
) -> Transition:
    return Transition(
        ref,
        machine,
        "Initializing",
        reason,
        reason,
        type,
        message,
        version,
        EPOCH,
        n,
        "",
        fallback,
    )


class Capturing(KubernetesEmitter):
    """Keeps every Event it builds, before correlation."""

    built: list[Event]

    def _admit(self, event: Event, **kw: Any) -> bool:
        self.built.append(event)
        return super()._admit(event, **kw)


def emitted(*transitions: Transition, **kw: object) -> tuple[list[Event], KubernetesEmitter]:
    """Emit through a worker-less emitter and return the Events it built."""
    kw.setdefault("clock", ManualClock(EPOCH))
    kw.setdefault("hostname", "node-a")
    emitter = Capturing(MemoryEventSink(), start=False, **kw)  # type: ignore[arg-type]
    emitter.built = []
    for t in transitions:
        emitter.emit(t)
    return emitter.built, emitter


# -- regarding, type, reason, action -----------------------------------------------------------
def test_an_event_regards_the_object_and_invents_no_resource_version() -> None:
    [event], _ = emitted(transition(version=7))
    assert event.regarding.store_version.startswith("7#")  # with what it records (ADR 0141)
    assert attrs.evolve(event.regarding, store_version="") == ObjectReference(
        kind="Pod",
        name="trainer-0",
        namespace="ml",
        uid="pod-a",
        api_version="v1",
        resource_version="",
    )
    # the store's version only keeps transitions apart in correlation: never on the wire
    assert event.to_body()["regarding"] == {
        "kind": "Pod",
        "namespace": "ml",
        "name": "trainer-0",
        "uid": "pod-a",
        "apiVersion": "v1",
    }
    assert event.namespace == "ml"
    assert (event.type, event.reason, event.action) == ("Normal", "Running", "Running")
    assert event.note == "external instance is running"
    assert event.series is None
    assert event.related is None


def test_the_host_can_supply_the_resource_version_and_api_versions() -> None:
    [event], _ = emitted(
        transition(version=7),
        resource_version=lambda t: f"rv-{t.version * 1000}",
        api_versions={"Pod": "v1beta9"},
    )
    assert event.regarding.resource_version == "rv-7000"
    assert event.regarding.store_version == ""  # the real one correlates, as in Go
    assert event.regarding.api_version == "v1beta9"


def test_api_versions_of_the_shipped_kinds_and_unknown_kinds() -> None:
    [job, claim, other], _ = emitted(
        transition(JOB, "job", "WorkloadCreated"),
        transition(CLAIM, "nodeclaim", "Bound"),
        transition(ObjectRef("Gizmo", "x", "g", "g-1"), "gizmo", "Ready"),
    )
    assert job.regarding.api_version == "nvcre.nvidia.com/v1alpha1"
    assert claim.regarding.api_version == "nebula.inftyai.com/v1alpha1"
    assert other.regarding.api_version == ""
    assert other.reporting_controller == "gizmo-controller"


def test_a_cluster_scoped_object_gets_its_event_in_default() -> None:
    [event], _ = emitted(transition(CLAIM, "nodeclaim", "Bound"))
    assert event.namespace == "default"
    assert event.regarding.namespace == ""
    assert "namespace" not in event.regarding.to_body()


def test_a_warning_transition_is_a_warning_event() -> None:
    [event], _ = emitted(transition(reason="Failed", type=EventType.WARNING))
    assert event.type == "Warning"


def test_only_normal_and_warning_are_recorded() -> None:
    _, emitter = emitted()
    ref = ObjectReference(kind="Pod", name="p", namespace="ml", uid="u")
    assert not emitter.record(ref, "Debug", "Probe", "x", controller="pod-controller")
    assert emitter.stats.invalid == 1
    with pytest.raises(ValueError, match="only Normal and Warning"):
        build_event(
            ref,
            type="Info",
            reason="R",
            note="",
            reporting_controller="c",
            reporting_instance="c-h",
            now=EPOCH,
        )


def test_record_sends_an_action_event_with_its_own_action_and_related() -> None:
    _, emitter = emitted()
    regarding = ObjectReference(kind="Workflow", name="wf", namespace="certs", uid="wf-1")
    related = ObjectReference(kind="Job", name="j", namespace="certs", uid="j-1")
    assert emitter.record(
        regarding,
        "Warning",
        "WorkflowCreationError",
        "Failed to create Workflow wf: boom",
        controller="certification-controller",
        action="CreateWorkflow",
        related=related,
    )
    [event] = emitter.dispatcher.queued()
    assert (event.action, event.related) == ("CreateWorkflow", related)
    assert event.reporting_instance == "certification-controller-node-a"
    assert event.to_body()["related"] == {
        "kind": "Job",
        "namespace": "certs",
        "name": "j",
        "uid": "j-1",
    }


# -- reporting controller and instance ---------------------------------------------------------
@pytest.mark.parametrize(
    ("machine", "controller"),
    [
        ("job", "job-controller"),
        ("workflow", "workflow-controller"),
        ("certification", "certification-controller"),
        ("workloadrun", "workloadrun-controller"),
        ("pod", "pod-controller"),
        ("nodeclaim", "nodeclaim-controller"),
        ("restore", "restore-controller"),
    ],
)
def test_each_machine_has_its_reporting_controller(machine: str, controller: str) -> None:
    [event], _ = emitted(transition(machine=machine))
    assert event.reporting_controller == controller
    assert event.reporting_instance == f"{controller}-node-a"


def test_job_timed_out_is_reported_by_the_workflow_controller() -> None:
    timed_out = transition(JOB, "job", "JobTimedOut", type=EventType.WARNING)
    fallback = transition(
        JOB, "job", "JobTimedOutStatusUpdateFailed", type=EventType.WARNING, fallback=True
    )
    assert default_controller(timed_out) == "workflow-controller"
    assert default_controller(fallback) == "workflow-controller"
    assert default_controller(transition(JOB, "job", "WorkloadFailed")) == "job-controller"


def test_a_controller_the_transition_carries_wins() -> None:
    carried = transition(JOB, "job", "WorkloadFailed")._replace(controller="custom-ctl")
    assert default_controller(carried) == "custom-ctl"
    [event], _ = emitted(carried)
    assert (event.reporting_controller, event.reporting_instance) == (
        "custom-ctl",
        "custom-ctl-node-a",
    )


def test_controllers_can_be_renamed_or_chosen_by_a_function() -> None:
    events, _ = emitted(
        transition(machine="pod"),
        transition(JOB, "job", "JobTimedOut", type=EventType.WARNING, n=1),
        controller={"pod-controller": "nebula-modal/pod-controller"},
    )
    assert [e.reporting_controller for e in events] == [
        "nebula-modal/pod-controller",
        "workflow-controller",
    ]
    [event], emitter = emitted(transition(), controller=lambda t: f"x-{t.reason.lower()}")
    assert event.reporting_controller == "x-running"
    assert emitter.controller_for(transition()) == "x-running"


def test_action_events_are_never_deduplicated_and_correlate() -> None:
    """An action event has no id and may repeat: two identical ones are a series."""
    action = transition(reason="OverrideNoOp", type=EventType.WARNING)._replace(action=True)
    assert action.id == ""
    events, emitter = emitted(action, action)
    assert len(events) == 2
    assert events[0].key == events[1].key
    assert emitter.stats.duplicates == 0


def test_a_redelivered_transition_is_skipped() -> None:
    events, emitter = emitted(transition(), transition(), transition(n=1))
    assert len(events) == 2
    assert emitter.stats.duplicates == 1


# -- names and times ---------------------------------------------------------------------------
def test_a_transitions_name_is_the_object_and_hex_of_its_id() -> None:
    """A committed transition's Event is named from its id (ADR 0121): the same name in
    every process, whatever the clock, so a redelivery is an AlreadyExists."""
    clock = ManualClock(EPOCH + timedelta(microseconds=123456))
    [event], _ = emitted(transition(), clock=clock)
    assert event.name == f"trainer-0.{id_suffix(transition().id):x}"
    [later], _ = emitted(transition(), clock=ManualClock(EPOCH + timedelta(days=3)))
    assert later.name == event.name
    assert event.event_time == clock()
    assert event.to_body()["eventTime"] == "2026-11-30T10:00:00.123456Z"


def test_an_action_events_name_is_the_object_and_hex_unix_nanoseconds() -> None:
    clock = ManualClock(EPOCH + timedelta(microseconds=123456))
    [event], _ = emitted(transition()._replace(action=True), clock=clock)
    nanos = int((EPOCH.timestamp()) * 1_000_000 + 123456) * 1000
    assert event.name == f"trainer-0.{nanos:x}"


def test_action_names_stay_unique_when_the_clock_does_not_move() -> None:
    events, _ = emitted(*(transition(n=n)._replace(action=True) for n in range(3)))
    names = [e.name for e in events]
    assert len(set(names)) == 3
    assert [int(n.split(".")[1], 16) for n in names] == sorted(
        int(n.split(".")[1], 16) for n in names
    )


def test_names_of_distinct_transitions_differ() -> None:
    events, _ = emitted(*(transition(n=n) for n in range(50)))
    assert len({e.name for e in events}) == 50


def test_the_wire_body_has_the_events_v1_shape() -> None:
    [event], _ = emitted(transition())
    body = event.to_body()
    assert body["apiVersion"] == "events.k8s.io/v1"
    assert body["metadata"] == {"name": event.name, "namespace": "ml"}
    assert "resourceVersion" not in body["regarding"]
    assert body["reportingController"] == "pod-controller"
    assert "series" not in body
    with pytest.raises(ValueError, match="no series"):
        event.series_patch()


# -- the note ----------------------------------------------------------------------------------
def test_a_note_within_the_limit_is_kept() -> None:
    note = "x" * NOTE_LIMIT
    assert truncate_note(note) == note


def test_a_long_note_is_cut_to_1024_bytes_with_the_suffix() -> None:
    note = truncate_note("y" * 5000)
    assert len(note.encode()) == NOTE_LIMIT
    assert note.endswith(TRUNCATED_SUFFIX)
    assert note == "y" * (NOTE_LIMIT - len(TRUNCATED_SUFFIX)) + TRUNCATED_SUFFIX


@pytest.mark.parametrize("char", ["é", "€", "🚀"])
def test_a_long_note_is_cut_on_a_character_boundary(char: str) -> None:
    note = truncate_note("a" + char * 2000)
    data = note.encode("utf-8")  # would raise on a split character
    assert len(data) <= NOTE_LIMIT
    assert len(data) > NOTE_LIMIT - len(char.encode()) - 1
    assert note.endswith(TRUNCATED_SUFFIX)
    assert set(note.removesuffix(TRUNCATED_SUFFIX)[1:]) == {char}


def test_invalid_utf8_becomes_the_replacement_character() -> None:
    assert truncate_note(b"bad \xff\xfe byte") == "bad \ufffd\ufffd byte"
    assert truncate_note("lone \udc80 surrogate") == "lone \ufffd surrogate"
    raw = b"\xff" * 2000
    cut = truncate_note(raw)
    assert len(cut.encode()) <= NOTE_LIMIT
    assert cut.endswith(TRUNCATED_SUFFIX)


def test_the_emitter_caps_the_note() -> None:
    [event], _ = emitted(transition(message="m" * 3000))
    assert len(event.note.encode()) == NOTE_LIMIT
    assert event.note.endswith(TRUNCATED_SUFFIX)


# -- the extra is optional ---------------------------------------------------------------------
def test_lifecycle_and_the_emitter_import_without_the_kubernetes_client() -> None:
    code = """
import sys
sys.modules["kubernetes"] = None  # as if not installed
import lifecycle
from lifecycle.emitters.kubernetes import KubernetesEmitter, MemoryEventSink, ApiEventSink
assert "kubernetes.client" not in sys.modules
with KubernetesEmitter(MemoryEventSink()) as e:
    pass
try:
    ApiEventSink()
except ImportError as err:
    assert "lifecycle-machines[kubernetes]" in str(err), err
else:
    raise AssertionError("ApiEventSink without the client")
print("ok")
"""
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "ok"


# -- names the API server accepts --------------------------------------------------------------
LONG_POD = ObjectRef("Pod", "ml", "p" * 240, "pod-long")


def test_a_name_that_is_not_a_dns_subdomain_becomes_a_uuid() -> None:
    """``<240 characters>.<16 hex digits>`` is 257 characters: the API server refuses it,
    so the Event is named by a UUID instead, as client-go does."""
    [event], _ = emitted(transition(LONG_POD))
    suffix = id_suffix(transition(LONG_POD).id)
    assert len(f"{'p' * 240}.{suffix:x}") == 257
    assert uuid.UUID(event.name).version == 5
    assert is_dns_subdomain(event.name)
    assert event.regarding.name == "p" * 240  # the object is still named in full
    # derived from the name it replaces: the same in a replay and after a restart
    assert event.name == event_name("p" * 240, suffix)
    assert event_name("p" * 240, suffix + 1) != event.name


@pytest.mark.parametrize(
    ("name", "valid"),
    [
        ("trainer-0", True),
        ("a" * (NAME_LIMIT - 17), True),  # with ".<16 hex>": exactly 253
        ("a" * (NAME_LIMIT - 16), False),
        ("Trainer-0", False),  # upper case
        ("trainer_0", False),
        ("-trainer", False),
    ],
)
def test_only_dns_subdomain_names_are_kept(name: str, valid: bool) -> None:
    nanos = 0x18ECCA50D8F34000
    kept = event_name(name, nanos) == f"{name}.{nanos:x}"
    assert kept is valid
    assert is_dns_subdomain(event_name(name, nanos))


# -- regarding: the object as the API server knows it ------------------------------------------
def test_the_hosts_resolver_supplies_the_real_uid_and_resource_version() -> None:
    asked: list[ObjectRef] = []

    def resolve(ref: ObjectRef) -> tuple[str, str]:
        asked.append(ref)
        return ("3f9c6a1e-0b7d-4f0e-9d52-8c1b2e7a4f10", "184467")

    [pod, claim], emitter = emitted(
        transition(version=7), transition(CLAIM_OF_POD, "nodeclaim", "Bound"), resolve=resolve
    )
    assert asked == [POD, CLAIM_OF_POD]
    assert (pod.regarding.uid, pod.regarding.resource_version) == (
        "3f9c6a1e-0b7d-4f0e-9d52-8c1b2e7a4f10",
        "184467",
    )
    assert pod.regarding.store_version == ""  # the real resourceVersion correlates, as in Go
    assert pod.to_body()["regarding"]["resourceVersion"] == "184467"
    assert claim.regarding.uid == "3f9c6a1e-0b7d-4f0e-9d52-8c1b2e7a4f10"
    assert emitter.stats.unresolved_uids == 0


def test_a_derived_nodeclaim_uid_is_never_sent() -> None:
    """``<pod uid>-claim`` is the store's key, not the NodeClaim's uid: without the host's
    answer the Event names the claim by kind and name only, and the miss is counted."""
    assert is_derived_uid(CLAIM_OF_POD)
    assert not is_derived_uid(POD)
    [event], emitter = emitted(transition(CLAIM_OF_POD, "nodeclaim", "Bound"))
    assert event.regarding.uid == ""
    assert "uid" not in event.to_body()["regarding"]
    assert event.to_body()["regarding"]["name"] == "ml-trainer-0"
    assert emitter.stats.unresolved_uids == 1
    [event], emitter = emitted(
        transition(CLAIM_OF_POD, "nodeclaim", "Bound"), resolve=lambda ref: None
    )
    assert event.regarding.uid == ""
    assert emitter.stats.unresolved_uids == 1


def test_an_unknown_or_failing_resolver_answer_falls_back_without_inventing() -> None:
    def broken(ref: ObjectRef) -> tuple[str, str]:
        raise LookupError("informer not synced")

    for resolve in (lambda ref: None, lambda ref: ("", ""), broken):
        [event], _ = emitted(transition(version=4), resolve=resolve)
        assert (event.regarding.uid, event.regarding.resource_version) == ("pod-a", "")
        assert event.regarding.store_version.startswith("4#")
    [event], _ = emitted(transition(version=4), resolve=lambda ref: ("", "991"))
    assert (event.regarding.uid, event.regarding.resource_version) == ("pod-a", "991")


def test_without_resource_versions_transitions_still_correlate_apart() -> None:
    """Two Running transitions of one pod (a status write between them) are two rows, as
    the resourceVersion a Go controller's write moves would make them; two action events at
    one version are one series."""
    sink = MemoryEventSink()
    with KubernetesEmitter(sink, clock=ManualClock(EPOCH), hostname="h", timers=False) as em:
        em.emit(transition(version=3))
        em.emit(transition(version=5, n=0))
        probe = transition(reason="OverrideNoOp")._replace(action=True)
        em.emit(probe)
        em.emit(probe)
        assert em.flush()
    assert sorted(sink.verbs()) == ["create", "create", "create", "patch"]
    assert all("resourceVersion" not in e["regarding"] for e in sink.events())
