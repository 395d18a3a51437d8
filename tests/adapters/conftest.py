"""Fixtures for the provider adapter tests: a fixed clock, pod refs, the SDK fakes.

Nothing here (or in any test of this package) calls Modal or AWS: the Modal adapter runs on
:class:`~lifecycle.testing.fakes.FakeModal`, the AWS adapter on botocore's ``Stubber``,
on :class:`~lifecycle.testing.fakes.FakeEC2`, or on a moto server bound to 127.0.0.1.
"""

from __future__ import annotations

import itertools
import threading
from collections.abc import Callable, Iterator, Mapping
from datetime import UTC, datetime, timedelta

import pytest

from lifecycle import ObjectRef
from lifecycle.adapters import Tracked
from lifecycle.adapters.aws import FleetSpec
from lifecycle.adapters.modal import ModalAdapter, SandboxSpec
from lifecycle.testing.fakes import FakeModal

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)


def t(seconds: float = 0) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


def ticking_clock(step: float = 1.0) -> Callable[[], datetime]:
    """A clock that moves ``step`` seconds forward on every read."""
    counter = itertools.count()
    return lambda: t(next(counter) * step)


def pod(name: str = "trainer-0", uid: str | None = None, namespace: str = "ml") -> ObjectRef:
    return ObjectRef("Pod", namespace, name, uid or f"uid-{name}")


#: The spec the Modal tests track their pods with (observe and terminate do not read it).
SANDBOX = SandboxSpec(image="x")


def sandbox(sandbox_id: str | None = "") -> Tracked[SandboxSpec]:
    """A Modal pod tracked with ``sandbox_id`` (``None``/``""``: not known)."""
    return Tracked(SANDBOX, sandbox_id or "")


def tracked(ids: Mapping[ObjectRef, str | None]) -> dict[ObjectRef, Tracked[SandboxSpec]]:
    """Modal pods by their sandbox ids."""
    return {ref: sandbox(sid) for ref, sid in ids.items()}


def fleet(region: str = "us-east-1") -> FleetSpec:
    return FleetSpec(
        region=region,
        instance_types=("g5.xlarge",),
        subnet_ids=("subnet-a",),
        launch_template_name="gpu-node",
    )


def tracked_in(region: str, instance_id: str = "") -> Tracked[FleetSpec]:
    """An EC2 pod tracked in ``region`` with ``instance_id`` (``""``: not known)."""
    return Tracked(fleet(region), instance_id)


@pytest.fixture(autouse=True)
def _no_real_clouds(monkeypatch: pytest.MonkeyPatch) -> None:
    """Belt and braces: fake credentials, no config files, no instance metadata, no Modal
    token, and loopback endpoints, so an accidental real call fails fast on 127.0.0.1
    instead of reaching a cloud. (Tests that talk to moto pass its endpoint explicitly.)"""
    for key in (
        "AWS_PROFILE",
        "AWS_SESSION_TOKEN",
        "AWS_SECURITY_TOKEN",
        "MODAL_TOKEN_ID",
        "MODAL_TOKEN_SECRET",
    ):
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("AWS_ACCESS_KEY_ID", "testing")
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "testing")
    monkeypatch.setenv("AWS_CONFIG_FILE", "/dev/null")
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:9")  # any default client: loopback
    monkeypatch.setenv("MODAL_SERVER_URL", "http://127.0.0.1:9")


@pytest.fixture(autouse=True)
def _no_leaked_loop_threads() -> Iterator[None]:
    """Every ModalAdapter a test opens is closed by the end of it (its loop thread joined)."""
    yield
    leaked = [th.name for th in threading.enumerate() if th.name == "lifecycle-modal"]
    assert not leaked, f"ModalAdapter loop threads left running: {leaked}"


@pytest.fixture
def fake_modal() -> FakeModal:
    return FakeModal()


@pytest.fixture
def modal_adapter(fake_modal: FakeModal) -> Iterator[ModalAdapter]:
    adapter = ModalAdapter(sdk=fake_modal, clock=ticking_clock(), call_timeout=0.5)
    yield adapter
    adapter.close()
