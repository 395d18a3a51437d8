"""examples/kopf_operator.py: its handlers, called as kopf calls them (keyword arguments), feed
the Job machine through one runner on an injected store, and leave kopf's own bookkeeping out
of the status."""

from __future__ import annotations

import importlib.util
import logging
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import MemoryEmitter, MemoryStore, ObjectRef, Transition
from lifecycle.machines import job as j
from lifecycle.testing.fakes import FailingEmitter

kopf = pytest.importorskip("kopf", reason="the kopf example needs kopf (the dev group has it)")

EXAMPLE = Path(__file__).resolve().parents[1] / "examples" / "kopf_operator.py"
LOG = logging.getLogger("test_example_kopf")


def _load() -> ModuleType:
    # once per session: kopf's decorators register the handlers in its default registry
    spec = importlib.util.spec_from_file_location("example_kopf_operator", EXAMPLE)
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # its dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


op = _load()
T0 = datetime(2026, 12, 1, 9, 0, tzinfo=UTC)


class Clock:
    def __init__(self) -> None:
        self.now = T0

    def __call__(self) -> datetime:
        self.now += timedelta(seconds=15)
        return self.now


class Cluster:
    """One operator process, started as kopf starts it, and the objects it serves."""

    def __init__(self, store: Any = None, emitter: Any = None, provider: Any = None) -> None:
        self.store = MemoryStore() if store is None else store
        self.events = MemoryEmitter() if emitter is None else emitter
        self.provider = op.FakeWorkloads() if provider is None else provider
        self.settings = kopf.OperatorSettings()
        self.memo = kopf.Memo(
            store=self.store, emitters=[self.events], provider=self.provider, clock=Clock()
        )
        self.patches: list[Any] = []

    def start(self) -> None:
        assert op.start(settings=self.settings, memo=self.memo, logger=LOG, retry=0) is None

    def stop(self) -> None:
        assert op.stop(memo=self.memo, logger=LOG, retry=0) is None

    def call(self, handler: Any, name: str = "train-0", generation: int = 1, **spec: Any) -> None:
        """``handler`` with what kopf passes a resource handler of ``name`` (uid ``u-<name>``)."""
        body = {
            "apiVersion": f"{op.GROUP}/{op.VERSION}",
            "kind": "Job",
            "metadata": {
                "name": name,
                "namespace": "ml",
                "uid": f"u-{name}",
                "generation": generation,
            },
            "spec": {"nodes": ["node-a"], **spec},
            "status": {},
        }
        patch = kopf.Patch()
        self.patches.append(patch)
        result = handler(
            body=kopf.Body(body),
            spec=body["spec"],
            meta=body["metadata"],
            status=body["status"],
            name=name,
            namespace="ml",
            uid=f"u-{name}",
            labels={},
            annotations={},
            logger=LOG,
            patch=patch,
            memo=self.memo,
            retry=0,
        )
        assert result is None, "a returned value would be written into status.<handler id>"
        assert not patch, "the handlers never patch the object through kopf"

    def status(self, name: str = "train-0") -> Any:
        record = self.store.load(j.JOB, ObjectRef("Job", "ml", name, f"u-{name}"))
        return None if record is None else record.status

    def flips(self, name: str = "train-0") -> list[tuple[str, str, str, str]]:
        return [_flip(t) for t in self.events.for_uid(f"u-{name}")]


def _flip(t: Transition) -> tuple[str, str, str, str]:
    return (t.type.value, t.reason, t.source, t.target)


def started(**options: Any) -> Cluster:
    cluster = Cluster(**options)
    cluster.start()
    return cluster


R = op.WorkloadReport


# -- start-up and clean-up ------------------------------------------------------------------
def test_startup_moves_kopf_bookkeeping_out_of_the_status() -> None:
    cluster = started()
    persistence = cluster.settings.persistence
    assert isinstance(persistence.progress_storage, kopf.AnnotationsProgressStorage)
    assert isinstance(persistence.diffbase_storage, kopf.AnnotationsDiffBaseStorage)
    assert persistence.progress_storage.prefix == op.PREFIX
    assert persistence.finalizer == f"{op.PREFIX}/lifecycle"
    assert isinstance(cluster.memo.operator.runner, type(op.make_runner(MemoryStore(), [])))
    assert cluster.memo.operator.runner.store is cluster.store


