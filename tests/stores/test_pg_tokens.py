"""Commit tokens (ADR 0157): what resolves a PostgreSQL commit whose connection was lost is a
per-process random prefix and a counter -- no system call per commit -- so they must stay
unique within a process, across threads, and across processes forked from one another."""

from __future__ import annotations

import os
import threading

import pytest

from lifecycle.stores._pgsql import commit_token


def test_tokens_are_unique_within_a_process_and_across_threads() -> None:
    found: list[list[str]] = [[] for _ in range(4)]

    def draw(into: list[str]) -> None:
        into.extend(commit_token() for _ in range(5000))

    threads = [threading.Thread(target=draw, args=(into,)) for into in found]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    every = [token for tokens in found for token in tokens]
    assert len(set(every)) == len(every) == 20_000


@pytest.mark.skipif(not hasattr(os, "fork"), reason="os.fork")
def test_a_forked_child_draws_its_own_prefix() -> None:
    """A child forked after the parent drew tokens must not repeat the parent's next ones
    (same prefix, same counter): it draws a prefix of its own."""
    commit_token()
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child
        os.close(read)
        os.write(write, " ".join(commit_token() for _ in range(3)).encode())
        os._exit(0)
    os.close(write)
    with os.fdopen(read) as pipe:
        child = pipe.read().split()
    os.waitpid(pid, 0)
    parent = [commit_token() for _ in range(3)]
    assert len(child) == 3
    assert not set(child) & set(parent)
    assert child[0][:16] != parent[0][:16]  # another prefix, not just another count
