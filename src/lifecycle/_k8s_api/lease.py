"""A ``coordination.k8s.io/v1`` Lease as the lock of the official client's leader election
(ADR 0160): the ``get``/``create``/``update`` interface of
``kubernetes.leaderelection.resourcelock.configmaplock.ConfigMapLock``, on
``coordination.k8s.io/v1``, so the same lock serves the official ``LeaderElection`` loop and the
library's own (:mod:`lifecycle.leader`).

The one consensus is the API server's compare-and-set: ``update`` replaces the Lease with
the ``resourceVersion`` the last ``get`` read, so of two candidates that read the same Lease
only one write lands (the other is answered 409). Every call is bounded by
``request_timeout`` and answers instead of raising: ``get`` returns ``(False, error)`` with
an error whose ``body`` holds the answer's ``code`` (0 when none came), which is what the
official loop reads.
"""

from __future__ import annotations

import json
import threading
from datetime import UTC, datetime
from typing import Any

from .client import configuration, kubernetes_client, own_client

__all__ = ["LeaseLock", "LockError", "micro_time"]


def micro_time(value: str | datetime) -> str:
    """``value`` as a ``metav1.MicroTime``: UTC, exactly six fractional digits (the API
    server refuses any other spelling). A naive time is the local time (the official loop
    writes ``str(datetime.fromtimestamp(...))``)."""
    moment = datetime.fromisoformat(value) if isinstance(value, str) else value
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


class LockError:
    """Why a ``get`` found no Lease: the API's answer (``code`` 404 means there is none, 0
    that no answer came), in the shape the official loop reads (``body``, ``reason``).

    Args:
        code: the HTTP status; 404: no Lease, 0: no answer came.
        reason: the API's reason, or why no answer came.
    """

    def __init__(self, code: int, reason: str) -> None:
        self.code = code
        self.reason = reason
        self.body = json.dumps({"code": code, "message": reason})

    def __repr__(self) -> str:
        return f"LockError({self.code}, {self.reason!r})"


