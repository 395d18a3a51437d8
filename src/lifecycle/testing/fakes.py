"""The test doubles, one name each (ADR 0151): stand-ins for a provider, its SDK, a store and
an emitter, for tests, examples and ``--fake`` runs. None needs an extra to be imported.

- :class:`FakeProvider` (with :class:`FakeSpec`, :class:`FakeInstance`): an in-memory
  provider that implements the provider port and is scripted by the test; :class:`FakeNode`
  plays a virtual node's CreatePod / poll / DeletePod loop with it against a runner.
- :class:`FakeModal`: the part of the ``modal`` SDK the Modal adapter uses
  (``ModalAdapter(sdk=FakeModal())``), its signatures checked against the installed SDK;
  :class:`FakeProbe`, :class:`FakeSandbox`, :class:`SandboxState` and ``FakeModal.exception``
  are its shapes.
- :class:`FakeEC2`: the EC2 client surface the AWS adapter uses
  (``AwsAdapter(client_factory=lambda region: FakeEC2())``), every request and answer
  validated by the installed botocore (the ``aws`` extra, imported when first called).
- :class:`FaultyStore`: wraps a store; the next commits of an object fail on demand.
- :class:`FailingEmitter`: a memory emitter whose next deliveries raise.
"""

from __future__ import annotations

from .._testing.doubles import FailingEmitter, FaultyStore
from .._testing.fake_ec2 import EC2_OPERATIONS, FakeEC2
from .._testing.fake_modal import (
    MODAL_OPERATIONS,
    FakeModal,
    FakeProbe,
    FakeSandbox,
    SandboxState,
)
from .._testing.fake_provider import (
    FakeInstance,
    FakeNode,
    FakeProvider,
    FakeSpec,
    ObservationSink,
)

__all__ = [
    "EC2_OPERATIONS",
    "MODAL_OPERATIONS",
    "FailingEmitter",
    "FakeEC2",
    "FakeInstance",
    "FakeModal",
    "FakeNode",
    "FakeProbe",
    "FakeProvider",
    "FakeSandbox",
    "FakeSpec",
    "FaultyStore",
    "ObservationSink",
    "SandboxState",
]
