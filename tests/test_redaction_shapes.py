"""Issue 35, point 9: the last secret shapes, each as a class (ADR 0140).

Each shape is a context with a hole; a Hypothesis property puts any value of its class in the
hole and requires the output to be exactly the context with ``<redacted>`` there -- so the
whole value goes, and nothing around it. Values are drawn from an alphabet holding ``;``,
``,``, ``_`` and the other characters passwords are made of:

- ``.npmrc`` ``_auth=``, ``_authToken=``, ``_password=`` (with or without a registry prefix);
- a Go MySQL DSN ``user:PASS@tcp(host:3306)/db`` (and ``@unix(``, ``@tcp6(``);
- ``redis-cli -a PASS`` (and ``--pass PASS``, ``-u redis://:PASS@host``);
- a Modal token id or secret (``ak-``/``as-`` and 22 random letters, digits and ``_``);
- a password holding ``;`` or ``,`` in ``key=value`` text: the value ends at a space, a
  quote or a bracket, at a ``;`` or ``,`` followed by one of those or the end, or before a
  ``;``/``,`` that starts the next ``key=``.

Ordinary text of the same neighbourhoods (SSH ``SHA256:`` fingerprints, sentences with
commas and semicolons, ``-a`` flags of other commands, pool names with ``_``) is unchanged.
"""

from __future__ import annotations

import base64
import random
import string

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle._core.redact import REDACTED, redact

ALNUM = string.ascii_letters + string.digits
#: What a password may hold here (no space or quote: those end a bare value by design).
PASSWORD = ALNUM + ";,_-.!~*+/:"


def _password(text: str) -> bool:
    """A value of a password's kind: begins and ends with a letter or digit (a trailing
    ``,`` is punctuation), holds a letter and a digit (not a status word or a count), and no
    ``;``/``,`` of it is followed by ``word=`` (that starts the next pair)."""
    if not (text[0] in ALNUM and text[-1] in ALNUM):
        return False
    if not any(c.isdigit() for c in text) or not any(c.isalpha() for c in text):
        return False
    return "=" not in text


passwords = st.text(PASSWORD, min_size=6, max_size=40).filter(_password)
#: A password certain to hold ``;`` and ``,`` (the class of point 9).
punctuated = st.tuples(passwords, passwords, passwords).map(lambda p: f"{p[0]};{p[1]},{p[2]}")

NPMRC = (
    "//registry.npmjs.org/:_auth={}",
    "//npm.example.com/:_authToken={}",
    "//npm.example.com/:_password={}\nemail=ops@example.com",
    "_auth = {}\nalways-auth = true",
)
DSN = (
    'sql.Open("mysql", "app:{}@tcp(db.internal:3306)/orders?parseTime=true")',
    "dsn=root:{}@unix(/var/run/mysqld/mysqld.sock)/app",
    "open app:{}@tcp6([fd00::1]:3306)/db: connection refused",
)
REDIS = (
    "redis-cli -h cache -p 6379 -a {} ping",
    "redis-cli -a {} --no-auth-warning info",
    "redis-cli --pass {} info",
    "redis-cli -u redis://:{}@cache:6379/0 ping",
    "redis-cli -u redis://default:{}@cache:6379 ping",
)
PAIRS = (
    "password={} other=1",
    "connect failed: pwd={},user=app",
    "Server=db;Uid=sa;Pwd={};Encrypt=yes",
    "DB_PASSWORD={}",
    "token={}, retrying",
)


def _exact(context: str, value: str) -> None:
    text = context.replace("{}", value)
    assert redact(text) == context.replace("{}", REDACTED), text


@settings(max_examples=150, deadline=None)
@given(context=st.sampled_from(NPMRC), value=passwords | punctuated)
def test_an_npmrc_credential_is_redacted_whole(context: str, value: str) -> None:
    _exact(context, value)


@settings(max_examples=150, deadline=None)
@given(context=st.sampled_from(DSN), value=passwords | punctuated)
def test_a_go_mysql_dsn_password_is_redacted_whole(context: str, value: str) -> None:
    _exact(context, value)