class LeaseLock:
    """A Lease named ``name`` in ``namespace`` held under ``identity`` (unique per process).

    ``api`` is an ``ApiClient``, a ``CoordinationV1Api``, a ``Configuration`` or ``None``
    (the loaded default configuration); the lock makes its requests on a client of its own
    over a copy of that configuration (the client's retries off). Needs the ``kubernetes`` extra.

    Args:
        name: the Lease's name.
        namespace: the Lease's namespace.
        identity: this process's candidate name, unique per process so a restarted one
            never takes its predecessor's lease for its own (:func:`default_identity`).
        api: an ``ApiClient``, a ``CoordinationV1Api``, a ``Configuration`` or ``None``.
        request_timeout: seconds one request may take: well inside the renew deadline, so a
            hung request cannot outlast the fence.

    Raises:
        ValueError: an empty ``identity`` or a ``request_timeout`` not positive.
    """

    def __init__(
        self,
        name: str,
        namespace: str,
        identity: str,
        *,
        api: Any = None,
        request_timeout: float = 2.0,
    ) -> None:
        if not identity:
            raise ValueError("a lock needs a non-empty identity")
        if request_timeout <= 0:
            raise ValueError(f"request_timeout must be positive, got {request_timeout!r}")
        client = kubernetes_client("a Lease lock")
        from kubernetes.leaderelection.leaderelectionrecord import (  # type: ignore[import-untyped]
            LeaderElectionRecord,
        )

        self._record_type = LeaderElectionRecord
        self.name = name
        self.namespace = namespace
        self.identity = str(identity)
        self.request_timeout = request_timeout
        found = api if isinstance(api, client.Configuration) else configuration(api, "a Lease lock")
        self._api_client = own_client(found)
        self._client = client
        self._guard = threading.Lock()
        #: the Lease the last ``get`` read (its ``resourceVersion`` is the next update's CAS)
        self._read: dict[str, Any] | None = None

    # -- the official lock interface -----------------------------------------------------------
    def get(self, name: str, namespace: str) -> tuple[bool, Any]:
        """``(True, record)`` (``record`` None when the Lease holds none) or ``(False,
        LockError)``.

        Args:
            name: the Lease's name.
            namespace: the Lease's namespace.

        Returns:
            Whether it was read, and the record or the :class:`LockError`.
        """
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        try:
            answer = self._call("GET", path, None)
        except self._client.ApiException as e:
            return False, LockError(int(e.status or 0), str(e.reason or ""))
        except Exception as e:  # no answer: the loop retries, it must not die
            return False, LockError(0, f"{type(e).__name__}: {e}")
        if not isinstance(answer, dict):
            return False, LockError(0, "the answer is not a Lease")
        with self._guard:
            self._read = answer
        spec = answer.get("spec") or {}
        if not spec.get("holderIdentity"):
            return True, None
        record = self._record_type(
            spec.get("holderIdentity"),
            str(spec["leaseDurationSeconds"]) if spec.get("leaseDurationSeconds") else None,
            spec.get("acquireTime"),
            spec.get("renewTime"),
        )
        # any write changes it, whatever the fields (the elector tells states apart by it)
        record.resource_version = (answer.get("metadata") or {}).get("resourceVersion")
        return True, record

    def create(self, name: str, namespace: str, election_record: Any) -> bool:
        """Create the Lease holding ``election_record``; False when it exists or failed.

        Args:
            name: the Lease's name.
            namespace: the Lease's namespace.
            election_record: the holder, lease duration and times to write.

        Returns:
            Whether the Lease was created.
        """
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {"name": name, "namespace": namespace},
            "spec": self._spec(election_record, transitions=0),
        }
        return self._send(
            "POST", f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases", body
        )

    def update(self, name: str, namespace: str, updated_record: Any) -> bool:
        """Replace the Lease read by the last ``get`` with ``updated_record``: False when
        another write came between (409), or the request failed.

        Args:
            name: the Lease's name.
            namespace: the Lease's namespace.
            updated_record: the holder, lease duration and times to write.

        Returns:
            Whether the Lease was replaced; the ``resourceVersion`` read is the compare-and-set.
        """
        with self._guard:
            read = self._read
        if read is None or (read.get("metadata") or {}).get("name") != name:
            return False
        spec = read.get("spec") or {}
        transitions = int(spec.get("leaseTransitions") or 0)
        holder = updated_record.holder_identity or ""
        if holder and holder != (spec.get("holderIdentity") or ""):
            transitions += 1
        body = {
            "apiVersion": "coordination.k8s.io/v1",
            "kind": "Lease",
            "metadata": {
                "name": name,
                "namespace": namespace,
                "resourceVersion": read["metadata"]["resourceVersion"],
            },
            "spec": self._spec(updated_record, transitions=transitions),
        }
        path = f"/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases/{name}"
        return self._send("PUT", path, body)

    # -- helpers ---------------------------------------------------------------------------------
    @staticmethod
    def _spec(record: Any, *, transitions: int) -> dict[str, Any]:
        spec: dict[str, Any] = {"leaseTransitions": transitions}
        if record.holder_identity:
            spec["holderIdentity"] = record.holder_identity
        if record.lease_duration:
            spec["leaseDurationSeconds"] = int(float(record.lease_duration))
        for field, value in (
            ("acquireTime", record.acquire_time),
            ("renewTime", record.renew_time),
        ):
            if value:
                spec[field] = micro_time(value)
        return spec

    def _call(self, method: str, path: str, body: dict[str, Any] | None) -> Any:
        """One request, its answer's JSON (the client's models would parse the times)."""
        response = self._api_client.call_api(
            path,
            method,
            body=body,
            header_params={"Content-Type": "application/json", "Accept": "application/json"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _preload_content=False,
            _request_timeout=self.request_timeout,
        )
        try:
            return json.loads(response.data)
        finally:
            release = getattr(response, "release_conn", None)
            if callable(release):
                release()

    def _send(self, method: str, path: str, body: dict[str, Any]) -> bool:
        try:
            answer = self._call(method, path, body)
        except Exception:  # 409 (someone else wrote first), an error, or no answer
            with self._guard:
                self._read = None  # the next update must read the Lease again
            return False
        with self._guard:
            self._read = answer if isinstance(answer, dict) else None
        return True
