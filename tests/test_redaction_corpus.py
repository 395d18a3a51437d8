"""Issue 13, "secrets never leave the process": a corpus of secret shapes, each through every
sink -- the redactor itself, nested values, the LogEmitter, Kubernetes Event notes, trace
recorders, the fallback Warning, and the AWS, Modal and fake adapters down to the SQLite
journal -- with 0 survivors; plus Hypothesis properties (a secret anywhere in random text is
never in the output; ordinary text is never touched), structure preservation, and a bound
on the time redaction takes on a megabyte of adversarial text.

Every secret here is a made-up value of the right shape (``rng`` below), never a real one.
"""

from __future__ import annotations

import base64
import json
import logging
import random
import sqlite3
import string
import time
import uuid
from collections.abc import Callable, Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NamedTuple

import attrs
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lifecycle import EventType, ObjectRef, Observation, Runner, StoreError, Transition
from lifecycle._core.redact import REDACTED, is_secret_key, redact, redact_observation, scrub
from lifecycle.adapters.recording import RedactingRecorder, TraceFileRecorder
from lifecycle.emitters.kubernetes import (
    KubernetesEmitter,
    ManualClock,
    MemoryEventSink,
    ObjectReference,
    build_event,
)
from lifecycle.emitters.log import LogEmitter
from lifecycle.emitters.memory import MemoryEmitter
from lifecycle.machines import pod
from lifecycle.stores import MemoryStore
from lifecycle.stores.sqlite import SQLiteStore
from lifecycle.testing.fakes import FakeNode, FakeProvider
from lifecycle.trace import TraceRecorder

from .fallback_machines import with_fallback_pod

EPOCH = datetime(2026, 11, 30, 10, 0, 0, tzinfo=UTC)
POD = ObjectRef("Pod", "ml", "trainer-0", "pod-a")

rng = random.Random(13)
B62 = string.ascii_letters + string.digits
B64 = B62 + "+/"
URLSAFE = B62 + "-_"
HEX = "0123456789abcdef"


def r(alphabet: str, n: int) -> str:
    """``n`` random characters of ``alphabet`` (seeded: the corpus is the same every run)."""
    return "".join(rng.choice(alphabet) for _ in range(n))


def b64(n: int) -> str:
    return base64.b64encode(rng.randbytes(n)).decode()


def jwt() -> str:
    head = base64.urlsafe_b64encode(b'{"alg":"RS256","typ":"JWT"}').rstrip(b"=").decode()
    body = base64.urlsafe_b64encode(b'{"sub":"system:serviceaccount:ml:runner"}').decode()
    return f"{head}.{body.rstrip('=')}.{r(URLSAFE, 86)}"


def pem(kind: str = "RSA PRIVATE KEY", newline: str = "\n") -> tuple[str, list[str]]:
    lines = [b64(48) for _ in range(5)]
    body = newline.join(lines)
    return f"-----BEGIN {kind}-----{newline}{body}{newline}-----END {kind}-----", lines


class Shape(NamedTuple):
    """One corpus entry: a text as a provider might write it, and the secrets inside it."""

    name: str
    text: str
    secrets: tuple[str, ...]


def shape(name: str, text: str, *secrets: str) -> Shape:
    if not secrets or not all(s in text for s in secrets):
        raise ValueError(f"corpus entry {name}: each secret must be in its text")
    return Shape(name, text, secrets)


AWS_SECRET = r(B64, 40)
SESSION = "IQoJb3JpZ2luX2VjE" + b64(300)
PW = "Sup3r-S3cret!"
RSA, RSA_LINES = pem()
OPENSSH, OPENSSH_LINES = pem("OPENSSH PRIVATE KEY")
ESCAPED, ESCAPED_LINES = pem("PRIVATE KEY", "\\n")
ENCRYPTED_BODY = [b64(48) for _ in range(3)]
ENCRYPTED = (
    "-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,"
    + r(HEX, 32).upper()
    + "\n\n"
    + "\n".join(ENCRYPTED_BODY)
    + "\n-----END RSA PRIVATE KEY-----"
)
TRUNCATED_BODY = b64(60)
GH = "ghp_" + r(B62, 36)
GHO = "gho_" + r(B62, 36)
GHPAT = "github_pat_11" + r(B62, 20) + "_" + r(B62, 59)
GLPAT = "glpat-" + r(URLSAFE, 20)
SLACK_BOT = "xoxb-" + r(string.digits, 12) + "-" + r(string.digits, 13) + "-" + r(B62, 24)
SLACK_USER = "xoxp-" + r(string.digits, 12) + "-" + r(string.digits, 12) + "-" + r(B62, 32)
SLACK_APP = "xapp-1-" + r(B62, 11) + "-" + r(string.digits, 13) + "-" + r(HEX, 64)
OPENAI = "sk-proj-" + r(URLSAFE, 120)
OPENAI_LEGACY = "sk-" + r(B62, 48)
ANTHROPIC = "sk-ant-api03-" + r(URLSAFE, 93) + "AA"
STRIPE = "sk_live_" + r(B62, 24)
STRIPE_RESTRICTED = "rk_live_" + r(B62, 24)
STRIPE_WEBHOOK = "whsec_" + r(B62, 32)
HF = "hf_" + r(B62, 34)
GOOGLE = "AIza" + r(URLSAFE, 35)
GOOGLE_OAUTH = "ya29." + r(URLSAFE, 120)
GOOGLE_CLIENT = "GOCSPX-" + r(URLSAFE, 28)
NPM = "npm_" + r(B62, 36)
PYPI = "pypi-AgEIcHlwaS5vcmc" + r(URLSAFE, 60)
SENDGRID = "SG." + r(URLSAFE, 22) + "." + r(URLSAFE, 43)
TWILIO = "SK" + r(HEX, 32)
AZURE_AD = r(B62, 3) + "8Q~" + r(URLSAFE + ".~", 34)
AZURE_KEY = b64(64)
MODAL_ID = "ak-" + r(B62, 22)
MODAL_SECRET = "as-" + r(B62, 22)
AKIA = "AKIA" + r(string.ascii_uppercase + "234567", 16)
ASIA = "ASIA" + r(string.ascii_uppercase + "234567", 16)
JWT = jwt()
SIG = r(HEX, 64)
NPM_AUTH = b64(24)
NPM_TOKEN = str(uuid.UUID(int=rng.getrandbits(128), version=4))
MODAL_UNDERSCORE = "as-" + r(B62, 9) + "_" + r(B62, 12)
MODAL_ID_UNDERSCORE = "ak-" + r(B62, 14) + "_" + r(B62, 7)
FINGERPRINT = base64.b64encode(rng.randbytes(32)).decode().rstrip("=")

