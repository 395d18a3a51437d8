"""The library's one redactor: credentials and tokens scrubbed out of text and values.

Provider error messages can quote signed URLs, session tokens, key ids, connection strings or
private keys. :func:`redact` replaces each secret in a text with ``<redacted>``;
:func:`scrub` does it to every string inside a value (mappings, sequences, sets, attrs records)
without changing its structure; :func:`redact_observation` is :func:`scrub` for an
observation. See ``docs/adr/0080-one-redactor.md`` for the shapes recognised, where the library
applies it, and why it is a pattern set of its own rather than a detector library.

Two kinds of rule:

- *shapes* that are secrets wherever they appear: URL userinfo passwords, PEM private-key
  blocks, ``Bearer``/``Basic`` credentials, vendor tokens by their documented prefixes (AWS key
  ids, GitHub, GitLab, Slack, OpenAI/Anthropic ``sk-``, Stripe, Hugging Face, Google, npm,
  PyPI, SendGrid, Twilio, Azure AD client secrets, Modal ``ak-``/``as-``), JWTs, and long
  high-entropy base64 runs (AWS secret access keys and session tokens, storage account keys);
- *pairs* whose key names a secret (``password``, ``pwd``, ``pass``, ``secret(s)``,
  ``token(s)``, ``credential(s)``, ``api key``, ``private key``, ``signature``, ``sig``,
  ``auth``, ``authorization``, ``cookie`` ...), written ``key=value``, ``key: value``,
  ``"key": "value"``, ``--key value``, URL-encoded (``key%3Dvalue``) or as a mapping entry.

Every pattern is linear: runs are possessive and start only at a token boundary, so a
megabyte of adversarial text is scanned in one pass (tests/test_redaction_corpus.py).
"""

from __future__ import annotations

import functools
import itertools
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from typing import Any, TypeVar

import attrs

from .observation import Observation

__all__ = [
    "REDACTED",
    "is_secret_key",
    "redact",
    "redact_observation",
    "scrub",
]

REDACTED = "<redacted>"

# -- what names a secret ---------------------------------------------------------------------
#: A key segment containing one of these names a secret (``db_password``, ``accessToken``).
_SECRET_STEMS = (
    "password",
    "passwd",
    "passphrase",
    "secret",
    "token",
    "credential",
    "apikey",
    "privatekey",
    "accesskey",
    "secretkey",
    "accountkey",
    "signature",
    "cookie",
    "authorization",
)
#: A key segment equal to one of these names a secret.
_SECRET_WORDS = frozenset({"pwd", "pass", "pw", "sig", "auth", "creds", "jwt", "bearer", "otp"})
#: ``<word> key`` names a secret for these words (``api_key``, ``x-functions-key``).
_KEY_QUALIFIERS = frozenset(
    {
        "api",
        "private",
        "access",
        "secret",
        "account",
        "session",
        "master",
        "subscription",
        "signing",
        "encryption",
        "functions",
        "shared",
        "storage",
        "client",
        "app",
        "service",
        "admin",
        "sas",
        "host",
        "auth",
    }
)
#: A key with one of these segments describes a secret rather than holding one
#: (``token_type``, ``max_tokens``, ``tokens_per_second``, ``secret_name``, ``password_file``).
_HARMLESS = frozenset(
    {
        "type",
        "types",
        "count",
        "counts",
        "num",
        "number",
        "per",
        "rate",
        "limit",
        "limits",
        "used",
        "usage",
        "max",
        "min",
        "total",
        "expiry",
        "expires",
        "expiration",
        "expired",
        "ttl",
        "url",
        "uri",
        "endpoint",
        "file",
        "path",
        "dir",
        "name",
        "names",
        "ref",
        "length",
        "len",
        "size",
        "version",
        "hint",
        "policy",
        "algorithm",
        "alg",
        "method",
        "mode",
        "scheme",
        "provider",
        "required",
        "enabled",
        "format",
        "kind",
        "second",
        "seconds",
        # an error's name or a word about a secret, not one (``AuthFailure``,
        # ``SecretNotFound``, ``tokenizer``)
        "error",
        "errors",
        "invalid",
        "failure",
        "failures",
        "failed",
        "exception",
        "denied",
        "not",
        "found",
        "mismatch",
        "refused",
        "rejected",
        "unavailable",
        "tokenizer",
        "tokenizers",
        "tokenized",
        # a flag about a secret (``redis-cli --no-auth-warning``)
        "warning",
        "warnings",
    }
)
_SEGMENT = re.compile(r"[A-Z]+(?![a-z])|[A-Z]?[a-z]+|[0-9]+")


