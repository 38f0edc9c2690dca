"""The Hypothesis example database of a run: off, a local directory, or a
shared Redis server (:func:`open_database`).

A shared server is Hypothesis's own ``RedisExampleDatabase``, guarded
(:class:`SharedRedisDatabase`) and behind a local copy that receives every
save first (:class:`LocalAndSharedDatabase`): a nightly run must neither die
nor lose a failure because the server went away. Unreachable at start is a
usage error (:class:`DatabaseError`); lost later, it is said once and retried
after a back-off. ``read_only=True`` (``check`` reading the nightly's
database) writes nothing there. The ``redis`` client is imported only for a
Redis spec. Specs, keys, expiry and secrets: docs/nightly.md ("The example
database").
"""

from __future__ import annotations

import os
import threading
import time
import warnings
from collections.abc import Callable, Iterable
from datetime import timedelta
from pathlib import Path
from typing import Any, NamedTuple, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from hypothesis.database import DirectoryBasedExampleDatabase, ExampleDatabase, MultiplexedDatabase, ReadOnlyDatabase

from batchfuzz.redaction import printable

OFF = "off"
SCHEMES = ("redis", "rediss")
DEFAULT_NAMESPACE = "batchfuzz"
DEFAULT_EXPIRE_DAYS = 30.0
DEFAULT_TIMEOUT_S = 5.0
RETRY_FIRST_S = 1.0
RETRY_MAX_S = 60.0
PENDING_LIMIT = 10_000
_NAMESPACE_CHARS = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-:")
_OUR_QUERY = ("namespace", "expire_days")

T = TypeVar("T")
Warn = Callable[[str], None]


class DatabaseError(ValueError):
    """A database spec that cannot be used: a bad URL, an unreachable server, a file where a directory should be."""


class DatabaseWarning(UserWarning):
    """The shared database was lost mid-run; the run goes on with the local copy."""


class WrongReply(Exception):
    """The server answered with a reply of the wrong type (not a Redis, a broken proxy): lost, as a silent server is."""


# What a reply of the wrong type raises inside the redis client or Hypothesis's Redis database (an integer
# where a set belongs, a string compared with a count, a missing field): handled as a lost server, not a crash.
_WRONG_REPLY = (WrongReply, TypeError, ValueError, IndexError, KeyError, AttributeError)


def _default_warn(message: str) -> None:
    warnings.warn(message, DatabaseWarning, stacklevel=4)