def test_what_kopf_writes_with_those_settings_stays_out_of_the_status() -> None:
    """Drive the configured storages as kopf does after a handler: progress, the touch of a
    daemon's cycle, the diff base. Nothing lands under ``status``; kopf's status storage (the
    control) would."""
    cluster = started()
    body = kopf.Body({"metadata": {"name": "x", "annotations": {}}, "spec": {}, "status": {}})
    record: Any = {"started": "2026-12-01T09:00:00", "success": True, "retries": 1}

    def written(progress: Any) -> Any:
        patch = kopf.Patch()
        progress.store(key="submit", record=record, body=body, patch=patch)
        progress.touch(body=body, patch=patch, value="t")
        persistence.diffbase_storage.store(body=body, patch=patch, essence={"spec": {}})
        return patch

    persistence = cluster.settings.persistence
    ours = written(persistence.progress_storage)
    assert "status" not in ours
    assert any(k.startswith(op.PREFIX) for k in ours["metadata"]["annotations"])
    assert "status" in written(kopf.StatusProgressStorage())


def test_the_handlers_are_registered_for_the_custom_resource() -> None:
    """What the decorators told kopf (its registry's layout is private: read defensively)."""
    registry = kopf.get_default_registry()
    try:
        timers = list(registry._spawning.get_all_handlers())
        changing = list(registry._changing.get_all_handlers())
    except AttributeError:  # pragma: no cover - another kopf layout
        pytest.skip("this kopf's registry has another layout")
    ours = [h for h in timers + changing if h.selector.group == op.GROUP]
    assert {h.selector.any_name for h in ours} == {op.PLURAL}
    (poll,) = [h for h in ours if h.id == "poll"]
    assert (poll.interval, poll.idle, poll.initial_delay) == (15.0, None, 5.0)
    kinds = sorted((h.id, str(h.reason)) for h in ours if h.id != "poll")
    reason = kopf.Reason
    expected = [("submit", "None"), ("submit", str(reason.CREATE))]  # resume: reason None
    expected += [("respec/spec", str(reason.UPDATE)), ("remove", str(reason.DELETE))]
    assert kinds == sorted(expected)
    (remove,) = [h for h in ours if h.id == "remove"]
    assert remove.requires_finalizer  # kopf holds the object until the handler succeeds


def test_cleanup_closes_the_runner_and_tolerates_a_failed_start() -> None:
    cluster = started()
    cluster.call(op.submit)
    cluster.stop()
    assert op.stop(memo=kopf.Memo(), logger=LOG) is None  # startup never built one


# -- create, poll, delete -------------------------------------------------------------------
def test_create_commits_the_status_and_emits_its_event() -> None:
    cluster = started()
    cluster.call(op.submit, maxRestarts=2, checkpoint=True)
    status = cluster.status()
    assert (status.state, status.reason) == ("InProgress", j.WORKLOAD_CREATED)
    assert (status.nodes, status.max_restarts, status.checkpoint) == (("node-a",), 2, True)
    assert cluster.provider.created == ["ml/train-0"]
    assert cluster.flips() == [("Normal", j.WORKLOAD_CREATED, "", "InProgress")]


def test_polls_follow_the_table_and_a_repeated_poll_sends_nothing() -> None:
    cluster = started()
    cluster.provider.script(
        "ml/train-0", R("Pending", "no nodes yet"), R("Running"), R("Running"), R("Succeeded")
    )
    cluster.call(op.submit)
    seen = []
    for _ in range(5):  # the last poll finds it Succeeded: only the Tick is fed
        cluster.call(op.poll)
        seen.append((cluster.status().state, cluster.status().reason, len(cluster.events.events)))
    assert seen == [
        ("InProgress", j.WORKLOAD_PENDING, 1),
        ("InProgress", j.WORKLOAD_RUNNING, 1),
        ("InProgress", j.WORKLOAD_RUNNING, 1),
        ("Succeeded", j.WORKLOAD_COMPLETED, 2),
        ("Succeeded", j.WORKLOAD_COMPLETED, 2),
    ]
    assert cluster.flips()[1] == ("Normal", j.WORKLOAD_COMPLETED, "InProgress", "Succeeded")
    cluster.events.assert_no_duplicates()


