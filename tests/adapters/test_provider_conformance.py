"""Every shipped provider passes the provider conformance check
(:func:`lifecycle.testing.check_provider`): the fake, the Modal adapter (sync and asyncio) over
the shipped ``FakeModal``, and the AWS adapter over the shipped ``FakeEC2`` (over a moto server:
``tests/adapters/test_aws_moto.py``). And the check itself fails a provider that breaks a
promise, naming it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from datetime import datetime
from typing import Any

import pytest

from lifecycle import ObjectRef
from lifecycle.adapters import (
    AsyncProvider,
    PollOutcome,
    Provider,
    ProvisionOutcome,
    TerminateOutcome,
    Tracked,
)
from lifecycle.adapters.aws import AwsAdapter, FleetSpec
from lifecycle.adapters.modal import AsyncModalAdapter, ModalAdapter, SandboxSpec
from lifecycle.machines.pod import (
    InstanceAbsent,
    InstanceFailed,
    InstanceUnknown,
    ProvisionSucceeded,
    TerminateFailed,
)
from lifecycle.testing import check_async_provider, check_provider
from lifecycle.testing.fakes import FakeEC2, FakeModal, FakeProvider, FakeSpec

from .conftest import fleet

SANDBOX = SandboxSpec(image="python:3.12-slim", command=("sleep", "infinity"))


# -- the shipped providers ---------------------------------------------------------------------
def fail_fake(provider: FakeProvider, call: str, message: str) -> None:
    script = {
        "provision": provider.error_next_provision,
        "observe": provider.fail_next_list,
        "terminate": provider.fail_next_terminate,
    }
    script[call](message)


@pytest.mark.parametrize(
    "options",
    [{}, {"boot_ticks": 2}, {"reserved": False}, {"start_pending": False, "probe": False}],
)
def test_the_fake_provider_conforms(options: dict[str, Any]) -> None:
    check_provider(lambda: FakeProvider(**options), FakeSpec(), fail_next=fail_fake)


def fail_modal(sdk: FakeModal, call: str, message: str) -> None:
    """Provision and observe start with ``Sandbox.list``; terminate by id ends with
    ``Sandbox.terminate``."""
    operation = "Sandbox.terminate" if call == "terminate" else "Sandbox.list"
    sdk.fail(operation, FakeModal.exception.ServiceError(message))


def test_the_modal_adapter_conforms() -> None:
    def make() -> ModalAdapter:
        return ModalAdapter(sdk=FakeModal(), call_timeout=0.5)

    check_provider(
        make,
        SANDBOX,
        fail_next=lambda adapter, call, message: fail_modal(adapter.core.sdk, call, message),
    )


def test_the_asyncio_modal_adapter_conforms() -> None:
    def make() -> AsyncModalAdapter:
        return AsyncModalAdapter(sdk=FakeModal(), call_timeout=0.5)

    check_async_provider(
        make,
        SANDBOX,
        fail_next=lambda adapter, call, message: fail_modal(adapter.sdk, call, message),
    )


def test_the_modal_adapter_conforms_while_the_list_lags_a_create() -> None:
    """The SDK's list may not show a new sandbox yet: adopting by name keeps provision
    idempotent, and a lookup by id keeps observe answering for the pod's own sandbox."""

    def make() -> ModalAdapter:
        return ModalAdapter(sdk=FakeModal(list_lags=True), call_timeout=0.5)

    check_provider(make, SANDBOX)


def fail_ec2(adapter: AwsAdapter, call: str, message: str) -> None:
    """Provision and observe start with ``describe_instances``; terminate by id is one
    ``terminate_instances``."""
    method = "terminate_instances" if call == "terminate" else "describe_instances"
    adapter.client("us-east-1").fail(method, "InternalError", message)  # type: ignore[attr-defined]


def boot_ec2(adapter: AwsAdapter, instance_id: str) -> None:
    """The instance passes both status checks (EC2 launches it pending)."""
    adapter.client("us-east-1").boot(instance_id)  # type: ignore[attr-defined]


@pytest.mark.parametrize("capacity", ["on-demand", "spot"])
def test_the_aws_adapter_conforms(capacity: str) -> None:
    def make() -> AwsAdapter:
        ec2 = FakeEC2("us-east-1")
        return AwsAdapter(client_factory=lambda region: ec2)

    spec = FleetSpec(
        region="us-east-1",
        instance_types=("g5.xlarge", "g6.xlarge"),
        subnet_ids=("subnet-a",),
        launch_template_name="gpu-node",
        capacity_type=capacity,
    )
    check_provider(make, spec, settle=boot_ec2, fail_next=fail_ec2)


def test_the_providers_satisfy_the_port_statically() -> None:
    """mypy checks these assignments: each implementation is the port for its spec type."""
    fake: Provider[FakeSpec] = FakeProvider()
    aws: Provider[FleetSpec] = AwsAdapter(client_factory=lambda region: FakeEC2(region))
    core: AsyncProvider[SandboxSpec] = AsyncModalAdapter(sdk=FakeModal())
    with ModalAdapter(sdk=FakeModal()) as modal:
        sync: Provider[SandboxSpec] = modal
        assert {p.name for p in (fake, aws, core, sync)} == {"fake", "aws", "modal"}