@functools.lru_cache(maxsize=1024)
def is_secret_key(key: str) -> bool:
    """Whether a key (a field, header, flag or parameter name) names a secret's value:
    ``password``, ``DB_PASSWORD``, ``aws_secret_access_key``, ``X-Amz-Security-Token``,
    ``privateKey``, ``tokens``, ``--token`` -- but not ``token_type`` or ``secret_name``.

    Args:
        key: the name, in any case or separator style; one over 100 characters is never a
            secret's name, which keeps the check bounded on hostile input.

    Returns:
        ``True`` when the value under ``key`` is to be replaced whole.
    """
    if len(key) > 100:
        return False
    segments = [s.lower() for s in _SEGMENT.findall(key)]
    if not segments or any(s in _HARMLESS for s in segments):
        return False
    joined = "".join(segments)
    if any(stem in joined for stem in _SECRET_STEMS):
        return True
    if any(s in _SECRET_WORDS for s in segments):
        return True
    return any(
        a in _KEY_QUALIFIERS and b in ("key", "keys") for a, b in itertools.pairwise(segments)
    )


# -- the scanner -----------------------------------------------------------------------------
#: One pass finds every place a rule may apply; each named group is one rule. Rules that read
#: a run start only where the run starts (a negative lookbehind of the run's own characters)
#: and read it possessively, so no position is read twice by a failing attempt.
_STEM = r"(?i:p(?:ass|w)|s(?:ecret|ig)|token|c(?:red|ookie)|key|auth|jwt|bearer|otp)"
_KV = r"""
    (?P<{p}dash>--?)?
    (?=[\w.-]{{0,80}}?{stem})
    (?P<{p}key>[A-Za-z_][\w.-]{{0,80}}+)
    (?P<{p}sep>(?:\\?["'])?[ \t]*(?:[:=]|(?:%22)?%3[DdAa](?:%22)?)[ \t]*
              |(?({p}dash)[ \t]+|(?!)))
"""
#: What follows the ``@`` of URL userinfo: a host (name, IPv4 or [IPv6]), a port, then the
#: end of the authority.
_HOST = r"[A-Za-z0-9\[][A-Za-z0-9.:\[\]%-]{0,253}+(?:[/?#\s,;)'\"<>]|$)"
#: The protocols of a Go MySQL DSN's address (``user:pass@tcp(host:3306)/db``).
_GO_NET = r"(?:tcp6?|udp6?|unix(?:gram|packet)?|pipe|memory)\("
#: A Go DSN's password: after ``user:`` (not a URL's ``//``), up to the ``@`` of the address.
#: It may hold any character but a space or a quote (``;``, ``,``, ``@``, ``:`` too).
_DSN = (
    r"""| (?<!:)(?P<dsn_user>[\w.~+-]{1,64}+:)(?!//)(?P<dsn_pw>[^\s"'`]{1,128}?)(?=@"""
    + _GO_NET
    + ")"
)
#: Key ids and tokens of a fixed length and a prefix no word has: found even glued to a word
#: (``keyAKIA...``, ``KEY_AKIA...``); each is bounded, so a search at every position is linear.
_GLUED_SRC = r"""
    (?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{16}(?![A-Z0-9])
  | gh[pousr]_[A-Za-z0-9]{36}(?![A-Za-z0-9])
  | github_pat_[A-Za-z0-9_]{82}(?![A-Za-z0-9_])
  | glpat-[\w-]{20}(?![\w-])
  | (?:sk|rk)_live_[A-Za-z0-9]{24,99}(?![A-Za-z0-9])
  | xox[bpoa]-[0-9]{6,15}-[A-Za-z0-9-]{10,100}(?![A-Za-z0-9-])
"""
_SCAN_SRC = (
    r"""
    (?P<pem>-----BEGIN[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----
        (?:[^-]|-(?!----))*+
        (?:-----END[ A-Z0-9]{0,40}PRIVATE[ ]KEY(?:[ ]BLOCK)?-----)?)
  | (?P<ui_head>://[^\s/?#@:]{0,256}+:)(?!\d{1,5}+(?![^\s/?#]))
    (?P<ui_pw>(?:[^\r\n@:]|:(?!//)|@(?!"""
    + _HOST
    + r""")){1,256}?)(?=@"""
    + _HOST
    + r""")
  | (?P<glued>"""
    + _GLUED_SRC
    + r""")
  | (?=[\w+/-])(?<![\w-])(?:
      (?P<cli_u>(?:-u|--user)(?:[ \t]++|=)?)(?P<cli_uq>["'])?
        [^\s:"'@]{1,128}+:(?!//)(?P<cli_u_pw>(?(cli_uq)[^"'\r\n]|[^\s"'])++)
    | login[ \t]++[^\s]{1,256}+[ \t]++password[ \t]++(?P<netrc_pw>[^\s]++)
    | (?P<cli_p>-p[ \t]*+)(?P<cli_p_v>"[^"\r\n]*+"?|'[^'\r\n]*+'?|[^\s"'\-./~][^\s"']*+)
    | (?P<cli_a>-a[ \t]++)(?P<cli_a_v>"[^"\r\n]*+"?|'[^'\r\n]*+'?|[^\s"'-][^\s"']*+)
    """
    + _DSN
    + r"""
    |
      (?P<vendor>
        (?:AKIA|ASIA|AIDA|AROA|AGPA|ANPA|ANVA|AIPA|ABIA|ACCA)[A-Z0-9]{12,}+
      | gh[pousr]_[A-Za-z0-9]{20,}+
      | github_pat_\w{20,}+
      | gl(?:pat|dt|ptt|rt|cbt|imt|oas|ft|soat|agent)-[\w-]{20,}+
      | xox[abposrce]-[A-Za-z0-9-]{10,}+
      | xapp-[\w-]{10,}+
      | (?:sk|rk)_(?:live|test)_[A-Za-z0-9]{10,}+
      | whsec_[A-Za-z0-9+/=]{20,}+
      | hf_[A-Za-z0-9]{20,}+
      | api_org_[A-Za-z0-9]{20,}+
      | AIza[\w-]{30,}+
      | ya29\.[\w-]{20,}+
      | GOCSPX-[\w-]{20,}+
      | npm_[A-Za-z0-9]{30,}+
      | pypi-AgE[\w-]{50,}+
      | SG\.[\w-]{16,}+\.[\w-]{16,}+
      | SK[0-9a-fA-F]{32}(?![0-9a-fA-F])
      | [\w.~-]{3}\dQ~[\w.~-]{31,34}+
      | eyJ[\w-]{5,}+\.[\w-]{5,}+(?:\.[\w-]*+)?
      )
    | (?P<loose>(?:sk-[\w-]{20,}+|(?:ak|as)-[A-Za-z0-9_]{16,}+)(?![\w-]))
    | (?P<scheme>(?i:bearer|basic)[ \t]{1,8}+)(?P<scheme_v>[\w.~+/-]{6,}+=*+)
    | (?<![.%])(?P<kv>"""
    + _KV.format(p="kv_", stem=_STEM)
    + r""")
    | (?<![+/])(?P<blob>[A-Za-z0-9+/_-]{32,}+=*+)
    )
  | (?<=[0-9A-Fa-f])(?:(?<=%2[6CcBb0])|(?<=%3[FfBbAaDd])|(?<=%22))(?=[A-Za-z-])(?P<kve>"""
    + _KV.format(p="kve_", stem=_STEM)
    + r""")
    """
)
#: The scanner without the Go DSN rule; the whole ``_SCAN_SRC`` is used for a text that has a
#: DSN's ``@tcp(`` (the rule tries up to 128 characters at each ``word:``: linear, but only
#: paid where a DSN may be).
_SCAN_PLAIN_SRC = _SCAN_SRC.replace(_DSN, "")
_DSN_AT = re.compile("@" + _GO_NET, re.ASCII)

