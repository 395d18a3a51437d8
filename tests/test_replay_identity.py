"""``lifecycle replay`` and the identity rule: a trace line whose uid a store already holds for
another object (another kind, namespace or name -- or the uid a link derives for its target)
is refused by the dry run, before anything is written: exit 2, ``FILE:LINE: ...``."""

from __future__ import annotations

import io
import json
import sqlite3
from pathlib import Path
from typing import Any

import pytest

from lifecycle.cli import main

AT = "2026-11-30T10:00:{:02d}Z"


def pod_line(second: int, uid: str, name: str = "trainer-0", namespace: str = "ml") -> str:
    return json.dumps(
        {
            "at": AT.format(second),
            "machine": "pod",
            "object": {"namespace": namespace, "name": name, "uid": uid},
            "observe": "CreateRequested",
        }
    )


def job_line(second: int, uid: str, name: str = "trainer-0") -> str:
    return json.dumps(
        {
            "at": AT.format(second),
            "machine": "job",
            "object": {"namespace": "ml", "name": name, "uid": uid},
            "observe": "Submitted",
            "with": {"nodes": ["gpu-1"]},
        }
    )


def trace(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def dump(db: Path) -> list[Any]:
    """Every row of every table, to compare a store before and after a refused replay."""
    with sqlite3.connect(db) as conn:
        return list(conn.iterdump())


def replay(path: Path, store: str) -> int:
    return main(["replay", str(path), "--store", store], out=io.StringIO())


@pytest.fixture
def stored(tmp_path: Path) -> Path:
    """An SQLite store holding Pod ml/trainer-0 (uid u1) and Pod ml/squatter (uid sq-claim,
    the uid Pod sq's NodeClaim would have)."""
    db = tmp_path / "store.db"
    seed = trace(
        tmp_path,
        "seed.jsonl",
        pod_line(0, "u1"),
        pod_line(0, "sq-claim", name="squatter"),
    )
    assert replay(seed, f"sqlite:///{db}") == 0
    return db


@pytest.mark.parametrize(
    "bad",
    [
        job_line(5, "u1"),  # another kind (the case: Job lines with a Pod's uid)
        pod_line(5, "u1", name="impostor"),  # another name
        pod_line(5, "u1", namespace="other"),  # another namespace
        pod_line(5, "sq"),  # its NodeClaim's uid (sq-claim) is another object's
    ],
    ids=["another-kind", "another-name", "another-namespace", "linked-target"],
)
def test_replay_refuses_a_stored_uid_for_another_object(
    tmp_path: Path, stored: Path, bad: str, capsys: pytest.CaptureFixture[str]
) -> None:
    path = trace(
        tmp_path,
        "bad.jsonl",
        "# fine lines first, then the impostor on line 4",
        pod_line(1, "u2", name="trainer-2"),
        job_line(2, "j1", name="bench"),
        bad,
    )
    before = dump(stored)
    capsys.readouterr()
    assert replay(path, f"sqlite:///{stored}") == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:4: "), err
    assert "a uid names one object" in err
    assert "Traceback" not in err
    assert len(err.splitlines()) == 1
    assert dump(stored) == before  # nothing written: not even the fine lines before it


def test_the_identity_rule_keeps_the_stored_pod_whole(tmp_path: Path, stored: Path) -> None:
    """What the issue saw: after a refused Job replay the Pod still loads in its state and
    its journal folds."""
    from lifecycle import ObjectRef, SQLiteStore
    from lifecycle.machines import POD
    from lifecycle.testing import assert_journal_folds

    assert replay(trace(tmp_path, "job.jsonl", job_line(5, "u1")), f"sqlite:///{stored}") == 2
    store = SQLiteStore(stored)
    ref = ObjectRef("Pod", "ml", "trainer-0", "u1")
    record = store.load(POD, ref)
    assert record is not None
    assert record.status.state != ""
    assert_journal_folds(POD, store, ref)
    store.close()


@pytest.mark.parametrize(
    "second",
    [job_line(1, "u1"), pod_line(1, "u1", name="other"), pod_line(1, "u1", namespace="x")],
    ids=["another-kind", "another-name", "another-namespace"],
)
@pytest.mark.parametrize("store", ["memory://", "new-sqlite"])
def test_one_trace_may_not_give_one_uid_to_two_objects(
    tmp_path: Path, second: str, store: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """Within one trace, even on memory:// (no dry run there) and on a new SQLite file
    (which is then not created)."""
    path = trace(tmp_path, "two.jsonl", pod_line(0, "u1"), second)
    url = store if store == "memory://" else f"sqlite:///{tmp_path / 'new.db'}"
    capsys.readouterr()
    assert replay(path, url) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"{path}:2: "), err
    assert not (tmp_path / "new.db").exists()
