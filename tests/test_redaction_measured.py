"""Issue 23, item 4: the redactor measured from outside its own patterns.

- the miss rate on 100 000 generated AWS secret access keys (40 random characters of the
  base64 alphabet, seeded) in realistic contexts: at most 1 in 10 000 (ADR 0108);
- an outside-style corpus of secret shapes not written from the redactor's patterns (URL
  userinfo with raw ``#`` ``/`` ``?`` or a space, command-line flags, key ids glued to a
  word, ...): 0 survivors, through ``redact`` and ``preview``;
- a corpus of ordinary operator text (provider errors, pool and resource names, ARNs,
  paths, image refs): over-redaction at most 1 in 50 texts, and each shape named in the
  issue (``as-prod2025``, ``s3://bucket/path``, ``AuthError``/``AuthFailure``) untouched;
- ``preview`` redacts before it cuts: no cut leaves a half secret;
- redacting any valid observation of any shipped machine never raises (a Hypothesis
  property), and a Restore manifest's ``k8s.imagePullSecrets`` state survives redaction.

``python -m benchmarks.redaction_rates`` prints the same figures.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import attrs
import hypothesis
import pytest
from benchmarks.redaction_rates import (
    AWS_KEYS,
    ORDINARY_TEXT,
    OUTSIDE_SECRETS,
    aws_key_misses,
    over_redacted,
    survivors,
)
from hypothesis import given
from hypothesis import strategies as st

import lifecycle
from lifecycle import ObjectRef, Observation
from lifecycle._core.errors import brief, preview
from lifecycle._core.redact import REDACTED, redact, redact_observation
from lifecycle._testing.hostile import SAMPLES
from lifecycle.machines.restore import GateAFacts, Manifest
from lifecycle.testing import observation_sequences
from lifecycle.trace import TraceRecorder

T0 = datetime(2026, 11, 30, 10, 0, tzinfo=UTC)


# -- AWS secret access keys: the miss rate ----------------------------------------------------
def test_the_miss_rate_on_generated_aws_secret_keys_is_below_one_in_ten_thousand() -> None:
    missed = aws_key_misses(AWS_KEYS, seed=23)
    assert len(missed) <= AWS_KEYS // 10_000, missed[:5]


# -- an outside corpus of secrets --------------------------------------------------------------
@pytest.mark.parametrize("case", OUTSIDE_SECRETS, ids=lambda c: c[0])
def test_outside_secret_shapes_never_survive(case: tuple[str, str, str]) -> None:
    _, text, secret = case
    assert survivors(redact(text), secret) == [], redact(text)
    assert survivors(preview(text, 200), secret) == []
    assert survivors(brief(text, 200), secret) == []


def test_the_outside_corpus_leaves_nothing_in_one_message() -> None:
    text = " | ".join(t for _, t, _ in OUTSIDE_SECRETS)
    clean = redact(text)
    assert [n for n, _, s in OUTSIDE_SECRETS if survivors(clean, s)] == []


# -- ordinary operator text --------------------------------------------------------------------
@pytest.mark.parametrize(
    "text",
    [
        "node pool as-prod2025 has no free capacity",
        "could not read s3://ml-artifacts/ResNet50Weights2025/checkpoint-0042.pt",
        "gs://trainingBucket01/logs/Experiment42Results/ is empty",
        "AuthError: Token missing. Run `modal token new` to authenticate.",
        "AuthFailure: AWS was not able to validate the provided access credentials",
        "Token: expired",
        "tests pass: 3 of 3",
    ],
)
def test_the_texts_the_issue_names_are_kept_whole(text: str) -> None:
    assert redact(text) == text


def test_over_redaction_of_ordinary_operator_text_is_bounded() -> None:
    changed = over_redacted(ORDINARY_TEXT)
    assert len(changed) * 50 <= len(ORDINARY_TEXT), changed


# -- preview: redact, then cut ------------------------------------------------------------------
@hypothesis.settings(max_examples=200, deadline=None, database=None)
@given(
    case=st.sampled_from(OUTSIDE_SECRETS),
    pad=st.integers(0, 3000),
    limit=st.integers(20, 300),
    wrap=st.sampled_from(["str", "list", "dict", "error"]),
)
def test_a_preview_never_shows_part_of_a_secret(
    case: tuple[str, str, str], pad: int, limit: int, wrap: str
) -> None:
    _, text, secret = case
    value: Any = "x " * (pad // 2) + text + " " + "y" * pad
    if wrap == "list":
        value = [1, value]
    elif wrap == "dict":
        value = {"detail": value}
    elif wrap == "error":
        value = ValueError(value)
    for shown in (preview(value, limit), brief(value, limit)):
        assert len(shown) <= limit
        # no 8 characters of the secret in a row (half a key is a leak too)
        assert not any(secret[i : i + 8] in shown for i in range(max(len(secret) - 7, 1)))


# -- redaction of a valid observation never raises ---------------------------------------------
def test_a_restore_manifest_naming_image_pull_secrets_is_redacted_without_error() -> None:
    manifest = Manifest(
        schema_version=1, facts={"k8s.imagePullSecrets": "recorded", "password": "recorded"}
    )
    obs = GateAFacts(at=T0, manifest=manifest, cpu_arch="amd64", kernel_version="6.1")
    clean = redact_observation(obs)
    assert clean.manifest.facts == {"k8s.imagePullSecrets": "recorded", "password": "recorded"}
    recorder = TraceRecorder()
    recorder.record(ObjectRef("RestoreAttempt", "ml", "r", "r-1"), obs)
    assert "imagePullSecrets" in recorder.text()


def test_a_secret_under_a_validated_secret_key_is_still_redacted() -> None:
    token = "ghp_" + "a1B2" * 9
    manifest = Manifest(schema_version=1, facts={"token": f"unavailable:{token}"})
    obs = GateAFacts(at=T0, manifest=manifest, cpu_arch="amd64", kernel_version="6.1")
    clean = redact_observation(obs)
    assert token not in repr(clean)
    assert clean.manifest.facts["token"].startswith("unavailable:")


@attrs.frozen(slots=True, kw_only=True)
class Strict(Observation):
    """A host's observation whose validator refuses the placeholder itself."""

    password: str = attrs.field(validator=attrs.validators.matches_re(r"[a-z0-9]+"))