#: The value after a secret key: quoted (to the closing quote), or bare (to the next
#: whitespace or separator; an authorization scheme word is kept with its credential). A
#: ``;`` or ``,`` is inside a bare value (``password=ab;cd,ef``) unless it ends the value: it
#: is followed by a space, a quote, a bracket or the end (punctuation: ``password=x, then``),
#: or by the next ``key=`` (``Pwd=x;Server=db``, ``password=x,db=app``) -- ADR 0140.
_VALUE_SRC = r"""
    "(?P<dq>(?:[^"\\\r\n]|\\[^\r\n])*+)
  | '(?P<sq>[^'\r\n]*+)
  | \\"(?P<eq>(?:\\\\|[^\\"\r\n])*+)
  | (?P<bare>(?:(?i:bearer|basic|token|digest|negotiate|ntlm|aws4-hmac-sha256|sharedkey)[ \t]+)?
             (?:[^\s"'&,;<>(){}\[\]\\]|[,;](?![\s"'&<>(){}\[\]\\]|$|[A-Za-z_][\w.-]{0,80}+=))++)
    """


@functools.cache
def _compiled(source: str) -> re.Pattern[str]:
    """The scanner, the glued key ids and the value rule, compiled on first use: compiling
    the scanner is most of what importing this module would cost (ADR 0139)."""
    return re.compile(source, re.VERBOSE | re.ASCII)


