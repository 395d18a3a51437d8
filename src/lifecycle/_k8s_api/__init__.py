"""The Kubernetes API side that the status store (:mod:`lifecycle.stores.kubernetes`) and the
Event emitter (:mod:`lifecycle.emitters.kubernetes`) both stand on, so that neither imports the
other (ADR 0152): the ``kubernetes`` client and its configuration (:mod:`.client`), the bounds
on every request (:mod:`.deadlines`, and :mod:`.pools`, the one module that imports urllib3,
when a client is built), the errors both raise (:mod:`.errors`) and which uids the API server
gave (:mod:`.uids`). It imports only the kernel; nothing here imports the ``kubernetes``
client or urllib3 at import time."""
