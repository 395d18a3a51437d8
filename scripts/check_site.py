"""Open every page of the built documentation site in headless Chromium and fail on a problem.

    python scripts/check_site.py [SITE] [--screenshots DIR] [--chromium PATH]

``make docs-check`` runs it on ``docs/_build/html`` after ``make docs`` (ADR 0137). Each HTML
page is opened from disk (``file://``, as a reader of the offline site opens it) and fails on:

- a script error: an uncaught exception, or an error on the console;
- an external request: any request that is not to a local file (or ``data:``/``blob:``, or the
  loopback interface), whatever its outcome; the site must work where nothing else can be reached;
- a local file that does not load (a stylesheet, script or image missing from the build);
- an unrendered diagram: an image that did not decode, a Mermaid block left as its source, or a
  Mermaid fence shown as code;
- on an API reference page (``reference/``), a private module's name (``lifecycle._protocol``):
  the reference shows only what a reader can import.

A screenshot of each page goes to ``--screenshots`` (default ``docs/_build/screenshots``; kept
as a CI artefact, never committed). Before the site, the check runs on a small synthetic site
holding one of each problem and a clean page, and stops if it does not find exactly those: a
check that finds nothing there would pass any site. Chromium is driven over its DevTools
protocol with ``websocket-client``; nothing but Chromium itself (Debian's ``chromium``) is
needed. Exit 0 when every page is clean, 1 when one is not, 2 when the check cannot run.
"""

from __future__ import annotations

import argparse
import base64
import concurrent.futures
import contextlib
import ipaddress
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_SITE = ROOT / "docs" / "_build" / "html"
DEFAULT_SHOTS = ROOT / "docs" / "_build" / "screenshots"
#: Flags that keep a headless Chromium quiet on a machine with no network (and as root).
CHROMIUM_FLAGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--no-default-browser-check",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--disable-extensions",
    "--hide-scrollbars",
    "--mute-audio",
    "--window-size=1280,900",
    "--remote-debugging-port=0",
)
#: The API reference's pages, where no private module may be named.
REFERENCE = "reference/"
LOCAL_SCHEMES = frozenset({"file", "data", "blob", "about"})
LOOPBACK_NAMES = frozenset({"localhost"})
#: Chromium's own pages and its DevTools machinery are not requests a page makes.
IGNORED_SCHEMES = frozenset({"chrome", "chrome-extension", "devtools", "chrome-error"})

#: Run in each page once it has loaded: what did not render. Images are awaited first.
PAGE_PROBE = r"""
(async () => {
  await Promise.all([...document.images].map((img) => img.complete ? null :
    new Promise((done) => {
      img.addEventListener('load', done);
      img.addEventListener('error', done);
    })));
  const found = [];
  for (const img of document.images) {
    if (img.naturalWidth === 0) found.push('image did not render: ' + img.getAttribute('src'));
  }
  for (const el of document.querySelectorAll('.mermaid')) {
    if (!el.querySelector('svg')) found.push('Mermaid diagram left as source: ' +
      el.textContent.trim().slice(0, 60));
  }
  for (const el of document.querySelectorAll('.highlight-mermaid, code.language-mermaid')) {
    found.push('Mermaid diagram shown as code: ' + el.textContent.trim().slice(0, 60));
  }
  const text = (document.querySelector('article') || document.body).innerText;
  const names = [...new Set(text.match(/\blifecycle(?:\.\w+)*\._\w+/g) || [])];
  return {unrendered: found, private: names};
})()
"""