#: The value of an ``Authorization`` or ``Cookie`` header written bare: the rest of the line.
_LINE_VALUE = re.compile(r"(?:(?!-----BEGIN)[^\r\n])++")
_KEY = re.compile(r"[A-Za-z][\w.-]*+", re.ASCII)
#: A URL-encoded value: up to an encoded ``&``, ``,``, ``"``, ``;`` or space.
_ENCODED_VALUE = re.compile(r"(?:(?!%2[6Cc2]|%3[Bb]|%20)[^\s\"'&,;<>(){}\[\]\\+])++")


#: An error code such as ``UnauthorizedOperation``: CamelCase words, nothing else.
_CAMEL_CODE = re.compile(r"(?:[A-Z][a-z]+){2,}")


#: Values after a secret's key that say what is wrong with it, not what it is (``Token:
#: expired``, ``password=none``).
_STATUS_WORDS = frozenset(
    {
        "expired",
        "invalid",
        "missing",
        "denied",
        "required",
        "revoked",
        "rejected",
        "refused",
        "none",
        "null",
        "nil",
        "empty",
        "unset",
        "unknown",
        "malformed",
        "incorrect",
        "wrong",
        "bad",
        "absent",
        "present",
        "provided",
        "accepted",
        "valid",
        "failed",
        "ok",
        "true",
        "false",
        "not",
        "no",
        "yes",
    }
)
_SMALL_COUNT = re.compile(r"[0-9]{1,3}")


def _a_label(key: str, value: str) -> bool:
    """``auth: UnauthorizedOperation`` is a kind and an error code, ``Token: expired`` a
    state and ``pass: 3`` a count, not credentials: a value that is one of the status words,
    or after one of the short keys (``auth``, ``pass``, ``sig`` ...) a CamelCase code or a
    number of up to three digits, is kept. Any other value of a secret's key is redacted."""
    if value.lower().rstrip(".,;:!") in _STATUS_WORDS:
        return True
    short = key.lower().lstrip("-") in _SECRET_WORDS
    return short and (
        _CAMEL_CODE.fullmatch(value) is not None or _SMALL_COUNT.fullmatch(value) is not None
    )


#: ``-p`` followed by a port (``-p 8080:80/tcp``) or glued into a flag word (``-pthread``).
_PORTS = re.compile(r"[0-9]+(?:[:.-][0-9]+)*(?:/[a-z]+)?")


def _a_password_flag(flag: str, value: str) -> bool:
    """Whether ``-p<value>`` / ``-p <value>`` gives a password (``mysql -pS3cret``, ``docker
    login -p X``) rather than a port or a flag word (``-pthread``, ``-pedantic``)."""
    if value[:1] in "\"'":
        return True
    if _PORTS.fullmatch(value):
        return False
    glued = flag == "-p"
    return not (glued and value.isalpha() and value.islower())


def _looks_random(token: str) -> bool:
    """Upper, lower and digit all present: keeps ``sk-worker-pool-...`` style names."""
    return (
        any(c.isdigit() for c in token)
        and any(c.isupper() for c in token)
        and any(c.islower() for c in token)
    )


def _mixed_case(token: str) -> bool:
    return any(c.isupper() for c in token) and any(c.islower() for c in token)


#: A credential after ``Basic`` has a digit or a symbol or mixed case; a word (``basic
#: authentication failed``) has none of them.
_TOKENISH = re.compile(r"[0-9.~+/=_-]")
_WORD = re.compile(r"\w", re.ASCII)


def _entropy(text: str) -> float:
    n = len(text)
    return -sum(c / n * math.log2(c / n) for c in Counter(text).values())


#: Shannon entropy (bits per character) a run must reach to count as a key: tuned so that a
#: random base64 or base62 run of that length reaches it in more than 99.99 % of cases, while
#: CamelCase identifiers and paths (about 4.0-4.3) stay below it from 48 characters on.
def _threshold(n: int) -> float:
    return min(4.5, math.log2(n) - 1.2)