@pytest.mark.parametrize(
    ("report", "reason", "message"),
    [
        (R("Failed", "OOM", nodes=("node-a",)), j.WORKLOAD_FAILED, "failed: OOM"),
        (R("Missing"), j.WORKLOAD_FAILED, "was deleted"),
    ],
)
def test_a_failed_or_vanished_workload_fails_the_job(
    report: Any, reason: str, message: str
) -> None:
    cluster = started()
    cluster.provider.script("ml/train-0", report)
    cluster.call(op.submit)
    cluster.call(op.poll)
    assert cluster.flips()[-1] == ("Warning", reason, "InProgress", "Failed")
    assert cluster.status().state == "Failed"
    assert message in cluster.events.events[-1].message


def test_a_spec_change_stamps_its_generation_without_an_event() -> None:
    cluster = started()
    cluster.call(op.submit)
    cluster.call(op.respec, generation=2, nodes=["node-a", "node-b"])
    status = cluster.status()
    assert status.generation == 2
    assert {c.observed_generation for c in status.conditions if c.status == "True"} == {2}
    assert len(cluster.events.events) == 1


def test_a_poll_before_the_create_handler_or_a_failed_poll_observes_nothing() -> None:
    def down(workload: str) -> Any:
        raise ConnectionError("provider unreachable")

    provider = op.FakeWorkloads()
    provider.poll = down
    cluster = started(provider=provider)
    cluster.call(op.poll)  # no record yet
    assert cluster.status() is None
    cluster.call(op.submit)
    cluster.call(op.poll)
    assert cluster.status().reason == j.WORKLOAD_CREATED
    assert len(cluster.events.events) == 1


def test_a_rejected_create_warns_backs_off_and_succeeds_on_the_retry() -> None:
    cluster = started()
    cluster.provider.refuse["ml/train-0"] = op.WorkloadRejected("quota exceeded")
    with pytest.raises(kopf.TemporaryError, match="quota exceeded"):
        cluster.call(op.submit)
    assert cluster.status().state == ""  # an action Warning, no write
    assert cluster.flips() == [("Warning", j.WORKLOAD_CREATION_ERROR, "", "")]
    cluster.call(op.submit)  # kopf retries the handler
    assert cluster.status().state == "InProgress"
    assert cluster.provider.created == ["ml/train-0"]


def test_an_unbuildable_workload_fails_the_job_without_creating_it() -> None:
    cluster = started()
    cluster.provider.refuse["ml/train-0"] = op.WorkloadUnbuildable("MPIJob", unsupported=True)
    cluster.call(op.submit)
    assert cluster.flips() == [("Warning", j.WORKLOAD_CREATION_ERROR, "", "Failed")]
    assert cluster.provider.created == []


def test_resume_after_a_restart_creates_nothing_again() -> None:
    cluster = started()
    cluster.call(op.submit)
    cluster.stop()
    again = Cluster(store=cluster.store, provider=cluster.provider)
    again.start()
    again.call(op.submit)  # @kopf.on.resume: same function
    assert cluster.provider.created == ["ml/train-0"]
    assert again.events.events == []


def test_delete_removes_the_workload_and_waits_for_the_objects_events() -> None:
    events = FailingEmitter(failures=1)
    cluster = started(emitter=events)
    cluster.call(op.submit)  # its Event refused: it stays in the outbox
    assert events.events == []
    events.arm(1)  # the redelivery of the first call fails too
    with pytest.raises(kopf.TemporaryError, match="1 events not delivered"):
        cluster.call(op.remove)  # kopf keeps the finalizer and calls again
    assert cluster.provider.deleted == ["ml/train-0"]
    cluster.call(op.remove)
    assert [t.reason for t in events.events] == [j.WORKLOAD_CREATED]


# -- a crash ----------------------------------------------------------------------------------
def test_startup_redelivers_what_a_crashed_runner_committed_once() -> None:
    crashed = started(emitter=FailingEmitter(failures=10))
    crashed.call(op.submit)  # committed; its Event never went out
    assert crashed.status().state == "InProgress"
    restarted = Cluster(store=crashed.store, provider=crashed.provider)
    restarted.start()
    assert [t.reason for t in restarted.events.events] == [j.WORKLOAD_CREATED]
    restarted.call(op.poll)
    again = Cluster(store=crashed.store, emitter=restarted.events, provider=crashed.provider)
    again.start()
    assert [t.reason for t in restarted.events.events] == [j.WORKLOAD_CREATED]


# -- any provider story ---------------------------------------------------------------------
TERMINAL_OF = {"Succeeded": "Succeeded", "Failed": "Failed", "Missing": "Failed"}