def is_local(url: str) -> bool:
    """Whether loading ``url`` stays on this machine: a file, inline data, or the loopback."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme in LOCAL_SCHEMES or scheme in IGNORED_SCHEMES:
        return True
    host = (parts.hostname or "").lower()
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


@dataclass
class PageReport:
    """What one page did wrong (empty lists: a clean page)."""

    page: str
    script_errors: list[str] = field(default_factory=list)
    external: list[str] = field(default_factory=list)
    missing: list[str] = field(default_factory=list)
    unrendered: list[str] = field(default_factory=list)
    private: list[str] = field(default_factory=list)

    @property
    def problems(self) -> list[str]:
        return (
            [f"script error: {e}" for e in self.script_errors]
            + [f"external request: {u}" for u in self.external]
            + [f"local file did not load: {u}" for u in self.missing]
            + [f"unrendered diagram: {d}" for d in self.unrendered]
            + [f"private name in the reference: {n}" for n in self.private]
        )


def reports_from(page: str, events: list[dict[str, Any]], unrendered: list[str]) -> PageReport:
    """Sort the DevTools events a page raised into its report."""
    report = PageReport(page, unrendered=list(unrendered))
    urls: dict[str, str] = {}
    for event in events:
        method, params = event.get("method"), event.get("params", {})
        if method == "Network.requestWillBeSent":
            url = params["request"]["url"]
            urls[params["requestId"]] = url
            if not is_local(url) and url not in report.external:
                report.external.append(url)
        elif method == "Network.loadingFailed":
            url = urls.get(params["requestId"], "?")
            # inline data cannot be missing (Chromium reports some data: images as failed)
            missable = is_local(url) and urlsplit(url).scheme not in ("data", "blob")
            if missable and not params.get("canceled") and url not in report.missing:
                report.missing.append(f"{url} ({params.get('errorText', '')})")
        elif method == "Runtime.exceptionThrown":
            details = params["exceptionDetails"]
            text = details.get("exception", {}).get("description") or details.get("text", "")
            report.script_errors.append(text.splitlines()[0] if text else "exception")
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            args = [str(a.get("value", a.get("description", ""))) for a in params.get("args", [])]
            report.script_errors.append("console.error: " + " ".join(args))
        elif method == "Log.entryAdded":
            entry = params["entry"]
            url = entry.get("url", "")
            # a failed load is reported above, as missing or external
            own = entry.get("source") != "network" and (not url or is_local(url))
            if entry.get("level") == "error" and own:
                report.script_errors.append(entry.get("text", ""))
    return report


# -- Chromium over the DevTools protocol ---------------------------------------------------
def _uncapped() -> None:
    """In the browser's process: no address-space cap (the test suite sets one, ADR 0101, and
    Chromium reserves far more address space than it uses: capped, it dies at start)."""
    import resource

    _, hard = resource.getrlimit(resource.RLIMIT_AS)
    resource.setrlimit(resource.RLIMIT_AS, (hard, hard))


class Browser:
    """One headless Chromium with one tab, driven over its DevTools websocket."""

    def __init__(self, chromium: str, profile: Path) -> None:
        import websocket  # websocket-client

        self.process = subprocess.Popen(
            [chromium, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            preexec_fn=_uncapped,
        )
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 30
        while not port_file.is_file() or len(port_file.read_text().splitlines()) < 2:
            if self.process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{chromium} did not start (exit {self.process.poll()})")
            time.sleep(0.05)
        port, path = port_file.read_text().splitlines()[:2]
        self.ws = websocket.create_connection(
            f"ws://127.0.0.1:{port}{path}", timeout=30, suppress_origin=True
        )
        self.next_id = 0
        self.events: list[dict[str, Any]] = []
        target = self.call("Target.createTarget", url="about:blank")["targetId"]
        self.session = self.call("Target.attachToTarget", targetId=target, flatten=True)[
            "sessionId"
        ]
        for domain in ("Page", "Runtime", "Network", "Log"):
            self.call(f"{domain}.enable", session=True)
        # nothing may leave the machine: a request elsewhere is recorded, then refused at once
        self.call(
            "Network.setBlockedURLs",
            session=True,
            urls=["http://*", "https://*", "ws://*", "wss://*", "ftp://*"],
        )

    def _read(self) -> dict[str, Any]:
        message: dict[str, Any] = json.loads(self.ws.recv())
        return message

    def call(self, method: str, session: bool = False, **params: Any) -> dict[str, Any]:
        self.next_id += 1
        message: dict[str, Any] = {"id": self.next_id, "method": method, "params": params}
        if session:
            message["sessionId"] = self.session
        self.ws.send(json.dumps(message))
        while True:
            answer = self._read()
            if answer.get("id") == self.next_id:
                if "error" in answer:
                    raise RuntimeError(f"{method}: {answer['error']}")
                result: dict[str, Any] = answer.get("result", {})
                return result
            if "method" in answer:
                self.events.append(answer)

    def wait_for(self, method: str, seconds: float) -> bool:
        deadline = time.monotonic() + seconds
        if any(e.get("method") == method for e in self.events):
            return True
        while time.monotonic() < deadline:
            self.ws.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                event = self._read()
            except Exception:  # the websocket's timeout
                break
            finally:
                self.ws.settimeout(30)
            if "method" in event:
                self.events.append(event)
                if event["method"] == method:
                    return True
        return False

    def check(self, url: str, page: str, screenshot: Path | None) -> PageReport:
        self.events.clear()
        self.call("Page.navigate", session=True, url=url)
        loaded = self.wait_for("Page.loadEventFired", 20)
        result = self.call(
            "Runtime.evaluate",
            session=True,
            expression=PAGE_PROBE,
            awaitPromise=True,
            returnByValue=True,
        )
        found = result.get("result", {}).get("value") or {}
        self.wait_for("__settle__", 0.02)  # late errors of this page land here, not on the next
        report = reports_from(page, self.events, list(found.get("unrendered", [])))
        if page.startswith(REFERENCE):
            report.private = list(found.get("private", []))
        if not loaded:
            report.script_errors.append("the page did not finish loading within 20 s")
        if screenshot is not None:
            shot = self.call(
                "Page.captureScreenshot",
                session=True,
                format="jpeg",
                quality=70,
                optimizeForSpeed=True,
            )
            screenshot.parent.mkdir(parents=True, exist_ok=True)
            screenshot.write_bytes(base64.b64decode(shot["data"]))
        return report

    def close(self) -> None:
        with contextlib.suppress(Exception):
            self.call("Browser.close")
        with contextlib.suppress(Exception):
            self.ws.close()
        try:
            self.process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


@contextlib.contextmanager
def browser(chromium: str) -> Iterator[Browser]:
    with tempfile.TemporaryDirectory(prefix="lifecycle-site-check-") as profile:
        b = Browser(chromium, Path(profile))
        try:
            yield b
        finally:
            b.close()


def pages_of(site: Path) -> list[Path]:
    return sorted(p for p in site.rglob("*.html") if p.is_file())


def check_site(
    b: Browser, site: Path, shots: Path | None, pages: list[Path] | None = None
) -> list[PageReport]:
    """Open each page (all of ``site``'s by default) in ``b``, in order."""
    reports = []
    for path in pages_of(site) if pages is None else pages:
        page = path.relative_to(site).as_posix()
        shot = None if shots is None else shots / (page.removesuffix(".html") + ".jpg")
        reports.append(b.check(path.resolve().as_uri(), page, shot))
    return reports


def check_in_parallel(
    chromium: str, first: Browser, site: Path, shots: Path | None, jobs: int
) -> list[PageReport]:
    """The pages shared among ``jobs`` browsers (``first`` and ``jobs - 1`` more), each in a
    thread of its own; the reports in page order."""
    pages = pages_of(site)
    shares = [pages[n::jobs] for n in range(jobs)]
    found: list[list[PageReport]] = [[] for _ in shares]

    def run(n: int) -> None:
        if n == 0:
            found[0] = check_site(first, site, shots, shares[0])
            return
        with browser(chromium) as b:
            found[n] = check_site(b, site, shots, shares[n])

    with concurrent.futures.ThreadPoolExecutor(jobs) as pool:
        for done in [pool.submit(run, n) for n in range(jobs)]:
            done.result()
    return sorted((r for share in found for r in share), key=lambda r: r.page)


# -- the synthetic site: one of each problem, and a clean page ----------------------------
SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="40" height="20">'
    '<rect width="40" height="20" fill="#ccc"/></svg>'
)
SYNTHETIC: dict[str, str] = {
    "clean.html": '<p>fine</p><img src="drawing.svg" alt="a drawing"><link rel="stylesheet" '
    'href="data:text/css,p{color:black}"><script>document.title = "ok";</script>',
    "external-script.html": '<p>x</p><script src="https://cdn.example.org/lib.js"></script>',
    "external-image.html": '<img src="http://203.0.113.7/pixel.png" alt="remote">',
    "mermaid-source.html": '<pre class="mermaid">stateDiagram-v2\n  A --> B</pre>',
    "mermaid-code.html": '<div class="highlight-mermaid"><pre>stateDiagram-v2</pre></div>',
    "broken-diagram.html": '<img src="missing.svg" alt="gone">',
    "malformed-diagram.html": '<img src="malformed.svg" alt="not SVG">',
    "script-error.html": '<script>throw new Error("boom")</script>',
    "console-error.html": '<script>console.error("bad thing")</script>',
    "sub/missing-style.html": '<link rel="stylesheet" href="../nowhere.css"><p>x</p>',
    "reference/private.html": "<article><p>decided in <code>lifecycle._protocol</code></p>"
    "</article>",
    "notes.html": "<p>the kernel lives in <code>lifecycle._protocol</code> (not the reference)</p>",
}
#: The problem kinds the check must find on each synthetic page (the clean one: none).
EXPECTED: dict[str, set[str]] = {
    "clean.html": set(),
    "external-script.html": {"external request"},
    "external-image.html": {"external request", "unrendered diagram"},
    "mermaid-source.html": {"unrendered diagram"},
    "mermaid-code.html": {"unrendered diagram"},
    "broken-diagram.html": {"local file did not load", "unrendered diagram"},
    "malformed-diagram.html": {"unrendered diagram"},
    "script-error.html": {"script error"},
    "console-error.html": {"script error"},
    "sub/missing-style.html": {"local file did not load"},
    "reference/private.html": {"private name in the reference"},
    "notes.html": set(),
}