_LOWER_RUN = re.compile(r"[a-z]+")
_UUID = re.compile(r"[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}")
_VOWEL = re.compile(r"[aeiouy]")
#: A lowercase run of one or two letters between capitals (``xZaB``): random text has many,
#: CamelCase words almost none (``OfThe``, ``IdP``).
_SHORT_LOWER = re.compile(r"(?<=[A-Z+/])[a-z]{1,2}(?=[A-Z+/])")
#: A URL's host and path, right after its scheme (``s3://``, ``gs://``).
_AFTER_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]{0,30}:\Z")


#: ``SHA256:`` in front of a run: what ``ssh`` and ``ssh-keygen -l`` print a fingerprint with;
#: the unpadded base64 length of each digest.
_FINGERPRINT = re.compile(r"SHA(256|384|512):\Z")
_DIGEST_CHARS = {"256": 43, "384": 64, "512": 86}


def _name_like(body: str, *, loose: bool) -> bool:
    """Whether ``body`` reads as names (``/Users/Alice/ResNet50Weights/checkpoint2025``):
    its lowercase runs long and holding vowels, as words do; a random key's are short and
    often have none. ``loose`` admits a little more (a path from the root: a key begins with
    ``/`` once in 64)."""
    runs = _LOWER_RUN.findall(body)
    if not runs:
        return False
    voiceless = sum(1 for run in runs if not _VOWEL.search(run))
    short = sum(1 for run in runs if len(run) <= 2)
    mean = sum(map(len, runs)) / len(runs)
    if loose:
        return voiceless <= 2 and short <= 2 and mean >= 3.0
    return voiceless <= 1 and short <= 1 and mean >= 3.5


def _is_blob_secret(run: str, before: str = "") -> bool:
    """A long base64-ish run is a secret when it mixes letter cases, has a digit (or the
    short lowercase runs of random letters), does not read as names, and its entropy is that
    of random data of its length. A run mixing the two base64 alphabets (``-_`` and ``+/``)
    is no one token, nor is a URL's host and path after its scheme (``s3://bucket/Key``):
    their ``/`` parts are judged one by one (``<uid>/<sandbox id>`` is two ids, not a key).
    ``before`` is the text in front of the run. A key fingerprint (``SHA256:`` and the
    unpadded base64 of a digest of that size, as ``ssh`` prints it) is a public key's hash,
    not a secret."""
    fingerprint = _FINGERPRINT.search(before)
    if fingerprint is not None and len(run.rstrip("=")) == _DIGEST_CHARS[fingerprint[1]]:
        return False
    parts = _blob_parts(run, before)
    if parts is not None:
        return any(_is_blob_secret(part) for part in parts)
    return _random_blob(run.rstrip("="))


def _blob_parts(run: str, before: str) -> list[str] | None:
    """The runs ``run`` is made of, judged one by one (ids joined to a uuid, a mix of the two
    base64 alphabets, a URL's host and path), or ``None``: it is one token."""
    if "-" in run and _UUID.search(run):  # GPU-<uuid>, <uid>-<suffix>: ids, judged apart
        return _UUID.split(run)
    if ("-" in run or "_" in run) and ("/" in run or "+" in run):
        return re.split(r"[/+]", run)
    if run.startswith("//") and _AFTER_SCHEME.search(before[-32:]):
        return run.split("/")
    return None


def _random_blob(body: str) -> bool:
    """Whether one base64-ish token (padding stripped) reads as random data, not words."""
    if len(body) < 32 or not _mixed_case(body):
        return False
    if not any(c.isdigit() for c in body) and len(_SHORT_LOWER.findall(body)) < 3:
        return False  # CamelCase words: InsufficientInstanceCapacityException
    if ("-" in body or "_" in body) and _name_like(body, loose=False):
        return False  # f0-OverrideErrorStatusUpdateFailed: words joined (no base64 key has -_)
    if "/" in body and "+" not in body and _name_like(body, loose=body.startswith("/")):
        return False  # /Users/Alice/Library/Caches2: a path, not a key
    return _entropy(body) >= _threshold(len(body))