def test_a_go_mysql_dsn_password_may_hold_at_signs_and_colons() -> None:
    _exact("app:{}@tcp(10.0.0.7)/db", "p@ss:w0rd")


@settings(max_examples=150, deadline=None)
@given(context=st.sampled_from(REDIS), value=passwords | punctuated)
def test_a_redis_cli_password_is_redacted_whole(context: str, value: str) -> None:
    _exact(context, value)


def test_redis_cli_quoted_password_and_a_later_line() -> None:
    assert redact("redis-cli -a 'rd pass 5' ping") == f"redis-cli -a {REDACTED} ping"
    text = "redis-cli -a Rd5pw ping\nls -a /data"
    assert redact(text) == f"redis-cli -a {REDACTED} ping\nls -a /data"


@settings(max_examples=150, deadline=None)
@given(
    prefix=st.sampled_from(["ak-", "as-"]),
    seed=st.integers(0, 2**32),
    underscores=st.integers(1, 4),
    context=st.sampled_from(["Token {} is invalid", "modal token id={}", "auth ({}) refused"]),
)
def test_a_modal_token_with_underscores_is_redacted(
    prefix: str, seed: int, underscores: int, context: str
) -> None:
    source = random.Random(seed)
    body = [source.choice(ALNUM) for _ in range(22)]
    for _ in range(underscores):
        body[source.randrange(1, 21)] = "_"
    token = prefix + "".join(body)
    assert token not in redact(context.replace("{}", token))


@settings(max_examples=200, deadline=None)
@given(context=st.sampled_from(PAIRS), value=punctuated)
def test_a_password_holding_semicolons_and_commas_is_redacted_whole(
    context: str, value: str
) -> None:
    _exact(context, value)


@pytest.mark.parametrize(
    ("text", "kept"),
    [
        ("password=ab;cd,ef other=1", " other=1"),  # the value runs to the space
        ("Pwd=ab;cd;Server=db", ";Server=db"),  # ... or to the next key=
        ("password=ab,cd,db=app", ",db=app"),
        ("password=ab;cd, retrying", ", retrying"),  # a , before a space is punctuation
        ("password=ab;cd;", ";"),  # ... as is one at the end
    ],
)
def test_where_a_bare_value_ends(text: str, kept: str) -> None:
    assert redact(text) == text.split("=", 1)[0] + "=" + REDACTED + kept


# -- ordinary text -----------------------------------------------------------------------------
FINGERPRINT_LINES = (
    "ED25519 key fingerprint is SHA256:{}.",
    "The ECDSA host key for bastion has changed; its fingerprint is SHA256:{}",
    "256 SHA256:{} ops@bastion (ED25519)",
    "Host key SHA256:{} added to known_hosts",
)
WORDS = (
    "retried",
    "3",
    "times",
    "node",
    "drained",
    "gave",
    "up",
    "pool",
    "gpu-a100",
    "waiting",
    "10s",
    "the",
    "ls",
    "-a",
    "/data",
    "tar",
    "as-prod_gpu_cluster",
    "tcp",
    "10.0.0.7:3306",
    "auth_service",
    "retries=3",
    "mode=ro",
)


@settings(max_examples=200, deadline=None)
@given(seed=st.integers(0, 2**32), context=st.sampled_from(FINGERPRINT_LINES))
def test_an_ssh_fingerprint_is_kept(seed: int, context: str) -> None:
    digest = random.Random(seed).randbytes(32)
    text = context.replace("{}", base64.b64encode(digest).decode().rstrip("="))
    assert redact(text) == text


@settings(max_examples=300, deadline=None)
@given(
    words=st.lists(st.sampled_from(WORDS), min_size=1, max_size=12),
    separators=st.lists(st.sampled_from([" ", ", ", "; ", ",", ";", " (", ") "]), min_size=12),
)
def test_sentences_with_commas_and_semicolons_are_kept(
    words: list[str], separators: list[str]
) -> None:
    text = "".join(w + s for w, s in zip(words, separators, strict=False))
    assert redact(text) == text
