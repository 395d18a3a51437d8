"""scripts/check_site.py, the check CI runs on the built documentation site (ADR 0137).

Its parts that need no browser are tested here always: which requests are local, and how
DevTools events become a page's problems. With Chromium installed (``scripts/chromium.sh``;
``.ci/run`` installs it before the suite), the check runs on the synthetic site that holds one
of each problem (an external script, a Mermaid block left as source, a missing and a malformed
drawing, script errors) and must find exactly those, and on a site showing every shipped
machine's drawing, which must be clean.
"""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from lifecycle import default_registry
from lifecycle._svg import svg

ROOT = Path(__file__).resolve().parents[1]


def _load() -> Any:
    spec = importlib.util.spec_from_file_location("check_site", ROOT / "scripts" / "check_site.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["check_site"] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


check_site = _load()
CHROMIUM = check_site.find_chromium(None)
needs_chromium = pytest.mark.skipif(CHROMIUM is None, reason="no Chromium (scripts/chromium.sh)")


@pytest.mark.parametrize(
    "url",
    [
        "file:///site/index.html",
        "data:image/svg+xml;charset=utf-8,<svg/>",
        "blob:file:///1234",
        "about:blank",
        "http://127.0.0.1:8000/index.html",
        "http://127.8.9.10/x.js",
        "http://localhost:9000/",
        "http://[::1]:8000/a.css",
        "chrome-error://chromewebdata/",
    ],
)
def test_local_requests(url: str) -> None:
    assert check_site.is_local(url)


@pytest.mark.parametrize(
    "url",
    [
        "https://cdn.jsdelivr.net/npm/mermaid/dist/mermaid.esm.min.mjs",
        "http://203.0.113.7/pixel.png",
        "https://localhost.example.org/",
        "//fonts.example.com/a.woff2",
        "ws://10.0.0.1/socket",
        "http://[2001:db8::1]/",
    ],
)
def test_external_requests(url: str) -> None:
    assert not check_site.is_local(url)


@given(
    st.sampled_from(["http", "https", "ws", "wss", "ftp"]),
    st.from_regex(r"[a-z][a-z0-9-]{0,20}(\.[a-z][a-z0-9-]{0,20}){1,3}", fullmatch=True),
    st.from_regex(r"(/[A-Za-z0-9._-]{0,12}){0,3}", fullmatch=True),
)
def test_any_named_host_but_localhost_is_external(scheme: str, host: str, path: str) -> None:
    assert not check_site.is_local(f"{scheme}://{host}{path}")


def _event(method: str, **params: Any) -> dict[str, Any]:
    return {"method": method, "params": params}


def test_events_become_the_page_problems() -> None:
    events = [
        _event("Network.requestWillBeSent", requestId="1", request={"url": "file:///s/a.css"}),
        _event("Network.requestWillBeSent", requestId="2", request={"url": "https://cdn.x/m.js"}),
        _event("Network.requestWillBeSent", requestId="3", request={"url": "file:///s/gone.svg"}),
        _event("Network.requestWillBeSent", requestId="4", request={"url": "data:image/png,x"}),
        _event("Network.loadingFailed", requestId="2", errorText="net::ERR_BLOCKED_BY_CLIENT"),
        _event("Network.loadingFailed", requestId="3", errorText="net::ERR_FILE_NOT_FOUND"),
        _event("Network.loadingFailed", requestId="4", errorText=""),  # inline data: not missing
        _event("Network.loadingFailed", requestId="1", errorText="x", canceled=True),
        _event(
            "Runtime.exceptionThrown",
            exceptionDetails={"text": "Uncaught", "exception": {"description": "Error: boom\n at"}},
        ),
        _event("Runtime.consoleAPICalled", type="error", args=[{"value": "bad"}]),
        _event("Runtime.consoleAPICalled", type="log", args=[{"value": "fine"}]),
        _event("Log.entryAdded", entry={"level": "error", "source": "network", "url": "x"}),
    ]
    report = check_site.reports_from("p.html", events, ["image did not render: gone.svg"])
    assert report.external == ["https://cdn.x/m.js"]
    assert report.missing == ["file:///s/gone.svg (net::ERR_FILE_NOT_FOUND)"]
    assert report.script_errors == ["Error: boom", "console.error: bad"]
    assert report.unrendered == ["image did not render: gone.svg"]
    assert check_site.kinds(report) == {
        "external request",
        "local file did not load",
        "script error",
        "unrendered diagram",
    }
    assert check_site.reports_from("q.html", [], []).problems == []


@needs_chromium
def test_the_check_finds_each_planted_problem_and_passes_the_clean_page() -> None:
    with check_site.browser(CHROMIUM) as b:
        assert check_site.self_test(b) == []


@needs_chromium
def test_every_machine_drawing_renders_in_chromium(tmp_path: Path) -> None:
    """Each drawing the pages show decodes as an image in a browser, with nothing fetched."""
    for machine in default_registry().values():
        (tmp_path / f"{machine.name}.svg").write_text(svg(machine), encoding="utf-8")
        (tmp_path / f"{machine.name}.html").write_text(
            f'<!doctype html><img src="{machine.name}.svg" alt="{machine.kind}">',
            encoding="utf-8",
        )
    with check_site.browser(CHROMIUM) as b:
        reports = check_site.check_site(b, tmp_path, tmp_path / "shots")
    assert [r.page for r in reports] == sorted(f"{m}.html" for m in default_registry())
    assert [r.problems for r in reports if r.problems] == []
    assert len(list((tmp_path / "shots").glob("*.jpg"))) == len(reports)


def test_the_site_check_runs_in_ci_after_the_docs_are_built() -> None:
    ci = (ROOT / ".ci" / "run").read_text(encoding="utf-8")
    assert ci.index("step make docs\n") < ci.index("step make docs-check")
    assert ci.index("bash scripts/chromium.sh") < ci.index("step make test")
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    assert "scripts/check_site.py docs/_build/html" in makefile
    assert shutil.which("bash") is not None
