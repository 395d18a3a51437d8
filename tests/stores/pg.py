"""A throwaway PostgreSQL server for tests and benchmarks, from the server binaries on the
machine: ``initdb`` into a temporary folder, ``pg_ctl start`` on a free 127.0.0.1 port,
password authentication over TCP. As root (CI), the server runs as the ``postgres`` user,
since PostgreSQL refuses to run as root.

Missing binaries are an error with a clear message, never a silent skip.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import socket
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

USER = "lifecycle"
PASSWORD = "s3cret-Pw_for-tests"  # deliberately odd, so a test can look for it in messages


class PostgresUnavailable(RuntimeError):
    """The server binaries are missing or the server would not start."""


def find_bin_dir() -> Path:
    """The folder holding ``initdb`` and ``pg_ctl``: ``$LIFECYCLE_PG_BIN``, ``pg_config``'s
    ``--bindir``, the newest ``/usr/lib/postgresql/*/bin``, or the ``PATH``."""
    candidates: list[Path] = []
    if os.environ.get("LIFECYCLE_PG_BIN"):
        candidates.append(Path(os.environ["LIFECYCLE_PG_BIN"]))
    candidates += sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    which = shutil.which("initdb")
    if which:
        candidates.append(Path(which).parent)
    for c in candidates:
        if (c / "initdb").exists() and (c / "pg_ctl").exists():
            return c
    raise PostgresUnavailable(
        "PostgreSQL server binaries (initdb, pg_ctl) not found in $LIFECYCLE_PG_BIN, "
        "/usr/lib/postgresql/*/bin or PATH: install the PostgreSQL server (e.g. apt-get "
        "install postgresql) -- the `postgres` tests need them and are not skipped"
    )


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class PgServer:
    """One server. ``url(...)`` gives a store URL; ``stop``/``start`` restart it in place
    (same port, same data) for fault tests; ``destroy`` stops it and removes its folder."""

    def __init__(
        self, *, durable: bool = False, port: int | None = None, initdb: bool = True
    ) -> None:
        self.bin = find_bin_dir()
        self.port = port if port is not None else free_port()
        self.durable = durable
        self.root = Path(tempfile.mkdtemp(prefix="lifecycle-pg-"))
        self.data = self.root / "data"
        self.log = self.root / "server.log"
        self._as_postgres = os.geteuid() == 0
        if self._as_postgres:
            try:
                entry = pwd.getpwnam("postgres")
            except KeyError as e:
                raise PostgresUnavailable(
                    "running as root, and there is no `postgres` user to run the server as"
                ) from e
            os.chown(self.root, entry.pw_uid, entry.pw_gid)
        self.root.chmod(0o700)
        if initdb:
            self._initdb()

    @classmethod
    def standby_of(cls, primary: PgServer, name: str = "standby1") -> PgServer:
        """A streaming standby of ``primary`` (started), on its own port and folder, from
        ``pg_basebackup``; it reports to the primary as ``name`` (for
        ``synchronous_standby_names``)."""
        standby = cls(durable=primary.durable, initdb=False)
        standby._run(
            "pg_basebackup",
            "-D",
            str(standby.data),
            "-d",
            f"host=127.0.0.1 port={primary.port} user={USER} password={PASSWORD}",
            "-X",
            "stream",
            "--no-sync",
        )
        conninfo = (
            f"host=127.0.0.1 port={primary.port} user={USER} password={PASSWORD} "
            f"application_name={name}"
        )
        with (standby.data / "postgresql.auto.conf").open("a") as f:
            f.write(
                f"port = {standby.port}\n"
                f"unix_socket_directories = '{standby.root}'\n"
                f"primary_conninfo = '{conninfo}'\n"
            )
        signal_file = standby.data / "standby.signal"
        signal_file.write_text("")
        if standby._as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(signal_file, entry.pw_uid, entry.pw_gid)
        standby.start()
        return standby

    def configure(self, *settings: str) -> None:
        """Append settings to ``postgresql.conf`` (takes effect on start or reload)."""
        with (self.data / "postgresql.conf").open("a") as f:
            f.write("\n".join(settings) + "\n")

    def promote(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-w", "-t", "30", "promote")

    def processes(self) -> list[int]:
        """The postmaster's pid and its children's (backends, walsender, ...)."""
        postmaster = int((self.data / "postmaster.pid").read_text().split()[0])
        out = [postmaster]
        for entry in os.listdir("/proc"):
            if not entry.isdigit():
                continue
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[1]) == postmaster:
                out.append(int(entry))
        return out

    def kill(self) -> None:
        """A host crash: SIGKILL the postmaster and every process of the server at once."""
        import signal

        for pid in self.processes():
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)

    # -- commands -----------------------------------------------------------------------
    def _run(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        cmd = [str(self.bin / args[0]), *args[1:]]
        if self._as_postgres:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        env = {k: v for k, v in os.environ.items() if not k.startswith("PG")}
        env["LC_ALL"] = "C"
        done = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=self.root)
        if check and done.returncode != 0:
            log = self.log.read_text() if self.log.exists() else ""
            raise PostgresUnavailable(
                f"{' '.join(args[:2])} failed ({done.returncode}): {done.stderr.strip()}\n{log}"
            )
        return done

    def _initdb(self) -> None:
        pwfile = self.root / "pw"
        pwfile.write_text(PASSWORD + "\n")
        if self._as_postgres:
            entry = pwd.getpwnam("postgres")
            os.chown(pwfile, entry.pw_uid, entry.pw_gid)
        pwfile.chmod(0o600)
        self._run(
            "initdb",
            "-D",
            str(self.data),
            "-U",
            USER,
            f"--pwfile={pwfile}",
            "--auth-local=trust",
            "--auth-host=scram-sha-256",
            "-E",
            "UTF8",
            "--no-instructions",
            *(() if self.durable else ("--no-sync",)),
        )
        pwfile.unlink()
        settings = [
            "listen_addresses = '127.0.0.1'",
            f"port = {self.port}",
            f"unix_socket_directories = '{self.root}'",
            "max_connections = 200",
            "shared_buffers = 64MB",
            "log_min_messages = warning",
            "deadlock_timeout = 200ms",
        ]
        if not self.durable:  # tests: no fsync; benchmarks keep PostgreSQL's defaults
            settings += ["fsync = off", "synchronous_commit = off", "full_page_writes = off"]
        with (self.data / "postgresql.conf").open("a") as f:
            f.write("\n".join(settings) + "\n")

    def start(self) -> None:
        self._run("pg_ctl", "-D", str(self.data), "-l", str(self.log), "-w", "-t", "30", "start")

    def stop(self, mode: str = "fast") -> None:
        self._run("pg_ctl", "-D", str(self.data), "-m", mode, "-w", "-t", "30", "stop", check=False)

    def running(self) -> bool:
        return self._run("pg_ctl", "-D", str(self.data), "status", check=False).returncode == 0

    def destroy(self) -> None:
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.root, ignore_errors=True)

    # -- URLs ---------------------------------------------------------------------------
    def url(
        self,
        *,
        schema: str | None = None,
        password: str = PASSWORD,
        user: str = USER,
        dbname: str = "postgres",
    ) -> str:
        query = f"?schema={schema}" if schema else ""
        return f"postgresql://{user}:{password}@127.0.0.1:{self.port}/{dbname}{query}"

    def wait_ready(self, timeout: float = 15.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            with (
                contextlib.suppress(OSError),
                socket.create_connection(("127.0.0.1", self.port), timeout=0.5),
            ):
                return
            time.sleep(0.05)
        raise PostgresUnavailable(f"server on port {self.port} not ready in {timeout}s")


@contextlib.contextmanager
def server(*, durable: bool = False) -> Iterator[PgServer]:
    """A started server for the duration of the block, removed afterwards."""
    pg = PgServer(durable=durable)
    try:
        pg.start()
        yield pg
    finally:
        pg.destroy()