def write_synthetic(folder: Path) -> None:
    for name, body in SYNTHETIC.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(
            f"<!doctype html><html><head><title>t</title></head><body>{body}</body></html>",
            encoding="utf-8",
        )
    (folder / "drawing.svg").write_text(SVG, encoding="utf-8")
    (folder / "malformed.svg").write_text(SVG.replace("</svg>", ""), encoding="utf-8")


def kinds(report: PageReport) -> set[str]:
    return {problem.split(":", 1)[0] for problem in report.problems}


def self_test(b: Browser) -> list[str]:
    """Check the synthetic site; the differences from :data:`EXPECTED` (none: the check works)."""
    with tempfile.TemporaryDirectory(prefix="lifecycle-site-selftest-") as tmp:
        write_synthetic(Path(tmp))
        reports = {r.page: r for r in check_site(b, Path(tmp), None)}
    wrong = []
    for page, expected in EXPECTED.items():
        got = kinds(reports[page])
        if got != expected:
            wrong.append(f"{page}: expected {sorted(expected)}, found {reports[page].problems}")
    return wrong


def find_chromium(given: str | None) -> str | None:
    for name in ([given] if given else []) + ["chromium", "chromium-browser", "google-chrome"]:
        found = shutil.which(name)
        if found:
            return found
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("site", nargs="?", type=Path, default=DEFAULT_SITE)
    parser.add_argument("--screenshots", type=Path, default=DEFAULT_SHOTS)
    parser.add_argument("--chromium", default=os.environ.get("CHROMIUM"))
    parser.add_argument(
        "--jobs", type=int, default=2, help="browsers opening pages at once (2: one per core)"
    )
    args = parser.parse_args(argv)
    chromium = find_chromium(args.chromium)
    if chromium is None:
        print("check_site: no Chromium found (Debian: apt-get install chromium)", file=sys.stderr)
        return 2
    if not pages_of(args.site):
        print(f"check_site: no HTML pages under {args.site} (run make docs)", file=sys.stderr)
        return 2
    began = time.monotonic()
    shutil.rmtree(args.screenshots, ignore_errors=True)
    with browser(chromium) as b:
        wrong = self_test(b)
        if wrong:
            print("check_site: the check missed a planted problem:", *wrong, sep="\n  ")
            return 2
        reports = check_in_parallel(chromium, b, args.site, args.screenshots, args.jobs)
    bad = [r for r in reports if r.problems]
    for r in bad:
        print(f"{r.page}:")
        for problem in r.problems:
            print(f"  {problem}")
    print(
        f"check_site: {len(reports)} pages of {args.site} opened in {Path(chromium).name} "
        f"in {time.monotonic() - began:.0f} s; {len(bad)} with a problem; "
        f"screenshots in {args.screenshots}"
    )
    return 1 if bad else 0


if __name__ == "__main__":
    raise SystemExit(main())