def test_a_validator_refusing_the_placeholder_does_not_keep_the_secret() -> None:
    clean = redact_observation(Strict(at=T0, password="hunter2"))
    assert clean.password == REDACTED


#: Facts a manifest may hold under secret-named keys, with the states the validator allows.
SECRET_SAMPLES = {
    **SAMPLES,
    "Manifest.facts": (
        *SAMPLES["Manifest.facts"],  # type: ignore[misc]
        {"k8s.imagePullSecrets": "recorded"},
        {"secrets": "unavailable:Forbidden", "token": "recorded", "password": "recorded"},
    ),
}
REGISTRY = lifecycle.default_registry()


@pytest.mark.parametrize("name", sorted(REGISTRY))
def test_redacting_any_valid_observation_never_raises(name: str) -> None:
    machine = REGISTRY[name]

    @hypothesis.settings(
        max_examples=30,
        deadline=None,
        database=None,
        suppress_health_check=list(hypothesis.HealthCheck),
    )
    @given(observation_sequences(machine, samples=SECRET_SAMPLES, max_size=6))
    def run(steps: list[Any]) -> None:
        recorder = TraceRecorder()
        ref = ObjectRef(machine.kind, "ml", "x", "x-1")
        for obs in steps:
            clean = redact_observation(obs)
            assert type(clean) is type(obs)
            assert redact_observation(clean) == clean  # idempotent
            recorder.record(ref, obs)

    run()
