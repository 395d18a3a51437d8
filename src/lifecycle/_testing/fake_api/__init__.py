"""The validating fake Kubernetes API server behind :class:`lifecycle.testing.FakeApiServer`:
:mod:`.server` (HTTP on loopback, Events), :mod:`.objects` (objects and their status
subresource), :mod:`.schema` (decoding and validation as the API server does it)."""
