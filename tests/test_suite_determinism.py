"""The test suite says the same thing twice and cannot take the machine down (issue 23 item 2,
ADR 0101): ``make test`` runs a derandomized Hypothesis profile, and every test process (and
what it starts) runs under an address-space cap, so a blow-up is a MemoryError in its test.
"""

from __future__ import annotations

import os
import re
import resource
import subprocess
import sys
from pathlib import Path

import hypothesis
import pytest
from hypothesis import given
from hypothesis import strategies as st

from tests.conftest import MEMORY_CAP_MIB, SOAK, memory_cap

ROOT = Path(__file__).parents[1]
#: A fast Hypothesis test of this module, whose examples are printed in verbose mode (the
#: profile's own settings: a soak run does not make it longer).
PROBE = "tests/test_suite_determinism.py::test_probe_sorting_is_idempotent"


@given(st.lists(st.integers() | st.text(max_size=3).map(len)))
def test_probe_sorting_is_idempotent(values: list[int]) -> None:
    assert sorted(sorted(values)) == sorted(values)


def _examples(extra_env: dict[str, str]) -> list[str]:
    env = {k: v for k, v in os.environ.items() if k != "LIFECYCLE_SOAK"}
    env.update(extra_env, PYTHONPATH=os.pathsep.join([str(ROOT / "src"), str(ROOT)]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "pytest",
            PROBE,
            "-q",
            "-s",
            "-p",
            "no:cacheprovider",
            "--hypothesis-verbosity=verbose",
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    blocks = done.stdout.split("Test case:")[1:]
    assert len(blocks) >= 10, "verbose mode printed too few examples"
    # the last block runs on into pytest's summary line (which has the duration)
    blocks[-1] = re.sub(r"\n[.\s]*\d+ passed.*", "", blocks[-1], flags=re.S)
    return blocks


@pytest.mark.skipif(SOAK, reason="the soak run explores at random on purpose")
def test_the_ci_profile_draws_the_same_examples_on_every_run() -> None:
    first = _examples({})
    assert _examples({}) == first


@pytest.mark.skipif(SOAK, reason="the soak run explores at random on purpose")
def test_the_ci_profile_is_in_force() -> None:
    current = hypothesis.settings()  # what a test's own settings(...) inherits
    assert current.derandomize
    assert current.database is None
    assert current.print_blob
    assert current.deadline is None


def test_the_soak_profile_explores_at_random() -> None:
    if SOAK:
        assert not hypothesis.settings().derandomize
    first = _examples({"LIFECYCLE_SOAK": "1"})
    second = _examples({"LIFECYCLE_SOAK": "1"})
    assert first != second


@pytest.mark.skipif(memory_cap() is None, reason="LIFECYCLE_TEST_MEMORY_CAP=0")
def test_this_process_and_its_children_are_capped() -> None:
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    assert soft != resource.RLIM_INFINITY
    assert soft <= MEMORY_CAP_MIB * 2**20
    with pytest.raises(MemoryError):
        bytearray(soft)  # refused at once: nothing is touched
    child = subprocess.run(
        [sys.executable, "-c", "import resource; print(resource.getrlimit(resource.RLIMIT_AS)[0])"],
        capture_output=True,
        text=True,
        check=True,
    )
    assert int(child.stdout) == soft
