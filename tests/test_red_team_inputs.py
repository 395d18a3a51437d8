"""Red team, input side: values a host builds in Python that pass a shallow check but are not
what the record declares, store URLs whose escapes do not decode, and the public helpers
around the runner (``kubernetes_status``) given another machine's status.

Each test would have failed before its fix: the store then held a value of the wrong type
(text for a time, a live list for a tuple), or an untyped exception escaped.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from lifecycle import (
    InvalidObservation,
    LifecycleError,
    MemoryEmitter,
    MemoryStore,
    ObjectRef,
    Runner,
    SQLiteStore,
    Store,
    kubernetes_status,
    open_store,
)
from lifecycle.machines import JOB, NODECLAIM, POD, RESTORE, job, pod
from lifecycle.stores import InvalidStoreURL
from lifecycle.testing import assert_journal_folds

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)
POD_REF = ObjectRef("Pod", "ml", "trainer-0", "pod-a")
JOB_REF = ObjectRef("Job", "ml", "train", "job-a")


@pytest.fixture(params=["memory", "sqlite"])
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Store]:
    s: Store = (
        MemoryStore()
        if request.param == "memory"
        else SQLiteStore(tmp_path / "s.db", synchronous="OFF")
    )
    yield s
    s.close()


def held(store: Store) -> tuple[Any, ...]:
    """Everything the Pod, its NodeClaim and the Job hold (a refusal leaves it as it was)."""
    claim = ObjectRef("NodeClaim", "", "ml-trainer-0", "pod-a-claim")
    return (
        store.load(POD, POD_REF),
        store.journal(POD, POD_REF),
        store.load(NODECLAIM, claim),
        store.load(JOB, JOB_REF),
        store.journal(JOB, JOB_REF),
    )


# -- records built in Python hold the declared types themselves ----------------------------
HALF_BUILT: dict[str, tuple[ObjectRef, Any]] = {
    # Text for a time: Machine.observation parses it, a record built in Python kept it as
    # text -- the status (the NodeClaim's created_at), the event's `at` and the journal held
    # a str, and SQLite's commit raised AttributeError ('str' has no isoformat).
    "text for a time": (POD_REF, lambda: pod.CreateRequested(at="2026-11-30T10:00:00Z")),  # type: ignore[arg-type]
    # A list for a tuple: the status held the host's own list, so a later `append` by the
    # host changed the stored status and journal without any write.
    "a list for a tuple": (JOB_REF, lambda: job.Submitted(at=T0, nodes=["gpu-1"])),  # type: ignore[arg-type]
}


@pytest.mark.parametrize("case", sorted(HALF_BUILT))
@pytest.mark.parametrize("many", [False, True], ids=["observe", "observe_many"])
def test_a_record_built_in_python_must_hold_its_declared_types(
    store: Store, case: str, many: bool
) -> None:
    ref, build = HALF_BUILT[case]
    runner = Runner(store, [MemoryEmitter()])
    before = held(store)
    observation = build()
    call = (lambda: runner.observe_many([(ref, observation)])) if many else None
    with pytest.raises(InvalidObservation, match="built in Python"):
        call() if call is not None else runner.observe(ref, observation)
    assert held(store) == before


def test_an_integer_for_a_number_and_a_tuple_for_a_tuple_are_kept(store: Store) -> None:
    """The rule refuses only values the record would keep unconverted: an int in a float
    field and a tuple of strings are fine, and the host's tuple cannot change later."""
    runner = Runner(store, [MemoryEmitter()])
    submitted = job.Submitted(at=T0, nodes=("gpu-1",), measurement_timeout_s=300)
    assert runner.observe(JOB_REF, submitted).committed
    record = store.load(JOB, JOB_REF)
    assert record is not None
    assert record.status.nodes == ("gpu-1",)
    assert_journal_folds(JOB, store, JOB_REF)


def test_a_time_given_as_a_datetime_subclass_is_accepted(store: Store) -> None:
    class Stamp(datetime):
        pass

    at = Stamp(2026, 11, 30, 10, 0, tzinfo=UTC)
    runner = Runner(store, [MemoryEmitter()])
    assert runner.observe(POD_REF, pod.CreateRequested(at=at)).committed
    later = runner.observe(
        POD_REF,
        pod.ProvisionSucceeded(at=T0 + timedelta(seconds=1), reserved=True, instance_id="i-1"),
    )
    assert later.committed
    assert_journal_folds(POD, store, POD_REF)


# -- store URLs ------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "url",
    [
        "sqlite:///%ff.db",  # not UTF-8 once decoded: UnicodeDecodeError escaped
        "sqlite:///x%C3%28.db",  # an invalid continuation byte
        "sqlite:///x%ED%A0%80.db",  # an encoded lone surrogate
        "sqlite:///x\ud800.db",  # a lone surrogate as given: UnicodeEncodeError escaped
    ],
)
def test_a_store_url_whose_path_is_not_text_is_refused_typed(
    url: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InvalidStoreURL):
        open_store(url)
    assert list(tmp_path.iterdir()) == []


def test_the_cli_refuses_a_store_url_that_does_not_decode_with_exit_2(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from lifecycle.cli import main

    monkeypatch.chdir(tmp_path)
    trace = tmp_path / "t.jsonl"
    trace.write_text(
        '{"at": "2026-11-30T10:00:00Z", "machine": "pod", "object": {"namespace": "ml", '
        '"name": "p", "uid": "u"}, "observe": "CreateRequested", "with": {}}\n'
    )
    for argv in (
        ["replay", str(trace), "--store", "sqlite:///%ff.db"],
        ["db", "status", "--store", "sqlite:///%ff.db"],
    ):
        code = main(argv)
        err = capsys.readouterr().err
        assert code == 2, (argv, err)
        assert len(err.strip().splitlines()) == 1, err
        assert "internal error" not in err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t.jsonl"]


# -- kubernetes_status -----------------------------------------------------------------------
def test_kubernetes_status_refuses_another_machines_status() -> None:
    """A Job's status handed to the Pod machine (or a Pod's to the Job) has no Pod body: it
    is refused with the documented ValueError, not rendered as if it were the machine's."""
    job_status = JOB.apply(JOB.initial(JOB_REF), job.Submitted(at=T0))
    pod_status = POD.apply(POD.initial(POD_REF), pod.CreateRequested(at=T0))
    for machine, status in ((POD, job_status), (JOB, pod_status), (RESTORE, job_status)):
        with pytest.raises(ValueError, match="status"):
            kubernetes_status(machine, status)
    assert kubernetes_status(POD, pod_status)["phase"] == "Pending"


@pytest.mark.parametrize("machine", ["pod", None, 3])
def test_kubernetes_status_refuses_what_is_not_a_machine(machine: Any) -> None:
    status = POD.apply(POD.initial(POD_REF), pod.CreateRequested(at=T0))
    with pytest.raises(TypeError, match="expected a Machine"):
        kubernetes_status(machine, status)


def test_lifecycle_errors_only_from_the_runner_for_the_whole_set(store: Store) -> None:
    """A smoke pass over every case above in one runner: after the refusals, ordinary
    observations still commit (nothing refused left the runner or store half-written)."""
    runner = Runner(store, [MemoryEmitter()])
    for ref, build in HALF_BUILT.values():
        with pytest.raises(LifecycleError):
            runner.observe(ref, build())
    assert runner.observe(POD_REF, pod.CreateRequested(at=T0)).committed
    assert runner.observe(JOB_REF, job.Submitted(at=T0, nodes=("gpu-1",))).committed
    assert_journal_folds(POD, store, POD_REF)
    assert_journal_folds(JOB, store, JOB_REF)
