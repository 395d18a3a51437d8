"""``lifecycle db check`` on a PostgreSQL store's history (ADR 0163): a history change (an
epoch after the first, a lost write a replica reported) is a finding until an operator
acknowledges it, once; the acknowledgement covers what was shown, never what comes later."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle.stores._pgio import HistoryReport, parse_review, review_statement


def _epoch(seq: int) -> tuple[int, str, str, str, str]:
    return (seq, "" if seq == 1 else f"t{seq}", f"h{seq}", "2026-11-30", "db check")


def _rewind(n: int) -> tuple[str, int, int | None, str, str, str]:
    return (f"u{n}", 3, 1, "t2", "replica", "2026-11-30")


def _acknowledged(report: HistoryReport) -> HistoryReport:
    """What ``--acknowledge`` records, read back the way the store reads it."""
    statement = review_statement("s", report.epochs[-1][0], len(report.rewinds))
    comment = statement.split(" IS ", 1)[1].strip("'")
    return HistoryReport(report.where, report.epochs, report.rewinds, parse_review(comment))


@settings(max_examples=60, deadline=None)
@given(
    epochs=st.integers(1, 5),
    rewinds=st.integers(0, 4),
    more_epochs=st.integers(0, 2),
    more_rewinds=st.integers(0, 2),
)
def test_an_acknowledged_history_passes_and_any_later_change_is_a_finding(
    epochs: int, rewinds: int, more_epochs: int, more_rewinds: int
) -> None:
    report = HistoryReport(
        "db", [_epoch(s) for s in range(1, epochs + 1)], [_rewind(n) for n in range(rewinds)]
    )
    assert report.ok == (epochs == 1 and rewinds == 0)  # reported until acknowledged
    if not report.ok:
        assert any("--acknowledge" in line for line in report.lines())
    reviewed = _acknowledged(report)
    assert reviewed.ok
    later = HistoryReport(
        "db",
        [_epoch(s) for s in range(1, epochs + more_epochs + 1)],
        [_rewind(n) for n in range(rewinds + more_rewinds)],
        reviewed.reviewed,
    )
    assert later.ok == (more_epochs == 0 and more_rewinds == 0)


def test_a_foreign_comment_is_no_review() -> None:
    assert parse_review("the team's own note") is None
    assert parse_review(None) is None
    assert parse_review("lifecycle reviewed: epoch 2, 0 rewind(s)") == (2, 0)
