"""A throw-away Redis server for tests: ``redis-server`` on a free loopback port, no persistence.

Import the fixture into a test module (``from tests.redis_server import redis_url``);
tests using it skip, saying why, when ``redis-server`` is not on PATH or the
``redis`` client is not installed (``.ci/run`` installs both).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

START_TIMEOUT_S = 10.0


def free_port() -> int:
    """A loopback TCP port nothing listens on (the kernel's pick; free at the time of asking)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class _ExitedEarly(RuntimeError):
    pass


@dataclass
class RedisServer:
    """One ``redis-server`` process of our own; ``stop()`` ends it (``kill()`` without a goodbye)."""

    workdir: Path
    port: int = field(default_factory=free_port)
    password: str | None = None
    process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        auth = f":{self.password}@" if self.password else ""
        return f"redis://{auth}127.0.0.1:{self.port}/0"

    def start(self) -> RedisServer:
        exe = shutil.which("redis-server")
        if exe is None:
            pytest.skip("redis-server is not on PATH (apt-get install -y redis-server)")
        pytest.importorskip("redis", reason="the redis client is not installed (pip install 'batchfuzz[redis]')")
        self.workdir.mkdir(parents=True, exist_ok=True)
        for attempt in range(3):  # the free port can be taken between asking and binding: pick another
            try:
                self._launch(exe)
                return self
            except _ExitedEarly:
                if attempt == 2:
                    raise
                self.port = free_port()
        return self

    def _launch(self, exe: str) -> None:
        argv = [exe, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
                "--dir", str(self.workdir), "--daemonize", "no", "--logfile", str(self.workdir / "redis.log")]
        if self.password:
            argv += ["--requirepass", self.password]
        self.process = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        self._wait_for_ping()

    def client(self) -> Any:
        import redis

        return redis.Redis(host="127.0.0.1", port=self.port, db=0, password=self.password, socket_timeout=5)

    def _wait_for_ping(self) -> None:
        import redis

        deadline = time.monotonic() + START_TIMEOUT_S
        client = redis.Redis(host="127.0.0.1", port=self.port, password=self.password, socket_connect_timeout=0.5,
                             socket_timeout=0.5)
        while True:
            assert self.process is not None
            if self.process.poll() is not None:
                log = (self.workdir / "redis.log").read_text() if (self.workdir / "redis.log").exists() else ""
                raise _ExitedEarly(f"redis-server exited with {self.process.returncode} on port {self.port}:\n{log[-2000:]}")
            try:
                if client.ping():
                    client.close()
                    return
            except (redis.exceptions.RedisError, OSError):
                pass
            if time.monotonic() > deadline:
                self.stop()
                raise RuntimeError(f"redis-server on port {self.port} did not answer PING within {START_TIMEOUT_S:g}s")
            time.sleep(0.02)

    def kill(self) -> None:
        """SIGKILL: the server vanishes mid-conversation, as a crashed or preempted host does."""
        if self.process is not None and self.process.poll() is None:
            self.process.kill()
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=10)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[RedisServer]:
    """A running server of this test's own; stopped afterwards."""
    server = RedisServer(tmp_path / "redis").start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def redis_url(redis_server: RedisServer) -> str:
    """``redis://127.0.0.1:PORT/0`` of a running server of this test's own."""
    return redis_server.url


# A RESP3 greeting (what redis-py 5+ asks for with HELLO 3): the server is a Redis speaking protocol 3.
_HELLO = b"%3\r\n$6\r\nserver\r\n$5\r\nredis\r\n$5\r\nproto\r\n:3\r\n$7\r\nversion\r\n$5\r\n7.0.0\r\n"


class WrongTypeServer:
    """A fake Redis on a free loopback port that greets and answers PING as a
    Redis does, then answers every other command (and each command of a
    MULTI/EXEC pipeline) with ``reply``, a RESP reply of the wrong type
    (``b":7\\r\\n"`` where a set belongs). ``hello``: the greeting (a wrong one
    makes the connection itself fail). ``close()`` stops it."""

    def __init__(self, reply: bytes, hello: bytes = _HELLO) -> None:
        import threading

        self.reply, self.hello = reply, hello
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen()
        self.url = f"redis://127.0.0.1:{self.sock.getsockname()[1]}/0"
        threading.Thread(target=self._serve, daemon=True).start()

    def close(self) -> None:
        self.sock.close()

    def _serve(self) -> None:
        import threading

        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:  # closed
                return
            threading.Thread(target=self._answer, args=(conn,), daemon=True).start()

    def _answer(self, conn: socket.socket) -> None:
        with conn, conn.makefile("rb") as f:
            queued: int | None = None  # commands queued since MULTI
            while (command := _read_command(f)) is not None:
                name = command[0].upper()
                if name == b"HELLO":
                    conn.sendall(self.hello)
                elif name == b"PING":
                    conn.sendall(b"+PONG\r\n")
                elif name == b"MULTI":
                    queued = 0
                    conn.sendall(b"+OK\r\n")
                elif name == b"EXEC" and queued is not None:
                    conn.sendall(b"*%d\r\n" % queued + self.reply * queued)
                    queued = None
                elif queued is not None:
                    queued += 1
                    conn.sendall(b"+QUEUED\r\n")
                elif name == b"CLIENT":
                    conn.sendall(b"+OK\r\n")
                else:
                    conn.sendall(self.reply)


def _read_command(f: Any) -> list[bytes] | None:
    """One RESP command (an array of bulk strings) from ``f``; None at the end of the connection."""
    line = f.readline()
    if not line.startswith(b"*"):
        return None
    words = []
    for _ in range(int(line[1:])):
        size = int(f.readline()[1:])
        words.append(f.read(size + 2)[:-2])
    return words
