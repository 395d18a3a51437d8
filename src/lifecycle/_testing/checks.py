"""The property suite: per-step and end-of-run checks, and the calls that run them."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

import hypothesis
from hypothesis import HealthCheck, given

from .._core.errors import Conflict, LifecycleError
from .._core.machine import Machine
from .._core.observation import Observation
from .._core.refs import EventType, ObjectRef
from .._core.table import SAME, Row
from .._core.transition import Transition, stamp
from ..emitters.memory import MemoryEmitter
from ..machines import MachineRegistry
from ..runner import Outcome, Result, RetryPolicy, Runner
from ..stores.base import Store, fold_from, journal_start
from ..stores.memory import MemoryStore
from .coverage import RowPath, row_paths
from .doubles import FailingEmitter, FaultyStore, InjectFault, Redeliver, Step
from .strategies import Samples, default_ref, scenarios


# -- invariants -------------------------------------------------------------------------------
def assert_flip_only(
    machine: Machine[Any], before: Any, after: Any, transitions: Sequence[Transition]
) -> None:
    """``transitions`` are exactly the flips from ``before`` to ``after``: one for a change of
    the exclusive state (or of the machine's declared flip signature), one per declared verdict
    that flipped to True, and nothing else.

    Args:
        machine: the machine under test.
        before: the status before the observation.
        after: the status after it.
        transitions: what the commit emitted.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    _assert_state_events(machine, before, after, [t for t in transitions if not t.condition])
    _assert_verdict_events(machine, before, after, transitions)


def _assert_state_events(
    machine: Machine[Any], before: Any, after: Any, state_events: list[Transition]
) -> None:
    """One state event for a change of the flip signature, describing it; none without."""
    changed = machine.signature(before) != machine.signature(after)
    for t in state_events:
        if not changed:
            raise AssertionError(
                f"event {t.reason!r} {t.source!r}->{t.target!r} without a state change "
                f"(state stays {after.state!r}; message {before.message!r} -> {after.message!r})"
            )
        if (t.source, t.target, t.reason) != (before.state, after.state, after.reason):
            raise AssertionError(
                f"state event {t.source!r}->{t.target!r} ({t.reason!r}) does not describe "
                f"{before.state!r}->{after.state!r} ({after.reason!r})"
            )
    if changed and len(state_events) != 1:
        raise AssertionError(
            f"state {before.state!r}->{after.state!r} (signature {machine.signature(before)!r}->"
            f"{machine.signature(after)!r}) gave {len(state_events)} state events"
        )


def _assert_verdict_events(
    machine: Machine[Any], before: Any, after: Any, transitions: Sequence[Transition]
) -> None:
    """Each condition event is a declared verdict's flip, and every verdict that became True
    has one."""
    verdicts = {v.condition: v for v in machine.verdicts}
    for t in transitions:
        if not t.condition:
            continue
        verdict = verdicts.get(t.condition)
        if verdict is None:
            raise AssertionError(f"event for undeclared condition {t.condition!r}")
        old, new = verdict.read(before), verdict.read(after)
        was = "" if old is None else old.status
        now = "" if new is None else new.status
        if was == now or (t.source, t.target) != (was, now):
            raise AssertionError(
                f"verdict event {t.condition} {t.source!r}->{t.target!r} but the condition "
                f"went {was!r}->{now!r}"
            )
    for condition, verdict in verdicts.items():
        new = verdict.read(after)
        old = verdict.read(before)
        became_true = (
            new is not None and new.status == "True" and (old is None or old.status != "True")
        )
        if became_true and not any(t.condition == condition for t in transitions):
            raise AssertionError(f"verdict {condition} became True without an event")


def assert_journal_folds(machine: Machine[Any], store: Store, ref: ObjectRef) -> None:
    """The journal holds versions 1..n with no gap, and folding it gives the stored status.

    After retention (a store's ``compact``), the journal starts after the object's snapshot
    and folding starts from the snapshot's status.

    Args:
        machine: the machine under test.
        store: the store that holds the object.
        ref: the object.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    record = store.load(machine, ref)
    entries = store.journal(machine, ref)
    version = 0 if record is None else record.version
    start, base = journal_start(store, machine, ref)
    got = [e.version for e in entries]
    if got != list(range(base + 1, version + 1)):
        raise AssertionError(
            f"{ref}: journal versions {got} after snapshot v{base}, stored version {version}"
        )
    folded = fold_from(machine, start, [e.observation for e in entries])
    stored = machine.initial(ref) if record is None else record.status
    if folded != stored:
        raise AssertionError(f"{ref}: journal folds to {folded!r}, store holds {stored!r}")


_NOT_CLAIMED = re.compile(r"\b(was|were|been|is) (written|persisted|recorded|saved|stored)\b")


class Checker:
    """Runs one scenario against a fresh store, checking every property after every step.

    Use it directly, step by step, or through :func:`check_scenario` / :func:`check_machine`.

    Args:
        machine: the machine under test.
        store: the store the run commits to (wrapped in a :class:`FaultyStore`).
        ref: the object driven; ``None``: :func:`default_ref`.
        attempts: the runner's commit attempts (its retry policy).
    """

    def __init__(
        self,
        machine: Machine[Any],
        store: Store,
        *,
        ref: ObjectRef | None = None,
        attempts: int = 5,
    ) -> None:
        self.machine = machine
        self.ref = ref if ref is not None else default_ref(machine)
        self.store = store
        self.faulty = FaultyStore(store)
        self.sink = MemoryEmitter()
        self.flaky = FailingEmitter(0)
        self.runner = Runner(
            self.faulty,
            [self.flaky, self.sink],
            machines=MachineRegistry([machine]),
            links=(),
            policy=RetryPolicy(attempts=attempts, backoff=0.0),
        )
        #: The write attempts the runner allows this machine (its ``write_attempts`` wins).
        self.attempts = self.runner.policy_for(machine).attempts
        #: What each step did, for the determinism comparison.
        self.trace: list[tuple[object, ...]] = []
        self.committed: dict[str, Transition] = {}
        self.outbox: set[str] = set()
        #: The states the stored status has been in (for coverage and ``hypothesis.target``).
        self.states: set[str] = {self.machine.initial(self.ref).state}
        self._faults: list[str] = []
        self._index = 0

    # -- helpers ----------------------------------------------------------------------------
    def _fail(self, what: str) -> AssertionError:
        return AssertionError(f"{self.machine.name} step {self._index}: {what}")

    def _snapshot(self) -> tuple[Any, int, int]:
        record = self.store.load(self.machine, self.ref)
        status = self.machine.initial(self.ref) if record is None else record.status
        version = 0 if record is None else record.version
        return status, version, len(self.store.journal(self.machine, self.ref))

    def _delivered(
        self, since: int, refused_since: int
    ) -> tuple[list[Transition], list[Transition]]:
        """Events the sink got since ``since`` (transitions and fallbacks, then action
        events); updates the expected outbox."""
        new = [t for t in self.sink.events[since:] if not t.action]
        actions = [t for t in self.sink.events[since:] if t.action]
        refused = {t.id for t in self.flaky.refused[refused_since:] if not t.action}
        for t in new:
            if t.fallback:
                continue
            if t.id in refused:
                self.outbox.add(t.id)
            else:
                self.outbox.discard(t.id)
        return new, actions

    # -- steps ------------------------------------------------------------------------------
    def step(self, step: Step) -> None:
        """Take one scenario step: an observation, an injected fault or a redelivery.

        Args:
            step: the step.

        Raises:
            AssertionError: a property failed; the message says which and where.
        """
        self._index += 1
        if isinstance(step, Observation):
            self.observe(step)
        elif isinstance(step, InjectFault):
            kind = step.kind
            if kind == "emitter-error":
                self.flaky.arm(step.times)
                self.trace.append(("emitter", step.times))
            else:
                self.faulty.inject(self.ref.uid, kind, step.times)
                self._faults.extend([kind] * step.times)
                self.trace.append(("fault", kind, step.times))
        else:
            self.redeliver()

    def observe(self, obs: Observation) -> Result | None:
        """Observe ``obs`` through the runner and check every property against what
        :meth:`~lifecycle.Machine.apply` alone gives.

        Args:
            obs: the observation.

        Returns:
            The runner's result, or ``None`` when it refused the observation.

        Raises:
            AssertionError: a property failed; the message says which and where.
        """
        machine = self.machine
        before, version, journal_len = self._snapshot()
        try:
            expected = machine.apply(before, obs)
        except LifecycleError:
            expected = None
        except Exception as e:
            raise self._fail(f"apply raised {e!r} instead of a LifecycleError") from e
        if expected is not None and machine.apply(before, obs) != expected:
            raise self._fail(f"apply is not deterministic for {obs!r}")
        since, refused_since = len(self.sink.events), len(self.flaky.refused)
        pending = self.faulty.pending_faults(self.ref.uid)
        try:
            result = self.runner.observe(self.ref, obs)
        except LifecycleError as e:
            if expected is not None:
                raise self._fail(f"the runner refused {obs!r} ({e}) but apply accepts it") from e
            if self._snapshot() != (before, version, journal_len):
                raise self._fail(f"refusing {obs!r} changed the store") from e
            if len(self.sink.events) != since or self.faulty.pending_faults(self.ref.uid) != (
                pending
            ):
                raise self._fail(f"refusing {obs!r} emitted or consumed a fault") from e
            self.trace.append(("refused", type(e).__name__, str(e)))
            return None
        if expected is None:
            raise self._fail(f"apply refuses {obs!r} but the runner accepted it")
        row = self._check_table(before, obs, expected)
        if (
            before.state in machine.table.terminal
            and expected.state != before.state
            and not row.recovery
        ):
            raise self._fail(f"left terminal state {before.state!r} for {expected.state!r}")
        events, actions = self._delivered(since, refused_since)
        self._check_actions(before, version, obs, result, actions)
        if expected == before:
            self._check_unchanged(result, version, journal_len, events)
        else:
            self._check_write(before, version, journal_len, expected, obs, result, events)
        self.trace.append(
            (
                result.outcome,
                result.status,
                result.version,
                result.attempts,
                result.transitions,
                result.fallback,
                result.actions,
                None if result.error is None else (type(result.error).__name__, str(result.error)),
            )
        )
        return result

    def redeliver(self) -> int:
        """Redeliver the outbox, as a host does after a crash, and check what was delivered.

        Returns:
            How many transitions were redelivered.

        Raises:
            AssertionError: a property failed; the message says which and where.
        """
        pending = {t.id: t for t in self.store.claim_undelivered()}
        if set(pending) != self.outbox:
            raise self._fail(f"outbox holds {sorted(pending)}, expected {sorted(self.outbox)}")
        since, refused_since = len(self.sink.events), len(self.flaky.refused)
        count = self.runner.redeliver()
        for t in self._delivered(since, refused_since)[0]:
            if t.id not in pending or self.committed.get(t.id) != t:
                raise self._fail(f"redelivered {t.id} which was not committed and queued as is")
        self.trace.append(("redeliver", count))
        return count

    # -- checks -----------------------------------------------------------------------------
    def _check_actions(
        self,
        before: Any,
        version: int,
        obs: Observation,
        result: Result,
        actions: list[Transition],
    ) -> None:
        """Action events (not transitions) are the row's, sent once, whatever the write did."""
        flips = self.machine.actions(before, obs)
        expected = [
            t._replace(action=True)
            for t in stamp(flips, self.ref, self.machine.name, version, obs.at)
        ]
        if list(result.actions) != expected or actions != expected:
            raise self._fail(f"action events {actions}, the row declares {expected}")

    def _check_table(self, before: Any, obs: Observation, after: Any) -> Row:
        row = self.machine.select(before, obs)
        if row.ignore and after != before:
            raise self._fail(f"ignore row ({row.note}) changed the status to {after!r}")
        target = before.state if row.target == SAME else row.target
        if after.state != target:
            raise self._fail(
                f"row {row.sources} x {row.observation.__name__} targets {target!r} "
                f"but the status went to {after.state!r}"
            )
        return row

    def _check_unchanged(
        self, result: Result, version: int, journal_len: int, events: list[Transition]
    ) -> None:
        if result.outcome is not Outcome.UNCHANGED:
            raise self._fail(f"no change, but the outcome is {result.outcome}")
        if events or result.transitions or result.fallback:
            raise self._fail(f"an unchanged status emitted {[t.id for t in events]}")
        if self._snapshot()[1:] != (version, journal_len):
            raise self._fail("an unchanged status was written")

    def _expected_outcome(self) -> tuple[Outcome, int, str]:
        """What the queued faults make of a write: outcome, attempts, error kind."""
        for attempt in range(1, self.attempts + 1):
            if not self._faults:
                return Outcome.COMMITTED, attempt, ""
            if self._faults.pop(0) == "write-error":
                return Outcome.FAILED, attempt, "write-error"
        return Outcome.FAILED, self.attempts, "conflict"

    def _check_write(
        self,
        before: Any,
        version: int,
        journal_len: int,
        after: Any,
        obs: Observation,
        result: Result,
        events: list[Transition],
    ) -> None:
        machine = self.machine
        outcome, attempts, kind = self._expected_outcome()
        if (result.outcome, result.attempts) != (outcome, attempts):
            raise self._fail(
                f"expected {outcome} after {attempts} attempt(s) (faults queued), got "
                f"{result.outcome} after {result.attempts}: {result.error}"
            )
        flips = machine.flips(before, after)
        if result.outcome is Outcome.FAILED:
            declared = machine.select(before, obs).fallback
            self._check_failed(before, version, journal_len, flips, result, events, kind, declared)
            return
        stored, new_version, new_len = self._snapshot()
        if (new_version, new_len) != (version + 1, journal_len + 1) or result.version != (
            new_version
        ):
            raise self._fail(
                f"commit: version {version}->{new_version} (result {result.version}), "
                f"journal {journal_len}->{new_len}"
            )
        if stored != after or result.status != after:
            raise self._fail(f"stored {stored!r}, apply gives {after!r}")
        expected = stamp(flips, self.ref, machine.name, new_version, obs.at)
        if result.transitions != expected:
            raise self._fail(f"events {result.transitions} are not the flips {expected}")
        assert_flip_only(machine, before, after, result.transitions)
        row = machine.select(before, obs)
        for t in result.transitions:
            if not t.condition and row.event is not None and t.type is not row.event:
                raise self._fail(
                    f"{t.reason} is a {t.type.value} event; its row declares {row.event.value}"
                )
        entry = self.store.journal(machine, self.ref)[-1]
        if entry.version != new_version or entry.observation != obs:
            raise self._fail(f"journal entry v{entry.version} {entry.observation!r} is not {obs!r}")
        if entry.transitions != result.transitions:
            raise self._fail(f"journal v{new_version} holds {entry.transitions}")
        if events != list(result.transitions):
            raise self._fail(f"delivered {events}, committed {result.transitions}")
        for t in result.transitions:
            if t.id != f"{self.ref.uid}:{new_version}:{t.n}" or t.id in self.committed:
                raise self._fail(f"event id {t.id!r} is not fresh <uid>:<version>:<n>")
            self.committed[t.id] = t
        self.states.add(after.state)

    def _check_failed(
        self,
        before: Any,
        version: int,
        journal_len: int,
        flips: Sequence[Any],
        result: Result,
        events: list[Transition],
        kind: str,
        declared: bool,
    ) -> None:
        """A failed write changed nothing and emitted nothing, except one fallback Warning
        where the row taken declares ``fallback=True`` and the lost write carried a Warning."""
        if (kind == "conflict") != isinstance(result.error, Conflict):
            raise self._fail(f"expected a {kind} failure, got {result.error!r}")
        if self._snapshot() != (before, version, journal_len):
            raise self._fail("a failed write changed the store")
        if result.transitions or any(not t.fallback for t in events):
            raise self._fail(f"a failed write emitted {[t.id for t in events]}")
        warning = next((f for f in flips if f.type is EventType.WARNING), None)
        if warning is None or not declared:
            if events or result.fallback:
                raise self._fail(
                    "a failed write emitted a fallback, but it carried no Warning flip or its "
                    "row does not declare fallback=True (the next pass redoes it)"
                )
            return
        if len(events) != 1 or list(result.fallback) != events:
            raise self._fail(f"a lost Warning flip gave fallbacks {events}")
        problems = self._fallback_problems(events[0], warning, version, result)
        if problems:
            raise self._fail("fallback Warning: " + "; ".join(problems))

    def _fallback_problems(
        self, fb: Transition, warning: Any, version: int, result: Result
    ) -> list[str]:
        """What is wrong with the fallback Warning ``fb`` a lost ``warning`` flip gave: its
        reason and type, its id, its message (the machine's, naming the cause and the error,
        never claiming the status was written)."""
        problems = []
        if fb.reason != f"{warning.reason}StatusUpdateFailed" or fb.type is not (EventType.WARNING):
            problems.append(f"reason/type {fb.reason}/{fb.type.value}")
        if fb.version != version or fb.id != f"{self.ref.uid}:{version}:f{fb.n}-{fb.reason}":
            problems.append(f"id {fb.id} (last committed version {version})")
        assert result.error is not None  # checked above: a failed write carries its error
        if fb.message != self.machine.fallback_message(self.ref, warning, result.error):
            problems.append(f"message {fb.message!r} is not the machine's fallback_message")
        cause = warning.message or warning.reason
        if type(self.machine).fallback_message is Machine.fallback_message and (
            cause not in fb.message
        ):
            problems.append(f"message {fb.message!r} does not name the cause {cause!r}")
        if str(result.error) not in fb.message:
            problems.append(f"message {fb.message!r} does not name the error {result.error}")
        if _NOT_CLAIMED.search(fb.message):
            problems.append(f"message {fb.message!r} claims the status was written")
        return problems

    def finish(self) -> None:
        """Drain the outbox, then check the journal and what was delivered overall."""
        self.flaky.arm(0)
        self.redeliver()
        if self.store.claim_undelivered():
            raise self._fail("the outbox is not empty after redelivery")
        assert_journal_folds(self.machine, self.store, self.ref)
        journal = {
            t.id: t for e in self.store.journal(self.machine, self.ref) for t in e.transitions
        }
        if journal != self.committed:
            raise self._fail(
                f"journal events {sorted(journal)} differ from committed {sorted(self.committed)}"
            )
        delivered = [t for t in self.sink.events if not t.fallback and not t.action]
        for t in delivered:
            if journal.get(t.id) != t:
                raise self._fail(f"delivered {t!r}, which the journal does not hold")
        missing = set(journal) - {t.id for t in delivered}
        if missing:
            raise self._fail(f"committed events never delivered: {sorted(missing)}")


def check_scenario(
    machine: Machine[Any],
    steps: Sequence[Step],
    *,
    store_factory: Callable[[], Store] = MemoryStore,
    ref: ObjectRef | None = None,
    attempts: int = 5,
) -> Checker:
    """Run ``steps`` twice on fresh stores, checking every property; returns the first run.

    Args:
        machine: the machine under test.
        steps: the scenario.
        store_factory: makes a fresh, empty store for each run (the store under test).
        ref: the object driven; ``None``: :func:`default_ref`.
        attempts: the runner's commit attempts (its retry policy).

    Returns:
        The first run's checker, to inspect what it saw.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    runs: list[Checker] = []
    for _ in range(2):
        store = store_factory()
        try:
            checker = Checker(machine, store, ref=ref, attempts=attempts)
            for step in steps:
                checker.step(step)
            checker.finish()
        finally:
            store.close()
        runs.append(checker)
    first, second = runs
    if first.trace != second.trace or first.sink.events != second.sink.events:
        raise AssertionError(f"{machine.name}: the same scenario gave different results")
    return first


def _describe(row: Row) -> str:
    sources = "|".join(s or '""' for s in row.sources)
    guard = f" [{row.guard_name}]" if row.guard is not None else ""
    return f"{sources} x {row.observation.__name__}{guard} -> {row.target}"


def check_rows(
    machine: Machine[Any],
    *,
    store_factory: Callable[[], Store] = MemoryStore,
    samples: Samples | None = None,
    ref: ObjectRef | None = None,
    attempts: int = 5,
    faults: bool = True,
    require_all_rows: bool = True,
) -> list[RowPath]:
    """Check a shortest path to every row of the table (see :func:`row_paths`).

    With ``faults``, each path is also run with its last write failing (a write error; a
    conflict on every attempt), committing on the last attempt, and with its last delivery
    failing and then redelivered. ``require_all_rows`` fails on rows no path reaches: dead
    rows, or rows that need ``samples`` to be reached.

    Args:
        machine: the machine under test.
        store_factory: makes a fresh, empty store for each run (the store under test).
        samples: values for observation fields, by ``"Class.field"`` or ``"field"``: what
            the guards need to be reached, which random text rarely hits.
        ref: the object driven; ``None``: :func:`default_ref`.
        attempts: the runner's commit attempts (its retry policy).
        faults: also run each path with its last write or delivery failing.
        require_all_rows: fail when a row is reached by no path.

    Returns:
        The paths run, one per row reached.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    found, missing = row_paths(machine, samples=samples, ref=ref)
    budget = Checker(machine, MemoryStore(), ref=ref, attempts=attempts).attempts
    if missing and require_all_rows:
        rows = "; ".join(f"row {i}: {_describe(r)}" for i, r in missing)
        raise AssertionError(
            f"{machine.name}: no observation path reaches {rows} (pass samples= with the "
            "values its guards need, or require_all_rows=False)"
        )
    for path in found:
        *head, last = path.observations
        variants: list[list[Step]] = [[*head, last]]
        if faults:
            variants += [
                [*head, InjectFault("write-error"), last],
                [*head, InjectFault("conflict", budget), last],
                [*head, InjectFault("emitter-error"), last, Redeliver()],
            ]
            if budget > 1:
                variants.append([*head, InjectFault("conflict", budget - 1), last])
        for steps in variants:
            try:
                check_scenario(
                    machine, steps, store_factory=store_factory, ref=ref, attempts=attempts
                )
            except AssertionError as e:
                raise AssertionError(
                    f"row {path.index} ({_describe(path.row)}), steps {steps!r}: {e}"
                ) from e
    return found


def check_machine(
    machine: Machine[Any],
    *,
    store_factory: Callable[[], Store] = MemoryStore,
    samples: Samples | None = None,
    ref: ObjectRef | None = None,
    max_examples: int = 100,
    max_steps: int = 30,
    faults: bool = True,
    attempts: int = 5,
    rows: bool = True,
    require_all_rows: bool = True,
    settings: hypothesis.settings | None = None,
) -> None:
    """Run the whole property suite on ``machine``.

    First (if ``rows``) :func:`check_rows`: a shortest path to every table row, with fault
    variants; then generated scenarios (:func:`scenarios`). Raises ``AssertionError`` with
    the failing (for generated scenarios: the smallest failing) scenario. ``settings``
    replaces the Hypothesis defaults (``max_examples``, no deadline, no example database).

    Args:
        machine: the machine under test.
        store_factory: as for :func:`check_rows`.
        samples: as for :func:`check_rows`.
        ref: as for :func:`check_rows`.
        max_examples: how many scenarios Hypothesis generates.
        max_steps: the longest scenario.
        faults: mix injected faults and redeliveries into the scenarios.
        attempts: the runner's commit attempts (its retry policy).
        rows: run :func:`check_rows` first.
        require_all_rows: fail when a row is reached by no path.
        settings: Hypothesis settings replacing the defaults; ``None``: the defaults.

    Raises:
        AssertionError: a property failed; the message says which and where.
    """
    if rows:
        check_rows(
            machine,
            store_factory=store_factory,
            samples=samples,
            ref=ref,
            attempts=attempts,
            faults=faults,
            require_all_rows=require_all_rows,
        )
    strategy = scenarios(
        machine, samples=samples, ref=ref, max_size=max_steps, faults=faults, attempts=attempts
    )
    chosen = settings or hypothesis.settings(
        max_examples=max_examples,
        deadline=None,
        database=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )

    @chosen
    @given(strategy)
    def run(steps: list[Step]) -> None:
        checker = check_scenario(
            machine, steps, store_factory=store_factory, ref=ref, attempts=attempts
        )
        hypothesis.target(float(len(checker.states)), label="states reached")

    run()
