"""The one place the kernel turns generated source into functions (ADR 0015).

Hot paths (a machine's step per state and observation type, a row's default effect, status
copies, observation builders and validators) are compiled once from source the kernel writes.
Every such function comes from :func:`compile_function`, which files its source under a
readable name such as ``<lifecycle generated pod.step[Provisioning,ProvisionSucceeded]>`` and
registers it with :mod:`linecache`, as attrs does for its own ``__init__``: tracebacks and
profiles name it, and :func:`inspect.getsource` shows it.

Each generated function has a plain-Python counterpart next to its generator that says what it
does; the tests hold the generated one to it (``tests/test_fast_paths.py``).
"""

from __future__ import annotations

import linecache
import threading
from collections.abc import Callable
from typing import Any

#: The prefix of every generated source's file name.
PREFIX = "<lifecycle generated "

_lock = threading.Lock()
#: (owner, source) -> its file name; owner -> how many sources bear its name.
_files: dict[tuple[str, str], str] = {}
_owners: dict[str, int] = {}


def filename(owner: str, source: str) -> str:
    """The linecache file name of ``source``: ``<lifecycle generated OWNER>``, then
    ``<lifecycle generated OWNER #2>`` and so on for other sources of the same owner (the same
    source keeps its name, so compiling a machine again adds nothing)."""
    name = _files.get((owner, source))
    if name is None:
        n = _owners[owner] = _owners.get(owner, 0) + 1
        name = _files[(owner, source)] = f"{PREFIX}{owner}{'' if n == 1 else f' #{n}'}>"
    return name


def compile_function(
    name: str, source: str, namespace: dict[str, Any], *, owner: str
) -> Callable[..., Any]:
    """Run ``source`` in ``namespace`` and return the function it defines as ``name``.

    ``source`` may define helpers beside ``name`` (they share its file). ``owner`` says what
    the function is for; it names the source in tracebacks, profiles and
    :func:`inspect.getsource`. Only names in ``namespace`` are visible to the code."""
    if not source.endswith("\n"):
        source += "\n"
    with _lock:
        file = filename(owner, source)
        code = compile(source, file, "exec")
        # An entry without a modification time is kept by ``linecache.checkcache``.
        linecache.cache[file] = (len(source), None, source.splitlines(keepends=True), file)
    exec(code, namespace)  # the only exec of the library: see the module docstring
    function: Callable[..., Any] = namespace[name]
    return function