# -- the check fails what breaks a promise -----------------------------------------------------
class Broken(FakeProvider):
    """The fake, with one promise broken (``breaks``)."""

    def __init__(self, breaks: str) -> None:
        super().__init__()
        self.breaks = breaks

    def provision(
        self,
        ref: ObjectRef,
        spec: FakeSpec = FakeSpec(),  # noqa: B008 - frozen, as the fake's own default
        *,
        attempt: int = 0,
        at: datetime | None = None,
    ) -> ProvisionOutcome:
        out = super().provision(ref, spec, attempt=attempt, at=at)
        if self.breaks == "duplicates" and isinstance(out, ProvisionSucceeded):
            self._by_claim.pop(self.claim(ref))  # forgets the claim: the next call makes another
        if self.breaks == "raises" and ref.name == "pod-b":
            raise RuntimeError("boom")
        return out

    def observe(
        self, pods: Mapping[ObjectRef, Tracked[FakeSpec]], *, at: datetime | None = None
    ) -> dict[ObjectRef, PollOutcome]:
        seen = super().observe(pods, at=at)
        if self.breaks == "absent-on-error":  # upstream's bug: a failed List read as "gone"
            return {
                r: InstanceAbsent(at=o.at) if isinstance(o, InstanceUnknown) else o
                for r, o in seen.items()
            }
        if self.breaks == "extra":
            seen[ObjectRef("Pod", "x", "stranger", "x")] = InstanceAbsent(at=self.clock())
        if self.breaks == "huge-exit":
            return {
                r: InstanceFailed(
                    at=o.at, instance_id=getattr(o, "instance_id", ""), exit_code=2**70
                )
                for r, o in seen.items()
            }
        return seen

    def terminate(
        self, ref: ObjectRef, pod: Tracked[FakeSpec], *, at: datetime | None = None
    ) -> TerminateOutcome:
        if self.breaks == "unknown-id" and pod.instance_id not in self._instances:
            return TerminateFailed(at=at or self.clock(), error="no such instance")
        out = super().terminate(ref, pod, at=at)
        if self.breaks == "leaks-secrets" and isinstance(out, TerminateFailed):
            return TerminateFailed(at=out.at, error=self.last_error)
        return out

    def fail_next_terminate(self, error: str = "", times: int = 1) -> None:
        self.last_error = error
        super().fail_next_terminate(error, times)


@pytest.mark.parametrize(
    ("breaks", "problem"),
    [
        ("duplicates", "provision is idempotent by claim"),
        ("raises", "provision\\(Pod/conformance/pod-b\\) raised RuntimeError: 'boom'"),
        ("extra", "observe must answer for exactly the pods asked"),
        ("huge-exit", "the Pod machine refused InstanceFailed"),
        ("unknown-id", "terminate is idempotent"),
        ("absent-on-error", "a failing observe is InstanceUnknown \\(never absent\\)"),
        ("leaks-secrets", "a terminate failure is redacted"),
    ],
)
def test_the_check_names_a_broken_promise(breaks: str, problem: str) -> None:
    with pytest.raises(AssertionError, match=f"provider conformance: {problem}"):
        check_provider(lambda: Broken(breaks), FakeSpec(), fail_next=fail_fake)


def test_the_check_closes_what_it_made() -> None:
    closed: list[str] = []

    class Closing(FakeProvider):
        def close(self) -> None:
            closed.append("closed")

    check_provider(Closing, FakeSpec())
    with pytest.raises(AssertionError):
        check_provider(lambda: type("X", (Closing, Broken), {})("raises"), FakeSpec())
    assert closed == ["closed", "closed"]


@pytest.mark.parametrize("attempt", [-1, True, 1.5])
def test_a_bad_attempt_is_a_value_error_before_any_provider_call(attempt: Any) -> None:
    """``attempt`` is the host's count of deliberate re-creates: every provider refuses one that
    is not a non-negative int, as a ``ValueError``, and calls nothing."""
    fake = FakeProvider()
    sdk = FakeModal()
    ec2 = FakeEC2("us-east-1")
    aws = AwsAdapter(client_factory=lambda region: ec2)
    ref = ObjectRef("Pod", "ml", "a", "uid-a")
    with ModalAdapter(sdk=sdk) as modal:
        calls: list[Callable[[], object]] = [
            lambda: fake.provision(ref, FakeSpec(), attempt=attempt),
            lambda: modal.provision(ref, SANDBOX, attempt=attempt),
            lambda: aws.provision(ref, fleet(), attempt=attempt),
        ]
        for call in calls:
            with pytest.raises(ValueError, match="attempt must be a non-negative int"):
                call()
    assert (fake.calls, sdk.calls, ec2.calls) == ([], [], [])
