"""Every ``--store`` option's help names every query parameter the stores read (issue 35): the
help is made from the tables the URL parsers use, so a parameter added to one cannot be
missing from the other."""

from __future__ import annotations

import argparse
import re
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle._store_urls import POSTGRES_PARAMETERS, SQLITE_PARAMETERS
from lifecycle.cli.parsers import build_parser
from lifecycle.stores import InvalidStoreURL, parse_sqlite_url
from lifecycle.stores._pgsql import _OURS, parse_url


def store_options(parser: argparse.ArgumentParser, path: str = "") -> dict[str, str]:
    """The help of every ``--store`` option, by command (``replay``, ``db migrate``, ...)."""
    found: dict[str, str] = {}
    for action in parser._actions:
        if "--store" in action.option_strings:
            found[path.strip()] = str(action.help)
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                found.update(store_options(sub, f"{path} {name}"))
    return found


HELPS = store_options(build_parser())


def listed(text: str, after: str) -> dict[str, str]:
    """The ``name=values`` pairs the help lists after ``after`` (up to the next ``(`` or
    ``;``)."""
    part = text.split(after, 1)[1]
    part = re.split(r" \(|;| and ", part, maxsplit=1)[0]
    return dict(pair.strip().split("=", 1) for pair in part.lstrip("?").split(","))


def test_every_command_with_a_store_has_the_same_help() -> None:
    assert set(HELPS) >= {"replay", "db migrate", "db status", "db compact", "db check"}
    assert len({text.removesuffix(" (default memory://)") for text in HELPS.values()}) == 1


@pytest.mark.parametrize("command", sorted(HELPS))
def test_the_help_lists_every_sqlite_and_postgresql_parameter(command: str) -> None:
    text = " ".join(HELPS[command].split())
    sqlite = listed(text, "sqlite:////PATH absolute) taking ")
    assert sqlite == {name: p.values for name, p in SQLITE_PARAMETERS.items()}
    assert set(sqlite) == {"synchronous", "owner", "lease_seconds", "busy_timeout"} | {
        "group_commit",
        "cache",
    }
    # and cache=N, which open_store and the CLI take out of a PostgreSQL URL (ADR 0155)
    assert listed(text, "/DB taking ") == POSTGRES_PARAMETERS | {"cache": "N"}
    assert set(_OURS) == set(POSTGRES_PARAMETERS)  # what the PostgreSQL URL parser reads


@pytest.mark.parametrize("name", sorted(SQLITE_PARAMETERS))
def test_each_value_the_help_shows_for_an_sqlite_parameter_is_accepted(name: str) -> None:
    values = SQLITE_PARAMETERS[name].values
    examples = {"NAME": ["a"], "S": ["1.5"], "N": ["100"]}.get(values, values.split("|"))
    for value in examples:
        assert parse_sqlite_url(f"sqlite:///x.db?{name}={value}").options[name] is not None


@pytest.mark.parametrize("name", sorted(POSTGRES_PARAMETERS))
def test_each_postgresql_parameter_the_help_shows_is_the_library_s(name: str) -> None:
    value = {"NAME": "other", "S": "7"}[POSTGRES_PARAMETERS[name]]
    target: Any = parse_url(f"postgresql://u@h/db?{name}={value}")
    assert name not in target.conninfo  # taken by the library, not passed to libpq


@given(st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=14))
def test_a_parameter_the_help_does_not_show_is_refused(name: str) -> None:
    url = f"sqlite:///x.db?{name}=1"
    if name in SQLITE_PARAMETERS:
        parse_sqlite_url(url)
    else:
        with pytest.raises(InvalidStoreURL, match="unknown query parameter"):
            parse_sqlite_url(url)
