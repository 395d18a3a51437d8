"""The property suite as a Hypothesis rule-based state machine."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from hypothesis import strategies as st
from hypothesis.stateful import RuleBasedStateMachine, invariant, rule

from .._core.machine import Machine
from .._core.refs import ObjectRef
from ..stores.base import Store
from ..stores.memory import MemoryStore
from .checks import Checker, assert_journal_folds, check_scenario
from .doubles import Step
from .strategies import EPOCH, Samples, _fault_steps, _Vocabulary


def stateful_test(
    machine: Machine[Any],
    *,
    store_factory: Callable[[], Store] = MemoryStore,
    samples: Samples | None = None,
    ref: ObjectRef | None = None,
    attempts: int = 5,
) -> type[RuleBasedStateMachine]:
    """A Hypothesis state machine running :class:`Checker` rule by rule::

        TestMyMachine = stateful_test(MY_MACHINE).TestCase

    At teardown it drains the outbox, checks the journal, and replays the run on a fresh
    store to check determinism.

    Args:
        machine: the machine under test.
        store_factory: makes a fresh, empty store for each run (the store under test).
        samples: values for observation fields, by ``"Class.field"`` or ``"field"``: what the
            guards need to be reached.
        ref: the object driven; ``None``: :func:`default_ref`.
        attempts: the runner's commit attempts (its retry policy).

    Returns:
        The state machine class; its ``TestCase`` is what pytest or unittest runs.
    """
    vocab = _Vocabulary(machine, samples, ref, None, EPOCH)
    fault_steps = _fault_steps(attempts)

    class MachineStateTest(RuleBasedStateMachine):
        def __init__(self) -> None:
            super().__init__()
            self.store = store_factory()
            self.checker = Checker(machine, self.store, ref=vocab.ref, attempts=attempts)
            self.steps: list[Step] = []
            self.at = vocab.start
            self.ok = True

        def _run(self, step: Step) -> None:
            self.ok = False
            self.steps.append(step)
            self.checker.step(step)
            self.ok = True

        @rule(data=st.data())
        def observe(self, data: st.DataObject) -> None:
            status, _, _ = self.checker._snapshot()
            self.at = vocab.advance(data.draw, self.at)
            self._run(vocab.next(data.draw, status.state, self.at))

        @rule(step=fault_steps)
        def disturb(self, step: Step) -> None:
            self._run(step)

        @invariant()
        def journal_folds(self) -> None:
            assert_journal_folds(machine, self.store, self.checker.ref)

        def teardown(self) -> None:
            try:
                if self.ok:
                    self.checker.finish()
            finally:
                self.store.close()
            if self.ok:
                again = check_scenario(
                    machine, self.steps, store_factory=store_factory, ref=ref, attempts=attempts
                )
                if again.trace != self.checker.trace:
                    raise AssertionError(f"{machine.name}: a replay gave different results")

    MachineStateTest.__name__ = MachineStateTest.__qualname__ = f"{type(machine).__name__}StateTest"
    return MachineStateTest