@settings(max_examples=40, deadline=None)
@given(st.lists(st.sampled_from(op.PHASES), min_size=1, max_size=8))
def test_any_sequence_of_reports_ends_as_its_first_terminal_one(phases: list[str]) -> None:
    """Whatever the provider says, poll after poll: one Event per flip (none repeated), the
    Job decided by the first terminal report, never reopened by a later one."""
    cluster = started()
    cluster.provider.script("ml/train-0", *(R(p) for p in phases))
    cluster.call(op.submit)
    for _ in phases:
        cluster.call(op.poll)
    first = next((TERMINAL_OF[p] for p in phases if p in TERMINAL_OF), "InProgress")
    assert cluster.status().state == first
    flips = cluster.flips()
    assert flips[0] == ("Normal", j.WORKLOAD_CREATED, "", "InProgress")
    assert [f[3] for f in flips[1:]] == ([] if first == "InProgress" else [first])
    cluster.events.assert_no_duplicates()


@pytest.mark.parametrize(
    ("spec", "error"),
    [
        ({"maxRestarts": 10**6}, "more than its limit 1000"),
        ({"maxRestarts": "three"}, "invalid literal"),
        ({"stallThresholdSeconds": -5}, "must not be negative"),
        ({"nodes": 7}, "not iterable"),
    ],
)
def test_a_spec_it_refuses_is_a_permanent_error_and_writes_nothing(
    spec: dict[str, Any], error: str
) -> None:
    cluster = started()
    with pytest.raises(kopf.PermanentError, match=f"invalid spec, nothing observed: .*{error}"):
        cluster.call(op.submit, **spec)
    assert cluster.status() is None
    assert cluster.provider.created == []
    assert cluster.events.events == []


def test_an_unknown_phase_is_refused_with_the_known_ones() -> None:
    with pytest.raises(ValueError, match="unknown workload phase 'Exploded'; known: Pending"):
        op.observation(R("Exploded"), T0)


# -- on the status subresource (the production store) ---------------------------------------
def _status_store(server: Any) -> Any:
    """The example's production store, on the fake API server."""
    from kubernetes import client as kubernetes_client  # type: ignore[import-untyped]

    from lifecycle.stores.kubernetes import CustomResource, KubernetesStore

    config = kubernetes_client.Configuration()
    config.host = server.url
    resources = {"Job": CustomResource(op.GROUP, op.VERSION, op.PLURAL)}
    return KubernetesStore(kubernetes_client.ApiClient(config), resources=resources)


def _record(server: Any) -> tuple[dict[str, Any], str]:
    from lifecycle.stores.kubernetes import RECORD_CONDITION

    obj = server.object(op.PLURAL, "ml", "train-0")
    assert obj is not None
    (record,) = [c for c in obj["status"]["conditions"] if c["type"] == RECORD_CONDITION]
    return obj, str(record["message"])


def test_on_the_status_store_the_record_and_its_outbox_live_in_the_custom_resource() -> None:
    from lifecycle.testing import FakeApiServer, conditions_crd_schema

    server = FakeApiServer()
    try:
        server.register_crd(op.GROUP, op.VERSION, op.PLURAL, "Job", conditions_crd_schema("Job"))
        server.add_object(op.PLURAL, "ml", "train-0", uid="u-train-0", spec={"nodes": ["node-a"]})
        crashed = started(store=_status_store(server), emitter=FailingEmitter(failures=10))
        crashed.provider.script("ml/train-0", R("Running"), R("Succeeded"))
        crashed.call(op.submit)  # committed in the object's status; its Event never went out
        obj, record = _record(server)
        assert '"reason":"WorkloadCreated"' in record  # the event, in the outbox
        assert obj["spec"] == {"nodes": ["node-a"]}  # the status write left the spec alone
        # a restart on the same object: startup redelivers it, once; polls follow the table
        restarted = Cluster(store=_status_store(server), provider=crashed.provider)
        restarted.start()
        for _ in range(2):
            restarted.call(op.poll)
        restarted.stop()
        assert [t.reason for t in restarted.events.events] == [
            j.WORKLOAD_CREATED,
            j.WORKLOAD_COMPLETED,
        ]
        obj, record = _record(server)
        assert '"outbox":[]' in record  # everything delivered, and written so
        conditions = {c["type"]: c["status"] for c in obj["status"]["conditions"]}
        assert (conditions["Succeeded"], conditions["InProgress"]) == ("True", "False")
    finally:
        server.close()