CORPUS: tuple[Shape, ...] = (
    # -- URL userinfo ------------------------------------------------------------------------
    shape("postgres-userinfo", f"could not connect to postgresql://admin:{PW}@db:5432/app", PW),
    shape("https-userinfo", f"GET https://deploy:{PW}@registry.example.com/v2/ failed", PW),
    shape("redis-no-user", f"redis://:{PW}@cache.internal:6379/0 refused", PW),
    shape("amqp-userinfo", f"amqp://guest:{PW}@rabbit//", PW),
    shape("mongodb-encoded", "mongodb+srv://u:p%40ss%3Aword9@cluster0.example.net/", "p%40ss"),
    shape("userinfo-with-at", "postgresql://u:p@ssw0rd@host/db", "p@ssw0rd"),
    shape("env-database-url", f"DATABASE_URL=postgres://app:{PW}@10.0.0.5/app", PW),
    # -- AWS ---------------------------------------------------------------------------------
    shape("aws-key-id", f"AWS was not able to validate {AKIA}", AKIA),
    shape("aws-temporary-key-id", f"temporary key {ASIA} expired", ASIA),
    shape("aws-secret-standalone", f"credentials {AKIA} {AWS_SECRET} rejected", AWS_SECRET),
    shape("aws-secret-example", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
    shape("aws-session-token", f"session {SESSION} expired", SESSION[:40], SESSION[-40:]),
    shape("aws-env", f"aws_secret_access_key = {AWS_SECRET}", AWS_SECRET),
    shape("amz-security-token-header", f"X-Amz-Security-Token: {SESSION}", SESSION[:40]),
    shape(
        "presigned-s3",
        f"GET https://b.s3.amazonaws.com/k?X-Amz-Algorithm=AWS4-HMAC-SHA256&X-Amz-Credential="
        f"{AKIA}%2F20261130%2Fus-east-1%2Fs3%2Faws4_request&X-Amz-Signature={SIG}"
        f"&X-Amz-Security-Token={SESSION[:60]}",
        AKIA,
        SIG,
        SESSION[:60],
    ),
    shape(
        "sigv4-authorization",
        f"Authorization: AWS4-HMAC-SHA256 Credential={AKIA}/20261130/us-east-1/ec2/aws4_request, "
        f"SignedHeaders=host;x-amz-date, Signature={SIG}",
        AKIA,
        SIG,
    ),
    # -- tokens by vendor prefix ---------------------------------------------------------------
    shape("jwt-bare", f"token {JWT} is expired", JWT.split(".")[1], JWT.split(".")[2]),
    shape("github-ghp", f"remote: {GH} lacks scope", GH),
    shape("github-gho", f"oauth {GHO}", GHO),
    shape("github-pat", f"using {GHPAT}", GHPAT),
    shape("github-in-url", f"https://x-access-token:{GH}@github.com/o/r.git", GH),
    shape("gitlab-pat", f"PRIVATE-TOKEN: {GLPAT}", GLPAT),
    shape("gitlab-bare", f"pat {GLPAT} revoked", GLPAT),
    shape("slack-bot", f"slack said invalid_auth for {SLACK_BOT}", SLACK_BOT),
    shape("slack-user", f"{SLACK_USER}", SLACK_USER),
    shape("slack-app", f"app token {SLACK_APP}", SLACK_APP),
    shape("openai-project", f"Incorrect API key provided: {OPENAI}", OPENAI),
    shape("openai-legacy", f"key {OPENAI_LEGACY}.", OPENAI_LEGACY),
    shape("anthropic", f"x-api-key {ANTHROPIC} invalid", ANTHROPIC),
    shape("stripe-secret", f"No such key: {STRIPE}", STRIPE),
    shape("stripe-restricted", f"{STRIPE_RESTRICTED}", STRIPE_RESTRICTED),
    shape("stripe-webhook", f"signing secret {STRIPE_WEBHOOK}", STRIPE_WEBHOOK),
    shape("huggingface", f"401 for {HF}", HF),
    shape("google-api-key", f"API key not valid: {GOOGLE}", GOOGLE),
    shape("google-oauth", f"Bearer-less {GOOGLE_OAUTH}", GOOGLE_OAUTH),
    shape("google-client-secret", f"{GOOGLE_CLIENT}", GOOGLE_CLIENT),
    shape("npm", f"//registry.npmjs.org/:_authToken={NPM}", NPM),
    shape("npm-bare", f"npm token {NPM}", NPM),
    shape("pypi", f"upload with {PYPI} failed", PYPI),
    shape("sendgrid", f"sendgrid {SENDGRID}", SENDGRID),
    shape("twilio-api-key", f"twilio {TWILIO} unauthorized", TWILIO),
    shape("azure-ad-client-secret", f"AADSTS7000215: bad secret {AZURE_AD}", AZURE_AD),
    shape(
        "azure-connection-string",
        f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={AZURE_KEY};"
        "EndpointSuffix=core.windows.net",
        AZURE_KEY,
    ),
    shape("azure-sas", f"https://a.blob.core.windows.net/c?sv=2022-11-02&sig={SIG}%3D", SIG),
    shape("azure-key-standalone", f"key {AZURE_KEY}", AZURE_KEY),
    shape("modal-token-id", f"token {MODAL_ID} is invalid", MODAL_ID),
    shape("modal-token-secret", f"{MODAL_ID}:{MODAL_SECRET}", MODAL_ID, MODAL_SECRET),
    # -- private keys ---------------------------------------------------------------------------
    shape("pem-rsa", f"key file:\n{RSA}\n", *RSA_LINES),
    shape("pem-openssh", OPENSSH, *OPENSSH_LINES),
    shape("pem-encrypted", ENCRYPTED, *ENCRYPTED_BODY),
    shape("pem-json-escaped", f'{{"private_key": "{ESCAPED}\\n"}}', *ESCAPED_LINES),
    shape("pem-bare-escaped", ESCAPED, *ESCAPED_LINES),
    shape(
        "pem-truncated",
        f"-----BEGIN EC PRIVATE KEY-----\n{TRUNCATED_BODY}",
        TRUNCATED_BODY[:30],
    ),
    # -- key = value pairs ----------------------------------------------------------------------
    shape("password-eq", f"login failed password={PW}", PW),
    shape("passwd", "passwd=hunter2x", "hunter2x"),
    shape("pwd", "Server=db;Uid=sa;Pwd=hunter2x;Database=app", "hunter2x"),
    shape("pass", "pass=hunter2x", "hunter2x"),
    shape("private-key-eq", "private_key=abcd1234efgh", "abcd1234efgh"),
    shape("credentials-plural", "credentials=abcd1234efgh", "abcd1234efgh"),
    shape("secrets-plural", "secrets=abcd1234efgh", "abcd1234efgh"),
    shape("tokens-plural", "tokens=abcd1234efgh,ijkl5678mnop", "abcd1234efgh"),
    shape("api-key", "api_key: abcd1234efgh", "abcd1234efgh"),
    shape("apikey", "apikey=abcd1234efgh", "abcd1234efgh"),
    shape("client-secret", "client_secret=abcd1234efgh&grant_type=x", "abcd1234efgh"),
    shape("env-upper", "DB_PASSWORD=hunter2x PGPASSWORD=hunter3y", "hunter2x", "hunter3y"),
    shape("camel", "accessToken=abcd1234efgh refreshToken=ijkl5678mnop", "abcd1234efgh"),
    shape("passphrase", "passphrase: correcthorse9", "correcthorse9"),
    shape("after-semicolon", "host=db;user=admin;password=hunter2x;", "hunter2x"),
    shape("after-comma", "user=admin,password=hunter2x,db=app", "hunter2x"),
    shape("after-space", "host=db user=admin password=hunter2x dbname=app", "hunter2x"),
    shape("yaml", "auth:\n  password: hunter2x\n", "hunter2x"),
    shape("json", '{"user": "admin", "password": "hunter2x"}', "hunter2x"),
    shape("json-spaces", '{"password": "correct horse; battery, staple"}', "correct horse"),
    shape("json-escaped", json.dumps(json.dumps({"password": "hunter2x"})), "hunter2x"),
    shape("python-repr", "{'password': 'hunter2x', 'user': 'a'}", "hunter2x"),
    shape("url-encoded", "next=%2Flogin%3Fuser%3Dbob%26password%3Dhunter2x%26x%3D1", "hunter2x"),
    shape("url-encoded-json", "q=%7B%22password%22%3A%22hunter2x%22%7D", "hunter2x"),
    shape("cli-flag", "exec: psql --password hunter2x --host db", "hunter2x"),
    shape("cli-flag-eq", "modal token set --token-secret=hunter2x", "hunter2x"),
    shape("cli-token", "gh auth login --token abcd1234efgh", "abcd1234efgh"),
    shape(
        "query-token", "connect to https://sb.modal.run/?token=tok_live_42x failed", "tok_live_42x"
    ),
    # -- headers --------------------------------------------------------------------------------
    shape("bearer", f"Authorization: Bearer {JWT}", JWT.split(".")[1]),
    shape("bearer-bare", "sent Bearer abcd1234efgh5678", "abcd1234efgh5678"),
    shape("authorization-token", "Authorization: token abcd1234efgh", "abcd1234efgh"),
    shape("basic", "Authorization: Basic YWRtaW46aHVudGVyMng=", "YWRtaW46aHVudGVyMng"),
    shape("basic-bare", "using Basic YWRtaW46aHVudGVyMng=", "YWRtaW46aHVudGVyMng"),
    shape("proxy-authorization", "Proxy-Authorization: Basic dXNlcjpwYXNz", "dXNlcjpwYXNz"),
    shape("cookie", "Cookie: theme=dark; session=abcd1234efgh; csrf=x9", "abcd1234efgh"),
    shape("set-cookie", "Set-Cookie: sid=abcd1234efgh; Path=/; HttpOnly", "abcd1234efgh"),
    shape("x-api-key", "X-Api-Key: abcd1234efgh", "abcd1234efgh"),
    shape("docker-auth", '{"auths": {"r.io": {"auth": "dXNlcjpwYXNz"}}}', "dXNlcjpwYXNz"),
    shape("headers-repr", "headers={'Authorization': 'Bearer abcd1234efgh'}", "abcd1234efgh"),
    # -- issue 35: the last shapes ---------------------------------------------------------------
    shape("npmrc-auth", f"//registry.npmjs.org/:_auth={NPM_AUTH}", NPM_AUTH),
    shape("npmrc-auth-bare", f"_auth = {NPM_AUTH}\nalways-auth = true", NPM_AUTH),
    shape("npmrc-auth-token", f"//npm.example.com/:_authToken={NPM_TOKEN}", NPM_TOKEN),
    shape("npmrc-password", f"//npm.example.com/:_password={NPM_AUTH}", NPM_AUTH),
    shape(
        "go-mysql-dsn-tcp",
        'sql.Open("mysql", "app:Zq7;w,x_9@tcp(db.internal:3306)/orders?parseTime=true")',
        "Zq7",
        ";w,x_9",
    ),
    shape("go-mysql-dsn-unix", f"dsn=root:{PW}@unix(/var/run/mysqld/mysqld.sock)/app", PW),
    shape("go-mysql-dsn-at-sign", "app:p@ss:w0rd@tcp(10.0.0.7)/db", "p@ss:w0rd"),
    shape("redis-cli-a", "redis-cli -h cache -p 6379 -a Rd5;pw,x ping", "Rd5;pw,x"),
    shape("redis-cli-a-quoted", "redis-cli -a 'rd pass 5' --no-auth-warning info", "rd pass 5"),
    shape("redis-cli-pass", "redis-cli --pass Rd5pw-x info", "Rd5pw-x"),
    shape("redis-cli-url", "redis-cli -u redis://:Rd5pw-x@cache:6379/0 ping", "Rd5pw-x"),
    shape("redis-cli-url-user", "redis-cli -u redis://default:Rd5pw-x@cache:6379", "Rd5pw-x"),
    shape("modal-secret-underscore", f"Token {MODAL_UNDERSCORE} is invalid", MODAL_UNDERSCORE),
    shape("modal-id-underscore", f"token id {MODAL_ID_UNDERSCORE} unknown", MODAL_ID_UNDERSCORE),
    shape("kv-semicolon-comma", "password=Ab3;cd,ef9 other=1", "Ab3", "cd,ef9"),
    shape("kv-comma-then-key", "connect failed: pwd=Ab3,cd;ef9,user=app", "Ab3", "cd;ef9"),
    shape("kv-env-semicolons", "DB_PASSWORD=Qx7;yW2;z9Q exported", "Qx7", "yW2", "z9Q"),
)

#: Text that is not secret and must come out unchanged.
ORDINARY = (
    "InsufficientInstanceCapacity: We currently do not have sufficient p5.48xlarge capacity",
    "InsufficientFreeAddressesInSubnet: subnet-0abc1234 has no free addresses",
    "Sandbox.get_tags timed out after 10s",
    "region eu-west-1 could not be listed: EndpointConnectionError",
    "instance i-0abc123def4567890 is running at ec2-3-80-1-2.compute-1.amazonaws.com",
    "arn:aws:ec2:us-east-1:123456789012:instance/i-0abc123def4567890",
    "image nvcr.io/nvidia/pytorch@sha256:" + "0123456789abcdef" * 4,
    "pod ml/trainer-0 uid 3f2c9a8e-1b7d-4c55-9e0f-8a6b2d1c4e7f at 2026-11-30T10:00:00+00:00",
    "sandbox sb-5KjsW4mLBlZ0Lp8vvQtXoD exited with code 137",
    "commit 0123456789abcdef0123456789abcdef01234567 deployed",
    'Password authentication failed for user "admin"',
    "token expired; refresh and retry",
    "max_tokens=4096 token_type=bearer tokens_per_second=31.5 secret_name=db-creds",
    "basic checks passed, 3 of 3",
    "sqlite:///q.db?mode=ro",
    "postgresql://admin@db:5432/app?sslmode=require",
    "https://example.com:8443/path/to/thing",
    "spot instance reclaimed (Server.SpotInstanceTermination)",
    "status checks of i-1: RequestLimitExceeded: slow down",
    "auth: UnauthorizedOperation [spot]: You are not authorized to perform this operation.",
    # issue 35: an SSH host key's fingerprint is a public key's hash, not a secret
    f"ED25519 key fingerprint is SHA256:{FINGERPRINT}.",
    f"256 SHA256:{FINGERPRINT} ops@bastion (ED25519)",
    "retried 3 times, waited 10s; gave up, node drained",
    "token=, password=; nothing was set",
    "ls -a /data; tar -a -cf out.tar.gz logs",
    "node pool as-prod_gpu_cluster drained",
    "dial tcp 10.0.0.7:3306: connect: connection refused",
)


def survivors(text: str) -> list[str]:
    """The corpus secrets still present in ``text``, by shape name."""
    return [s.name for s in CORPUS for secret in s.secrets if secret in text]


def at(seconds: float = 0) -> datetime:
    return EPOCH + timedelta(seconds=seconds)


# -- the redactor ------------------------------------------------------------------------------
@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_redact_leaves_no_secret(case: Shape) -> None:
    clean = redact(case.text)
    assert [s for s in case.secrets if s in clean] == []
    assert "<redacted" in clean
    assert redact(clean) == clean  # idempotent


@pytest.mark.parametrize("text", ORDINARY)
def test_ordinary_text_is_unchanged(text: str) -> None:
    assert redact(text) is text


def test_the_whole_corpus_in_one_message_leaves_no_secret() -> None:
    text = " | ".join(c.text for c in CORPUS)
    assert survivors(redact(text)) == []


def test_a_url_keeps_everything_but_its_password() -> None:
    assert redact("postgresql://admin:pw@db:5432/app?sslmode=require&password=x") == (
        "postgresql://admin:<redacted>@db:5432/app?sslmode=require&password=<redacted>"
    )


@pytest.mark.parametrize(
    ("key", "secret"),
    [
        ("password", True),
        ("DB_PASSWORD", True),
        ("aws_secret_access_key", True),
        ("X-Amz-Security-Token", True),
        ("privateKey", True),
        ("x-functions-key", True),
        ("Ocp-Apim-Subscription-Key", True),
        ("tokens", True),
        ("sig", True),
        ("pwd", True),
        ("token_type", False),
        ("max_tokens", False),
        ("tokens_per_second", False),
        ("secret_name", False),
        ("password_file", False),
        ("key", False),
        ("instance_id", False),
        ("bypass", False),
    ],
)
def test_which_keys_name_a_secret(key: str, secret: bool) -> None:
    assert is_secret_key(key) is secret


# -- nested values and structure ---------------------------------------------------------------
@attrs.frozen(slots=True, kw_only=True)
class Seen(Observation):
    """An observation with nested values, as a host's own machine might define one."""

    detail: str = ""
    notes: tuple[str, ...] = ()
    facts: dict[str, Any] = attrs.field(factory=dict)
    tags: frozenset[str] = frozenset()
    token: str = ""
    count: int = 0


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_nested_values_leave_no_secret(case: Shape) -> None:
    obs = Seen(
        at=at(),
        detail=case.text,
        notes=("fine", case.text),
        facts={"headers": {"X": case.text}, "lines": [case.text, 3], case.text: "as a key"},
        tags=frozenset({case.text, "gpu"}),
        count=2,
    )
    clean = redact_observation(obs)
    assert [s for s in case.secrets if s in repr(clean)] == []
    assert (type(clean), len(clean.notes), clean.count) == (Seen, 2, 2)
    assert clean.notes[0] == "fine"
    assert len(clean.facts) == 3
    assert len(clean.facts["lines"]) == 2
    assert clean.facts["lines"][1] == 3
    assert len(clean.tags) == 2
    assert "gpu" in clean.tags


def test_distinct_keys_stay_distinct() -> None:
    """``token=K1`` and ``token=K2`` used to become one key; now each keeps its own place."""
    value = {"token=K1aaaaaa": 1, "token=K2bbbbbb": 2, "plain": 3}
    clean = scrub(value)
    assert len(clean) == 3
    assert sorted(clean.values()) == [1, 2, 3]
    assert not any("K1" in k or "K2" in k for k in clean)
    assert clean["plain"] == 3
    keys = {f"{GH[:-1]}{c}": c for c in "AB"}  # keys that are secrets themselves
    clean_keys = scrub(keys)
    assert len(clean_keys) == 2
    assert not any(GH[:10] in k for k in clean_keys)
    tags = scrub(frozenset({"token=K1aaaaaa", "token=K2bbbbbb"}))
    assert len(tags) == 2
    assert not any("K1" in s or "K2" in s for s in tags)


def test_values_under_a_secret_key_are_replaced_whole_and_keep_their_types() -> None:
    value = {"password": "hunter2", "tokens": ["a", "b", ""], "pin": 1234, "token_type": "x"}
    assert scrub(value) == {
        "password": REDACTED,
        "tokens": [REDACTED, REDACTED, ""],
        "pin": 1234,
        "token_type": "x",
    }
    clean = redact_observation(Seen(at=at(), token="abc", count=1))
    assert (clean.token, clean.count) == (REDACTED, 1)


def test_nothing_to_redact_is_the_same_object() -> None:
    obs = Seen(at=at(), detail="fine", facts={"a": ["b"]}, tags=frozenset({"c"}))
    assert redact_observation(obs) is obs


# -- every sink --------------------------------------------------------------------------------
def transition(message: str, *, fallback: bool = False) -> Transition:
    return Transition(
        POD, "pod", "Running", "Failed", "Failed", EventType.WARNING, message, 3, at()
    )._replace(fallback=fallback)


def logged(records: list[logging.LogRecord]) -> str:
    """Everything a handler could print or read of ``records``: messages and fields."""
    return repr([(r.getMessage(), getattr(r, "lifecycle", None)) for r in records])


def test_log_emitter_output_has_no_secret(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="lifecycle"):
        emitter = LogEmitter()
        for case in CORPUS:
            emitter.emit(transition(case.text))
    assert len(caplog.records) == len(CORPUS)
    assert survivors(logged(caplog.records)) == []


def test_kubernetes_event_notes_have_no_secret() -> None:
    sink = MemoryEventSink()
    clock = ManualClock(EPOCH)
    with KubernetesEmitter(sink, clock=clock, timers=False, hostname="h") as emitter:
        for i, case in enumerate(CORPUS):
            emitter.emit(transition(case.text)._replace(version=i + 1, reason=f"Failed{i}"))
            emitter.record(
                ObjectReference(kind="Pod", name="trainer-0", namespace="ml", uid="pod-a"),
                "Warning",
                f"HostNote{i}",
                case.text,
                controller="host-controller",
            )
        assert emitter.flush(10)
    bodies = json.dumps([body for _, _, body in sink.calls])
    assert len(sink.calls) >= 2 * len(CORPUS)
    assert survivors(bodies) == []
    regarding = ObjectReference(kind="Pod", name="p", namespace="ml", uid="u")
    for case in CORPUS:  # a long note is redacted before it is cut to 1024 bytes
        note = "x" * 1000 + " " + case.text
        event = build_event(
            regarding,
            type="Normal",
            reason="R",
            note=note,
            reporting_controller="c",
            reporting_instance="c-h",
            now=EPOCH,
        )
        assert [s for s in case.secrets if s[:24] in event.note] == []


def test_traces_have_no_secret(tmp_path: Path) -> None:
    path = tmp_path / "trace.jsonl"
    kernel = TraceRecorder()
    inner = TraceRecorder()
    with TraceFileRecorder(path) as recorder:
        for i, case in enumerate(CORPUS):
            obs = pod.InstanceUnknown(at=at(i), error=case.text)
            recorder.record(POD, obs)
            kernel.record(POD, obs)
            RedactingRecorder(inner).record(POD, obs)
    for text in (path.read_text(), kernel.text(), inner.text()):
        assert survivors(text) == []


class LeakyStore(MemoryStore):
    """A store whose writes fail, after ``ok`` successful ones, with ``error`` as the text of
    the :class:`StoreError` (a driver quoting the connection string, say)."""

    def __init__(self, error: str, ok: int) -> None:
        super().__init__()
        self.error, self.ok = error, ok

    def commit(self, *args: Any, **kwargs: Any) -> int:
        if self.ok <= 0:
            raise StoreError(self.error)
        self.ok -= 1
        return super().commit(*args, **kwargs)


@pytest.mark.parametrize("case", CORPUS, ids=lambda c: c.name)
def test_the_fallback_warning_has_no_secret(case: Shape, caplog: pytest.LogCaptureFixture) -> None:
    store = LeakyStore(f"could not write ({case.text})", ok=4)  # each step writes pod + claim
    memory = MemoryEmitter()
    with caplog.at_level(logging.INFO, logger="lifecycle"):
        runner = Runner(store, [memory, LogEmitter()], machines=with_fallback_pod())
        runner.observe(POD, pod.CreateRequested(at=at(0)))
        runner.observe(POD, pod.ProvisionSucceeded(at=at(1), reserved=True, instance_id="i-1"))
        result = runner.observe(POD, pod.InstanceFailed(at=at(2), exit_code=1))
    assert result.fallback, "a lost Warning flip sends a fallback Warning"
    assert [s for s in case.secrets if s in result.fallback[0].message] == []
    assert [s for s in case.secrets if s in repr(memory.events)] == []
    emitted = [r for r in caplog.records if r.name == "lifecycle.transitions"]
    assert emitted
    assert [s for s in case.secrets if s in logged(caplog.records)] == []


def journal_text(db: Path) -> str:
    """Every row of every table of the SQLite store at ``db``, as text."""
    with sqlite3.connect(db) as conn:
        return "\n".join(conn.iterdump())


@pytest.fixture
def sqlite_runner(tmp_path: Path) -> Iterator[tuple[Runner, Path]]:
    db = tmp_path / "store.db"
    store = SQLiteStore(db)
    yield Runner(store, [MemoryEmitter()]), db
    store.close()


def test_an_aws_client_error_reaches_the_journal_redacted(
    sqlite_runner: tuple[Runner, Path],
) -> None:
    boto3 = pytest.importorskip("boto3")
    from botocore.stub import Stubber

    from lifecycle.adapters.aws import CLAIM_TAG_KEY, LIVE_STATES, AwsAdapter, FleetSpec

    runner, db = sqlite_runner
    session = boto3.session.Session(aws_access_key_id="testing", aws_secret_access_key="testing")
    client = session.client("ec2", region_name="us-east-1", endpoint_url="http://127.0.0.1:9")
    spec = FleetSpec(
        region="us-east-1",
        instance_types=("g5.xlarge",),
        subnet_ids=("subnet-1",),
        launch_template_id="lt-0123456789abcdef0",
    )
    adapter = AwsAdapter(client_factory=lambda region: client, clock=lambda: at(1))
    seen = []
    with Stubber(client) as stubber:
        for i, case in enumerate(CORPUS):
            ref = ObjectRef("Pod", "ml", f"p-{i}", f"uid-{i}")
            stubber.add_client_error(
                "describe_instances",
                "AuthFailure",
                f"AWS was not able to validate the provided credentials: {case.text}",
                401,
                expected_params={
                    "Filters": [
                        {"Name": f"tag:{CLAIM_TAG_KEY}", "Values": [f"ml-p-{i}"]},
                        {"Name": "instance-state-name", "Values": list(LIVE_STATES)},
                    ],
                    "MaxResults": 1000,
                },
            )
            runner.observe(ref, pod.CreateRequested(at=at(0)))
            obs = adapter.provision(ref, spec)
            seen.append(repr(obs))
            runner.observe(ref, obs)
    assert all("AuthFailure" in s for s in seen)
    assert survivors("\n".join(seen)) == []
    assert survivors(journal_text(db)) == []


def test_a_modal_error_reaches_the_journal_redacted(sqlite_runner: tuple[Runner, Path]) -> None:
    exception = pytest.importorskip("modal.exception")
    from lifecycle.adapters.modal import ModalAdapter, SandboxSpec
    from lifecycle.testing.fakes import FakeModal

    runner, db = sqlite_runner
    fake = FakeModal()
    seen = []
    with ModalAdapter(sdk=fake) as adapter:
        for i, case in enumerate(CORPUS):
            ref = ObjectRef("Pod", "ml", f"p-{i}", f"uid-{i}")
            fake.fail("Sandbox.list", exception.AuthError(f"bad token: {case.text}"))
            runner.observe(ref, pod.CreateRequested(at=at(0)))
            obs = adapter.provision(ref, SandboxSpec(image="x"))
            seen.append(repr(obs))
            runner.observe(ref, obs)
    assert all("AuthError" in s for s in seen)
    assert survivors("\n".join(seen)) == []
    assert survivors(journal_text(db)) == []


def test_the_fake_provider_reaches_the_journal_redacted(
    sqlite_runner: tuple[Runner, Path], tmp_path: Path
) -> None:
    runner, db = sqlite_runner
    provider = FakeProvider()
    with TraceFileRecorder(tmp_path / "t.jsonl") as recorder:
        node = FakeNode(provider, runner, recorder=recorder)
        for i, case in enumerate(CORPUS):
            ref = ObjectRef("Pod", "ml", f"p-{i}", f"uid-{i}")
            provider.error_next_provision(f"fake: {case.text}")
            node.create_pod(ref, at(0))
        provider.fail_next_list(f"fake: {CORPUS[0].text}")
        node.poll(at(1))
    assert survivors(journal_text(db)) == []
    assert survivors((tmp_path / "t.jsonl").read_text()) == []


# -- properties --------------------------------------------------------------------------------
SAFE_TEXT = st.text(alphabet=string.ascii_letters + string.digits + " .,:;-_()", max_size=40)
SEPARATORS = st.sampled_from([" ", "\n", "\t", ", ", "; ", ": ", " (", "[", '"', "'", "|", "="])


@settings(max_examples=300, deadline=None)
@given(
    case=st.sampled_from(CORPUS),
    before=SAFE_TEXT,
    after=SAFE_TEXT,
    left=SEPARATORS,
    right=SEPARATORS,
)
def test_a_secret_anywhere_in_random_text_never_survives(
    case: Shape, before: str, after: str, left: str, right: str
) -> None:
    text = f"{before}{left}{case.text}{right}{after}"
    clean = redact(text)
    assert [s for s in case.secrets if s in clean] == []


def _uid(r: random.Random) -> str:
    return str(uuid.UUID(int=r.getrandbits(128), version=4))


ORDINARY_TOKENS: list[Callable[[random.Random], str]] = [
    lambda r: r.choice(["pod", "Running", "failed", "capacity", "node", "the", "GPU", "retry"]),
    _uid,
    lambda r: "i-0" + "".join(r.choice(HEX) for _ in range(16)),
    lambda r: "-".join(
        "".join(r.choice(string.ascii_lowercase + string.digits) for _ in range(r.randint(1, 9)))
        for _ in range(r.randint(1, 5))
    ),
    lambda r: (EPOCH + timedelta(seconds=r.randint(0, 10**8))).isoformat(),
    lambda r: "sha256:" + "".join(r.choice(HEX) for _ in range(64)),
    lambda r: str(r.randint(0, 10**12)),
    lambda r: f"10.{r.randint(0, 255)}.{r.randint(0, 255)}.{r.randint(0, 255)}",
    lambda r: "sb-" + "".join(r.choice(B62) for _ in range(22)),
    lambda r: f"arn:aws:ec2:us-east-1:{r.randint(10**11, 10**12 - 1)}:instance/i-0abc",
]


@settings(max_examples=300, deadline=None)
@given(
    seed=st.integers(0, 2**32),
    picks=st.lists(st.integers(0, len(ORDINARY_TOKENS) - 1), min_size=1, max_size=12),
    separators=st.lists(st.sampled_from([" ", ", ", "; ", " (", ") ", "/", "\n"]), min_size=12),
)
def test_ordinary_text_is_never_redacted(
    seed: int, picks: list[int], separators: list[str]
) -> None:
    source = random.Random(seed)
    parts = [ORDINARY_TOKENS[i](source) for i in picks]
    text = "".join(p + s for p, s in zip(parts, separators, strict=False))
    assert redact(text) == text


# -- bounded time ------------------------------------------------------------------------------
MB = 1_000_000
# Each builder makes about n characters of one shape built to make a backtracking pattern blow up.
ADVERSARIAL: dict[str, Callable[[int], str]] = {
    "letters": lambda n: "a" * n,
    "pairs": lambda n: "a=" * (n // 2),
    "secret-pairs": lambda n: "password=" * (n // 9),
    "userinfo": lambda n: "://a:" * (n // 5),
    "userinfo-no-at": lambda n: "https://u:" + "p" * n,
    "pem-headers": lambda n: "-----BEGIN PRIVATE KEY-----" * (n // 27),
    "pem-dashes": lambda n: "-----BEGIN PRIVATE KEY-----" + "-" * n,
    "jwt-starts": lambda n: "eyJaaaaa." * (n // 9),
    "bearer": lambda n: "Bearer " * (n // 7),
    "dots": lambda n: "a." * (n // 2),
    "base64": lambda n: base64.b64encode(random.Random(1).randbytes(n * 3 // 4)).decode(),
    "sk": lambda n: "sk-" * (n // 3),
    "encoded": lambda n: "%26password%3D" * (n // 14),
    "json-keys": lambda n: '"password": "' * (n // 14),
    "colons": lambda n: "a:" * (n // 2),
    "flags": lambda n: "--a " * (n // 4),
    "spaces": lambda n: "password" + " " * n,
    "quotes": lambda n: '"' * n,
    "backslashes": lambda n: "\\" * n,
    "escaped-quotes": lambda n: 'password="' + '\\"' * (n // 2),
    "keys": lambda n: "key=" * (n // 4),
    "blobs": lambda n: " ".join(b64(30) for _ in range(n // 41)),
    # issue 35's shapes
    "dsn-users": lambda n: "=a:" * (n // 3) + "@tcp(",
    "dsn-password": lambda n: "a:" + "b" * n + "@tcp(",
    "redis-flags": lambda n: "redis-cli " + "-a x " * (n // 5),
    "a-flags": lambda n: "-a " * (n // 3),
    "value-commas": lambda n: "password=" + ",a" * (n // 2),
    "value-keys": lambda n: "password=a" + ";b=" * (n // 3),
    "underscore-keys": lambda n: "_auth=" * (n // 6),
    "modal-underscores": lambda n: "as-" + "a_" * (n // 2),
    "fingerprints": lambda n: "SHA256:" * (n // 7),
}
# Below this much CPU a slope is noise: a shape that fast at half a megabyte is measured at
# twice, four times... the size (a quadratic pass over half a megabyte takes minutes).
NOISE_FLOOR = 0.02
LARGEST = 8 * MB


def _redaction_cpu(text: str) -> float:
    """The least CPU time of three redactions of text (this thread's: load does not move it)."""
    best = float("inf")
    for _ in range(3):
        start = time.thread_time()
        redact(text)
        best = min(best, time.thread_time() - start)
    return best


@pytest.mark.parametrize("name", ADVERSARIAL)
def test_redaction_time_is_linear(name: str) -> None:
    """Redaction is one linear pass over input built to make a backtracking pattern blow up:
    four times the text costs about four times the CPU (a quadratic pattern costs sixteen).

    The bound is a ratio measured in one process, not a fixed number of seconds, so a slower
    interpreter or a loaded machine does not make it fail and a superlinear pattern still does.
    """
    build = ADVERSARIAL[name]
    size = MB // 2
    large_cpu = _redaction_cpu(build(size))
    while large_cpu < NOISE_FLOOR and size < LARGEST:
        size *= 2
        large_cpu = _redaction_cpu(build(size))
    small_cpu = _redaction_cpu(build(size // 4))
    assert large_cpu / max(small_cpu, 1e-6) < 8.0, (name, size, small_cpu, large_cpu)