def open_database(
    spec: str | os.PathLike[str] | None,
    *,
    local_dir: str | os.PathLike[str] | None,
    read_only: bool = False,
    warn: Warn | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ExampleDatabase | None:
    """The example database ``spec`` names (see the module docstring).

    ``local_dir`` is the local copy kept beside a Redis database (required for
    one; ignored for a directory spec). ``warn`` receives the one message about
    a shared server lost mid-run (default: ``warnings.warn`` with
    :class:`DatabaseWarning`). ``timeout_s`` bounds every connect and reply.
    Raises :class:`DatabaseError` for a spec that cannot be used.
    """
    if spec is not None and not isinstance(spec, (str, os.PathLike)):
        raise TypeError(f"spec must be None, 'off', a directory path or a redis:// URL, got {type(spec).__name__} {spec!r}")
    if not isinstance(read_only, bool):
        raise TypeError(f"read_only must be a bool, got {type(read_only).__name__} {read_only!r}")
    if warn is not None and not callable(warn):
        raise TypeError(f"warn must be a callable taking the message, got {warn!r}")
    if isinstance(timeout_s, bool) or not isinstance(timeout_s, (int, float)) or not timeout_s > 0:
        raise ValueError(f"timeout_s must be a positive number of seconds, got {timeout_s!r}")
    if spec is None:
        return None
    text = os.fspath(spec)
    if not isinstance(text, str):
        raise TypeError(f"spec must be a str path, got bytes {text!r}")
    if text.strip() == "":
        raise DatabaseError(f"database spec must be 'off', a directory or a redis:// URL, got {text!r}")
    if text == OFF:
        return None
    if "://" in text:
        if local_dir is None:
            raise ValueError(f"local_dir is required with a Redis database ({redact(text)}): the local copy keeps every "
                             "failure if the server is lost")
        local = _directory(local_dir, "local_dir")
        shared = _open_redis(text, warn=warn or _default_warn, timeout_s=float(timeout_s))
        return LocalAndSharedDatabase(local, shared, read_only=read_only)
    db = _directory(text, "database directory")
    return ReadOnlyDatabase(db) if read_only else db


def _directory(path: str | os.PathLike[str], what: str) -> DirectoryBasedExampleDatabase:
    if not isinstance(path, (str, os.PathLike)):
        raise TypeError(f"{what} must be a path, got {type(path).__name__} {path!r}")
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise DatabaseError(f"{what} {str(p)!r} exists and is not a directory")
    return DirectoryBasedExampleDatabase(p)


def redact(url: str) -> str:
    """``url`` with its password replaced by ``***`` (for messages, reports and ``repr``); never raises.
    :func:`batchfuzz.redaction.printable`, the one place that does it."""
    return printable(url)


class RedisURL(NamedTuple):
    """A checked ``redis://`` database URL."""

    client_url: str  # for the redis client: without our own query parameters
    shown: str  # for people: the password replaced by ***
    namespace: str
    expire_days: float


def parse_redis_url(url: str) -> RedisURL:
    """Check a Redis database URL (no connection is made); raises DatabaseError naming it.

    The client gets the URL without our own query parameters (``namespace``,
    ``expire_days``); its own (``ssl_cert_reqs=none``, ...) pass through.
    """
    if not isinstance(url, str):
        raise TypeError(f"url must be a string, got {type(url).__name__} {url!r}")
    shown = redact(url)
    try:
        parts = urlsplit(url)
        _ = parts.port  # raises ValueError on a non-numeric or out-of-range port
    except ValueError as exc:
        raise DatabaseError(f"bad database URL {shown}: {exc}") from None
    if parts.scheme.lower() not in SCHEMES:
        raise DatabaseError(f"unsupported database URL {shown}: the scheme must be redis:// or rediss:// "
                            f"(or give a directory path)")
    if not parts.hostname:
        raise DatabaseError(f"bad database URL {shown}: no host (expected redis://HOST:PORT/DB)")
    path = parts.path.strip("/")
    if path and not (path.isdigit() and path.isascii()):
        raise DatabaseError(f"bad database URL {shown}: the path must be a database number like /0, got {parts.path!r}")
    query = parse_qsl(parts.query, keep_blank_values=True)
    ours = {k: v for k, v in query if k in _OUR_QUERY}
    namespace = ours.get("namespace", DEFAULT_NAMESPACE)
    if not namespace or not set(namespace) <= _NAMESPACE_CHARS:
        raise DatabaseError(f"bad database URL {shown}: namespace must be letters, digits and . _ - :, got {namespace!r}")
    try:
        expire_days = float(ours.get("expire_days", DEFAULT_EXPIRE_DAYS))
    except ValueError:
        expire_days = -1.0
    if not 0 < expire_days < 1e5:
        raise DatabaseError(f"bad database URL {shown}: expire_days must be a positive number of days, "
                            f"got {ours.get('expire_days')!r}")
    client_url = urlunsplit(parts._replace(query=urlencode([(k, v) for k, v in query if k not in _OUR_QUERY])))
    return RedisURL(client_url, shown, namespace, expire_days)


def _redis_module() -> Any:
    try:
        import redis
    except ImportError:
        raise DatabaseError("a redis:// database needs the redis client: pip install 'batchfuzz[redis]' "
                            "(or pip install redis)") from None
    return redis


def _open_redis(url: str, *, warn: Warn, timeout_s: float) -> SharedRedisDatabase:
    client_url, shown, namespace, expire_days = parse_redis_url(url)
    redis = _redis_module()
    from redis.backoff import NoBackoff
    from redis.retry import Retry

    try:
        # One immediate retry (a pooled connection gone stale after a server
        # restart), no client-side back-off: SharedRedisDatabase backs off itself.
        client = redis.Redis.from_url(client_url, socket_connect_timeout=timeout_s, socket_timeout=timeout_s,
                                      retry=Retry(NoBackoff(), 1))
    except (TypeError, ValueError) as exc:
        raise DatabaseError(f"bad database URL {shown}: {exc}") from None
    try:
        client.ping()
    except (redis.exceptions.RedisError, OSError, *_WRONG_REPLY) as exc:
        raise DatabaseError(f"cannot reach the example database {shown}: {type(exc).__name__}: {exc}") from None
    return SharedRedisDatabase(client, url=shown, namespace=namespace, expire_after=timedelta(days=expire_days), warn=warn)


class SharedRedisDatabase(ExampleDatabase):
    """Hypothesis's ``RedisExampleDatabase`` that survives losing its server.

    While the server answers, every call goes through. When a call fails
    (connection refused or reset, timeout, a server error, a reply of the
    wrong type: :data:`_WRONG_REPLY`), ``warn`` is called
    once per process, ``lost`` holds the cause, the call acts as a no-op
    (``fetch`` yields nothing), and the server is skipped for a back-off delay
    before the next try. Saves made meanwhile are remembered (up to
    :data:`PENDING_LIMIT`) and sent once the server answers again. Used inside
    :class:`LocalAndSharedDatabase`, whose local copy receives every save first.
    """

    def __init__(
        self,
        client: Any,
        *,
        url: str,
        namespace: str = DEFAULT_NAMESPACE,
        expire_after: timedelta = timedelta(days=DEFAULT_EXPIRE_DAYS),
        warn: Warn = _default_warn,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__()
        from hypothesis.extra.redis import RedisExampleDatabase
        from redis.exceptions import RedisError

        self.client = client
        self.url = url  # without the password
        self.namespace = namespace
        self.lost: str | None = None  # "ConnectionError: ..." while the server is unreachable
        self.losses = 0  # times the server was lost (warned about the first only)
        self.clock = clock
        self._warn = warn
        self._errors = (RedisError, OSError, *_WRONG_REPLY)
        self._db = RedisExampleDatabase(client, expire_after=expire_after, key_prefix=f"{namespace}:example:".encode(),
                                        listener_channel=f"{namespace}:changes")
        self._warned = False
        self._retry_at = 0.0
        self._delay = RETRY_FIRST_S
        self._pending: dict[tuple[bytes, bytes], None] = {}  # an ordered set of saves the server has not seen
        self._lock = threading.RLock()

    def __repr__(self) -> str:
        return f"SharedRedisDatabase({self.url!r}, namespace={self.namespace!r})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, SharedRedisDatabase) and (self.url, self.namespace) == (other.url, other.namespace)

    def __hash__(self) -> int:
        return hash((self.url, self.namespace))

    @property
    def key_prefix(self) -> bytes:
        return self._db._prefix

    @property
    def pending(self) -> int:
        """Saves made while the server was lost, not yet sent to it."""
        return len(self._pending)

    def fetch(self, key: bytes) -> Iterable[bytes]:
        return self._call(lambda: _values(self._db.fetch(key)), [])

    def save(self, key: bytes, value: bytes) -> None:
        self._call(lambda: self._db.save(key, value), None, remember=(key, value))

    def delete(self, key: bytes, value: bytes) -> None:
        self._call(lambda: self._db.delete(key, value), None, forget=(key, value))

    def move(self, src: bytes, dest: bytes, value: bytes) -> None:
        self._call(lambda: self._db.move(src, dest, value), None, remember=(dest, value), forget=(src, value))

    def _call(self, op: Callable[[], T], default: T, *, remember: tuple[bytes, bytes] | None = None,
              forget: tuple[bytes, bytes] | None = None) -> T:
        with self._lock:
            if forget is not None:
                self._pending.pop(forget, None)
            if self.lost is not None and self.clock() < self._retry_at:
                self._remember(remember)
                return default
            try:
                result = op()
            except self._errors as exc:
                self._lose(exc)
                self._remember(remember)
                return default
            if self.lost is not None:
                try:
                    self._flush()
                except self._errors as exc:
                    self._lose(exc)
            return result

    def _remember(self, pair: tuple[bytes, bytes] | None) -> None:
        if pair is not None and len(self._pending) < PENDING_LIMIT:
            self._pending[pair] = None

    def _flush(self) -> None:
        """The server answers again: send it the saves it missed (raises if it is lost again)."""
        while self._pending:
            key, value = next(iter(self._pending))
            self._db.save(key, value)
            del self._pending[(key, value)]
        self.lost = None

    def _lose(self, exc: BaseException) -> None:
        if self.lost is None:  # newly lost: retry soon
            self.losses += 1
            self._delay = RETRY_FIRST_S
        else:  # a retry failed: wait longer
            self._delay = min(self._delay * 2, RETRY_MAX_S)
        self.lost = f"{type(exc).__name__}: {exc}"
        self._retry_at = self.clock() + self._delay
        if not self._warned:
            self._warned = True
            self._warn(f"batchfuzz: lost the shared example database {self.url} ({self.lost}); continuing with the "
                       f"local copy, which keeps every example; retrying the server with back-off "
                       f"({RETRY_FIRST_S:g}s to {RETRY_MAX_S:g}s) and sending it the missed saves once it answers "
                       f"(further losses are not reported)")

    def _start_listening(self) -> None:
        self._db.add_listener(self._broadcast_change)

    def _stop_listening(self) -> None:
        self._db.remove_listener(self._broadcast_change)


def _values(fetched: Iterable[Any]) -> list[bytes]:
    """What a fetch answered, checked: Hypothesis reads every value as bytes."""
    values = list(fetched)
    wrong = next((v for v in values if not isinstance(v, bytes)), None)
    if wrong is not None:
        raise WrongReply(f"a fetch answered a {type(wrong).__name__} value, not bytes")
    return values


class LocalAndSharedDatabase(MultiplexedDatabase):
    """A local directory database and a shared one, as Hypothesis's ``MultiplexedDatabase``.

    The local copy comes first, so every save reaches it before the shared
    server is tried. ``fetch`` yields the union (local values first).
    ``read_only`` wraps the shared database in ``ReadOnlyDatabase``.
    """

    def __init__(self, local: ExampleDatabase, shared: ExampleDatabase, *, read_only: bool = False) -> None:
        super().__init__(local, ReadOnlyDatabase(shared) if read_only else shared)
        self.local = local
        self.shared = shared
        self.read_only = read_only
