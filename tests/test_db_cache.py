"""The ``db`` commands open their store without a status cache (a one-shot command would
open a PostgreSQL listener connection and thread for nothing; ADR 0155), unless the URL asks
for one; ``cache_option`` leaves a URL's own ``?cache=`` to win."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from lifecycle.cli import db, main
from lifecycle.stores import cache_option, open_store


@pytest.mark.parametrize(
    ("url", "size", "expected"),
    [
        ("sqlite:///x.db", 0, {"cache": 0}),
        ("sqlite:///x.db?synchronous=NORMAL", 0, {"cache": 0}),
        ("sqlite:///x.db?cache=5", 0, {}),
        ("SQLITE:///x.db?CACHE=5", 0, {}),
        ("postgresql://h/db", 7, {"cache": 7}),
        ("postgres://h/db?cache=0", 7, {}),
        ("postgresql://h/db?sslmode=require#cache=1", 7, {"cache": 7}),
        ("memory://", 0, {}),
    ],
)
def test_a_callers_bound_applies_unless_the_url_sets_its_own(
    url: str, size: int, expected: dict[str, int]
) -> None:
    assert cache_option(url, size) == expected


@pytest.mark.parametrize("command", ["migrate", "check", "compact", "upgrade"])
def test_db_commands_open_an_uncached_store(
    command: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    url = f"sqlite:///{tmp_path / 'x.db'}"
    assert main(["db", "migrate", "--store", url]) == 0
    opened: list[Any] = []

    def spy(target: str, **options: Any) -> Any:
        store = open_store(target, **options)
        opened.append(store)
        return store

    monkeypatch.setattr(db, "open_store", spy)
    main(["db", command, "--store", url])
    assert opened, f"db {command} opened no store"
    assert all(store.cache is None for store in opened)
    opened.clear()
    main(["db", command, "--store", url + "?cache=8"])
    assert all(store.cache is not None for store in opened)