def _value_end(text: str, at: int, key: str, encoded: bool) -> tuple[int, int]:
    """The span of the value of secret ``key`` starting at ``at`` (empty: none)."""
    m = (_ENCODED_VALUE if encoded else _compiled(_VALUE_SRC)).match(text, at)
    if m is None:
        return at, at
    group = m.lastgroup
    if group is None:  # an encoded value
        return m.span()
    if group == "bare":
        lowered = key.lower()
        if "authorization" in lowered or "cookie" in lowered:
            line = _LINE_VALUE.match(text, at)
            assert line is not None
            return at, line.end()
        value = m.group(group)
        if value.endswith(":"):
            if _KEY.fullmatch(value, 0, len(value) - 1) and is_secret_key(value[:-1]):
                return at, at  # ``credentials: api_key: x``: read on from the next key
            return m.start(group), m.end(group) - 1
    return m.span(group)


class _RedisLine:
    """Whether ``redis-cli`` comes earlier on the line of a position (its ``-a`` gives the
    password). Asked at rising positions, each stretch of text is searched once: linear."""

    __slots__ = ("looked", "on_line", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.looked = 0
        self.on_line = False

    def before(self, at: int) -> bool:
        text, looked = self.text, self.looked
        newline = max(text.rfind("\n", looked, at), text.rfind("\r", looked, at))
        if newline >= 0:
            self.on_line = False
            looked = newline + 1
        if not self.on_line:
            self.on_line = text.find("redis-cli", looked, at) >= 0
        self.looked = at
        return self.on_line


def redact(text: str) -> str:
    """``text`` with every credential and token in it replaced by ``<redacted>``.

    Idempotent, bounded (one linear pass), and it returns ``text`` itself when there is
    nothing to redact.

    Args:
        text: free text, such as a provider's error message, which can quote signed URLs,
            session tokens, key ids or connection strings (ADR 0080).

    Returns:
        The redacted text; ``text`` itself when nothing was found (no copy on the hot path).
    """
    scan = _compiled(_SCAN_SRC if "@" in text and _DSN_AT.search(text) else _SCAN_PLAIN_SRC)
    m = scan.search(text)
    if m is None:
        return text
    run = _Redacting(text)
    while m is not None:
        start = m.start()
        resume = run.take(m)
        m = scan.search(text, max(resume, start + 1))
    if not run.out:
        return text
    run.out.append(text[run.pos :])
    return "".join(run.out)


#: The rules whose group is a secret wherever they match.
_ALWAYS_SECRET = frozenset({"ui_pw", "dsn_pw", "cli_u_pw", "netrc_pw"})


class _Redacting:
    """One pass of :func:`redact` over ``text``: the pieces written so far (``out``) and how
    far the text is dealt with (``text[:pos]``)."""

    __slots__ = ("out", "pos", "redis", "text")

    def __init__(self, text: str) -> None:
        self.text = text
        self.out: list[str] = []
        self.pos = 0
        self.redis = _RedisLine(text)

    def replace(self, start: int, end: int, by: str = REDACTED) -> None:
        """Write the text up to ``start``, then ``by`` in place of ``text[start:end]``."""
        self.out.append(self.text[self.pos : start])
        self.out.append(by)
        self.pos = end

    def take(self, m: re.Match[str]) -> int:
        """Deal with one match of the scan; where the scan resumes."""
        rule = m.lastgroup
        assert rule is not None
        if rule == "kv" or rule == "kve":
            return self._key_value(m, rule)
        if rule == "cli_a_v":  # ``-a PASS`` of redis-cli; elsewhere ``-a`` is a flag
            if not self.redis.before(m.start()):
                return m.end("cli_a")
        elif rule == "cli_p_v":  # ``-p 8080:80``, ``-pthread``: a port or a flag word
            if not _a_password_flag(m.group("cli_p"), m.group("cli_p_v")):
                return m.end("cli_p")
        elif rule == "scheme_v":
            if _scheme_secret(self.text, m):
                self.replace(m.start(rule), m.end(rule))
            return m.end()
        elif rule == "loose" or rule == "blob":
            self._token(m, rule)
            return m.end()
        elif rule not in _ALWAYS_SECRET:  # pem, vendor, glued: the whole match is the secret
            self.replace(m.start(), m.end())
            return m.end()
        self.replace(m.start(rule), m.end(rule))
        return m.end()

    def _key_value(self, m: re.Match[str], rule: str) -> int:
        """``key: value``: the value of a secret key; else the key itself may be a token
        (``AKIA...:``) and what follows is scanned on."""
        key = m.group(f"{rule}_key")
        sep_end = m.end(f"{rule}_sep")
        if is_secret_key(key):
            v_start, v_end = _value_end(self.text, sep_end, key, "%" in m.group(f"{rule}_sep"))
            value = self.text[v_start:v_end]
            if value and value != REDACTED and not _a_label(key, value):
                self.replace(v_start, v_end)
            return max(v_end, sep_end)
        cleaned = redact(key) if len(key) >= 8 else key
        if cleaned is not key:
            self.replace(m.start(f"{rule}_key"), m.end(f"{rule}_key"), cleaned)
        return m.end(f"{rule}_key")

    def _token(self, m: re.Match[str], rule: str) -> None:
        """A bare token (``loose``) or a long base64-ish run (``blob``): redacted if it is a
        secret; a name holding a key id has the id redacted."""
        token, start = m.group(), m.start()
        if _token_secret(rule, token, self.text, start):
            self.replace(start, m.end())
        elif rule == "blob" and (glued := _compiled(_GLUED_SRC)).search(token):
            self.replace(start, m.end(), glued.sub(REDACTED, token))


def _scheme_secret(text: str, m: re.Match[str]) -> bool:
    """Whether the value after an auth scheme (``Bearer x``, ``Basic x``) is a credential."""
    value = m.group("scheme_v")
    if value.endswith("=") and _WORD.match(text, m.end()):  # ``bearer name=value``
        return any(c.isdigit() for c in value)
    if m.group("scheme")[:2].lower() == "be":  # Bearer: what follows is the credential
        return value != REDACTED
    return value != REDACTED and bool(_TOKENISH.search(value) or _mixed_case(value))


def _token_secret(rule: str, token: str, text: str, start: int) -> bool:
    """Whether a ``blob`` or ``loose`` token found at ``start`` of ``text`` is a secret."""
    if rule == "blob":
        return _is_blob_secret(token, text[max(0, start - 32) : start])
    if token.startswith("sk-"):
        return _looks_random(token)
    # Modal ak-/as- (22 random letters and digits), not a pool ``as-prod2025``
    body = token[3:]
    random_length = len(body) >= 20 and any(c.isdigit() for c in body)
    if "_" in body:  # a secret may hold ``_``; names joined by it read as words, but a
        # token's length of mixed case with digits is random even where a run of it happens
        # to read as a word
        return _mixed_case(body) and (not _name_like(body, loose=False) or random_length)
    return _mixed_case(body) or (random_length and not body.isdigit())


# -- values ----------------------------------------------------------------------------------
def _distinct(items: list[Any], originals: list[Any]) -> list[Any]:
    """``items`` (scrubbed ``originals``) with no two made equal by redaction: a string that
    changed and now equals another gets numbered placeholders ``<redacted:N>``."""
    seen: set[Any] = set()
    unchanged = {o for o, i in zip(originals, items, strict=True) if o is i or o == i}
    n = 0
    out = []
    for original, item in zip(originals, items, strict=True):
        if isinstance(item, str) and item != original:
            candidate = item
            while candidate in seen or candidate in unchanged:
                n += 1
                candidate = item.replace(REDACTED, f"<redacted:{n}>")
                if candidate == item:  # nothing to number: give it its own placeholder
                    candidate = f"<redacted:{n}>"
            item = candidate
        seen.add(item)
        out.append(item)
    return out


def _walk(value: Any, secret: bool, keyed: bool = True) -> Any:
    if isinstance(value, str):
        if secret:
            return REDACTED if value and value != REDACTED else value
        return redact(value)
    if isinstance(value, tuple | list):
        return _walk_sequence(value, secret, keyed)
    if isinstance(value, set | frozenset):
        originals = list(value)
        cleaned = [_walk(v, secret, keyed) for v in originals]
        if _same(cleaned, originals):
            return value
        return type(value)(_distinct(cleaned, originals))
    if isinstance(value, Mapping):
        return _walk_mapping(value, secret, keyed)
    if attrs.has(type(value)):
        return _walk_record(value, secret, keyed)
    return value


def _same(cleaned: Iterable[Any], originals: Iterable[Any]) -> bool:
    """Whether redaction left every item as it was (the very object)."""
    return all(a is b for a, b in zip(cleaned, originals, strict=True))


def _walk_sequence(value: tuple[Any, ...] | list[Any], secret: bool, keyed: bool) -> Any:
    cleaned = [_walk(v, secret, keyed) for v in value]
    if _same(cleaned, value):
        return value
    kind: Any = type(value)
    if hasattr(value, "_fields"):  # a NamedTuple
        return kind._make(cleaned)
    return kind(cleaned)


def _walk_mapping(value: Mapping[Any, Any], secret: bool, keyed: bool) -> Any:
    keys = list(value.keys())
    new_keys = _distinct([_walk(k, False, keyed) for k in keys], keys)
    values = [
        _walk(v, secret or (keyed and isinstance(k, str) and is_secret_key(k)), keyed)
        for k, v in value.items()
    ]
    if _same(new_keys, keys) and _same(values, value.values()):
        return value
    pairs = list(zip(new_keys, values, strict=True))
    mapping: Any = type(value)
    try:
        return mapping(pairs)
    except TypeError:  # a mapping type that cannot be built from pairs (a proxy)
        return dict(pairs)


def _walk_record(value: Any, secret: bool, keyed: bool) -> Any:
    changes = {}
    for field in attrs.fields(type(value)):
        if not field.init:
            continue
        old = getattr(value, field.name)
        named = keyed and is_secret_key(field.alias or field.name)
        new = _walk(old, secret or named, keyed)
        if new is not old:
            changes[field.alias] = new
    if not changes:
        return value
    try:
        return attrs.evolve(value, **changes)
    except Exception:  # a validator refused a redacted value: see _rebuilt
        return _rebuilt(value, secret, keyed)


def _rebuilt(record: Any, secret: bool, keyed: bool) -> Any:
    """``record`` redacted where its validators refused the plain redaction: a value held
    under a secret-named key that is a state, not a secret (``{"k8s.imagePullSecrets":
    "recorded"}`` must stay one of the states it allows), keeps what the shapes leave of it;
    if even that is refused, the redacted values are set without the validators (a redacted
    record is for showing and recording, never for deciding). Redaction never raises."""
    if keyed:
        cleaned = _walk(record, secret, keyed=False)
        if _holds_no_keyed_secret(record):
            return cleaned
    changes = {}
    for field in attrs.fields(type(record)):
        if not field.init:
            continue
        old = getattr(record, field.name)
        new = _walk(old, secret or is_secret_key(field.alias or field.name), keyed)
        if new is not old:
            changes[field.name] = new
    copy = object.__new__(type(record))
    for field in attrs.fields(type(record)):
        object.__setattr__(copy, field.name, changes.get(field.name, getattr(record, field.name)))
    return copy


def _holds_no_keyed_secret(record: Any) -> bool:
    """Whether every value ``record`` holds under a secret-named key is one the redactor's
    shapes would leave as it is and no wider than a state word (``recorded``,
    ``unavailable:Timeout``): then keeping it whole leaks nothing."""
    found: list[str] = []
    _keyed_strings(record, False, found)
    return all(_STATE.fullmatch(text) for text in found)


#: A value a record may hold under a secret-named key that is a state, not a secret.
_STATE = re.compile(r"[a-z]{1,32}(?::[A-Za-z][A-Za-z0-9_.-]{0,63})?|")


def _keyed_strings(value: Any, secret: bool, found: list[str]) -> None:
    if isinstance(value, str):
        if secret:
            found.append(value)
    elif isinstance(value, tuple | list | set | frozenset):
        for v in value:
            _keyed_strings(v, secret, found)
    elif isinstance(value, Mapping):
        for k, v in value.items():
            _keyed_strings(v, secret or (isinstance(k, str) and is_secret_key(k)), found)
    elif attrs.has(type(value)):
        for field in attrs.fields(type(value)):
            named = is_secret_key(field.alias or field.name)
            _keyed_strings(getattr(value, field.name), secret or named, found)


def scrub(value: Any) -> Any:
    """``value`` with every string inside it redacted, its structure unchanged: strings;
    tuples (NamedTuples too), lists, sets and frozensets; mapping keys and values; nested
    attrs records. A string held under a secret key (``{"password": "x"}``, a field named
    ``token``) is replaced whole. No two keys of a mapping (or members of a set) are made
    equal: a changed one that would collide is numbered ``<redacted:1>``, ``<redacted:2>``.
    What has nothing to redact comes back as the same object.

    Args:
        value: any value built of strings, containers and attrs records.

    Returns:
        The redacted value, of the same shape and types.
    """
    return _walk(value, False)


#: The old private name (tests and recorders used it).
_scrub = scrub

ObsT = TypeVar("ObsT", bound=Observation)


def redact_observation(observation: ObsT) -> ObsT:
    """The same observation with every string in it (nested ones too) redacted.

    Args:
        observation: what an adapter saw; a provider's text enters the library here, so the
            journal, traces and events only ever hold the redacted form.

    Returns:
        An observation of the same type; ``observation`` itself when nothing was redacted.
    """
    cleaned: ObsT = scrub(observation)
    return cleaned
