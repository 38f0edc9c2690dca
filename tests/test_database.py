"""The example database of a run (``batchfuzz.fuzz.database``), against a real ``redis-server``.

Each Redis test starts a server of its own (``tests/redis_server.py``) on a
free loopback port without persistence; they skip when ``redis-server`` or
the ``redis`` client is missing. Cross-process tests run short Python
subprocesses that import only Hypothesis, redis and ``batchfuzz.fuzz.database``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path
from typing import Any

import pytest
from hypothesis.database import DirectoryBasedExampleDatabase, ReadOnlyDatabase

from batchfuzz.fuzz.database import (
    DatabaseError,
    DatabaseWarning,
    LocalAndSharedDatabase,
    SharedRedisDatabase,
    open_database,
    parse_redis_url,
    redact,
)
from tests.redis_server import RedisServer, WrongTypeServer, free_port, redis_server, redis_url

__all__ = ["redis_server", "redis_url"]  # fixtures, imported for pytest

REPO = Path(__file__).resolve().parent.parent


def _keys(server: RedisServer) -> list[bytes]:
    return sorted(server.client().keys("*"))


def _shared(db: Any) -> SharedRedisDatabase:
    assert isinstance(db, LocalAndSharedDatabase)
    assert isinstance(db.shared, SharedRedisDatabase)
    return db.shared


# --------------------------------------------------------------------------- specs that need no server


def test_off_and_none_mean_no_database(tmp_path: Path) -> None:
    assert open_database(None, local_dir=tmp_path) is None
    assert open_database("off", local_dir=tmp_path) is None


def test_a_directory_spec_is_a_directory_database(tmp_path: Path) -> None:
    db = open_database(tmp_path / "db", local_dir=None)
    assert isinstance(db, DirectoryBasedExampleDatabase)
    db.save(b"k", b"v")
    assert list(DirectoryBasedExampleDatabase(tmp_path / "db").fetch(b"k")) == [b"v"]
    ro = open_database(str(tmp_path / "db"), local_dir=None, read_only=True)
    assert isinstance(ro, ReadOnlyDatabase)
    ro.save(b"k", b"w")
    ro.delete(b"k", b"v")
    assert list(ro.fetch(b"k")) == [b"v"]


def test_a_regular_file_is_not_a_database_directory(tmp_path: Path) -> None:
    f = tmp_path / "file"
    f.write_text("x")
    with pytest.raises(DatabaseError, match=r"database directory .*file.* exists and is not a directory"):
        open_database(f, local_dir=None)


@pytest.mark.parametrize(("spec", "match"), [
    ("http://example.com/db", "scheme must be redis:// or rediss://"),
    ("redis://localhost:notaport/0", "bad database URL redis://localhost:notaport/0"),
    ("redis://:6379/0", "no host"),
    ("redis://localhost:6379/zero", "database number like /0"),
    ("redis://localhost:6379/0?namespace=a%20b", "namespace must be"),
    ("redis://localhost:6379/0?expire_days=-1", "expire_days must be a positive number"),
    ("redis://localhost:6379/0?expire_days=soon", "expire_days must be a positive number"),
    ("", "must be 'off', a directory or a redis:// URL"),
])
def test_bad_specs_are_database_errors_naming_them(tmp_path: Path, spec: str, match: str) -> None:
    pytest.importorskip("redis")
    with pytest.raises(DatabaseError, match=match):
        open_database(spec, local_dir=tmp_path)


def test_urls_are_parsed_without_connecting() -> None:
    u = parse_redis_url("rediss://ci:pw@cache.example:6380/2?namespace=proj.a&expire_days=7&ssl_cert_reqs=none")
    assert (u.namespace, u.expire_days) == ("proj.a", 7.0)
    assert u.client_url == "rediss://ci:pw@cache.example:6380/2?ssl_cert_reqs=none"  # ours removed, the client's kept
    assert u.shown == "rediss://ci:***@cache.example:6380/2?namespace=proj.a&expire_days=7&ssl_cert_reqs=none"
    assert parse_redis_url("redis://localhost").client_url == "redis://localhost"  # port and db default (6379, 0)
    assert redact("redis://:p@ss@h:1/0") == "redis://:***@h:1/0"  # an unescaped @ in the password: hidden too
    with pytest.raises(DatabaseError, match=r"bad database URL redis://:\*\*\*@\[::1"):
        parse_redis_url("redis://:secret@[::1")


@pytest.mark.parametrize(("text", "shown"), [
    ("redis://:pw@h:1/0", "redis://:***@h:1/0"),
    ("redis://user:pw@h/0", "redis://user:***@h/0"),
    ("--database=rediss://:pw@h:1/0", "--database=rediss://:***@h:1/0"),
    ("redis://h:1/0?ssl=1&password=pw&namespace=n", "redis://h:1/0?ssl=1&password=***&namespace=n"),
    ("redis://h:6379/0", "redis://h:6379/0"),
    ("redis://user@h/0", "redis://user@h/0"),
    ("/a/local:dir@x", "/a/local:dir@x"),
])
def test_a_url_is_made_printable_in_one_place(text: str, shown: str) -> None:
    from batchfuzz.redaction import printable, printable_argv

    assert printable(text) == redact(text) == shown
    assert printable_argv(["batchfuzz", "fuzz", text]) == ["batchfuzz", "fuzz", shown]


def test_bad_argument_types_are_type_errors(tmp_path: Path) -> None:
    with pytest.raises(TypeError, match="spec must be"):
        open_database(6379, local_dir=tmp_path)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="read_only must be a bool"):
        open_database("off", local_dir=tmp_path, read_only="yes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="timeout_s must be a positive number"):
        open_database("off", local_dir=tmp_path, timeout_s=0)


def test_redis_needs_a_local_copy(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"local_dir is required .*redis://:\*\*\*@host:1/0"):
        open_database("redis://:secret@host:1/0", local_dir=None)


def test_a_missing_redis_client_says_how_to_install_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "redis", None)  # makes `import redis` raise ImportError
    with pytest.raises(DatabaseError, match=r"batchfuzz\[redis\]"):
        open_database("redis://127.0.0.1:1/0", local_dir=tmp_path)


def test_an_unreachable_server_at_start_is_a_database_error_naming_it(tmp_path: Path) -> None:
    pytest.importorskip("redis")
    port = free_port()  # nothing listens there
    url = f"redis://:hunter2@127.0.0.1:{port}/3"
    with pytest.raises(DatabaseError) as info:
        open_database(url, local_dir=tmp_path / "local", timeout_s=2)
    text = str(info.value)
    assert f"cannot reach the example database redis://:***@127.0.0.1:{port}/3" in text
    assert "ConnectionError" in text and "hunter2" not in text


# --------------------------------------------------------------------------- a live server


def test_save_and_fetch_reach_redis_and_the_local_copy(tmp_path: Path, redis_server: RedisServer) -> None:
    db = open_database(redis_server.url, local_dir=tmp_path / "local")
    assert isinstance(db, LocalAndSharedDatabase)
    db.save(b"key", b"one")
    db.save(b"key", b"two")
    assert sorted(db.fetch(b"key")) == [b"one", b"two"]
    assert sorted(DirectoryBasedExampleDatabase(tmp_path / "local").fetch(b"key")) == [b"one", b"two"]
    raw = redis_server.client()
    assert _keys(redis_server) == [b"batchfuzz:example:key"]
    assert sorted(raw.smembers(b"batchfuzz:example:key")) == [b"one", b"two"]
    assert 0 < raw.ttl(b"batchfuzz:example:key") <= 30 * 86400
    db.move(b"key", b"other", b"two")
    db.delete(b"key", b"one")
    assert list(db.fetch(b"key")) == [] and list(db.fetch(b"other")) == [b"two"]
    assert list(DirectoryBasedExampleDatabase(tmp_path / "local").fetch(b"other")) == [b"two"]
    assert raw.smembers(b"batchfuzz:example:other") == {b"two"}


def test_values_only_in_redis_are_fetched(tmp_path: Path, redis_server: RedisServer) -> None:
    writer = open_database(redis_server.url, local_dir=tmp_path / "a")
    assert writer is not None
    writer.save(b"k", b"from-a")
    reader = open_database(redis_server.url, local_dir=tmp_path / "b")  # another machine: empty local copy
    assert reader is not None
    assert list(reader.fetch(b"k")) == [b"from-a"]


def test_read_only_writes_nothing_to_redis(tmp_path: Path, redis_server: RedisServer) -> None:
    open_database(redis_server.url, local_dir=tmp_path / "w").save(b"k", b"shared")  # type: ignore[union-attr]
    before = {k: redis_server.client().smembers(k) for k in _keys(redis_server)}
    db = open_database(redis_server.url, local_dir=tmp_path / "local", read_only=True)
    assert isinstance(db, LocalAndSharedDatabase) and db.read_only
    assert list(db.fetch(b"k")) == [b"shared"]
    db.save(b"k", b"mine")
    db.save(b"new", b"mine")
    db.delete(b"k", b"shared")
    db.move(b"k", b"elsewhere", b"shared")
    after = {k: redis_server.client().smembers(k) for k in _keys(redis_server)}
    assert after == before == {b"batchfuzz:example:k": {b"shared"}}
    local = DirectoryBasedExampleDatabase(tmp_path / "local")  # the local copy stays writable
    assert list(local.fetch(b"new")) == [b"mine"] and list(local.fetch(b"elsewhere")) == [b"shared"]


def test_namespaces_keep_projects_apart(tmp_path: Path, redis_server: RedisServer) -> None:
    ours = open_database(redis_server.url + "?namespace=proj-a", local_dir=tmp_path / "a")
    theirs = open_database(redis_server.url + "?namespace=proj-b&expire_days=2", local_dir=tmp_path / "b")
    assert ours is not None and theirs is not None
    ours.save(b"k", b"a")
    theirs.save(b"k", b"b")
    assert list(ours.fetch(b"k")) == [b"a"] and list(theirs.fetch(b"k")) == [b"b"]
    assert _keys(redis_server) == [b"proj-a:example:k", b"proj-b:example:k"]
    assert redis_server.client().ttl(b"proj-b:example:k") <= 2 * 86400


def test_a_password_in_the_url_is_used_and_never_shown(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", password="s3cret-pw").start()
    try:
        db = open_database(server.url, local_dir=tmp_path / "local")
        assert db is not None
        db.save(b"k", b"v")
        assert _keys(server) == [b"batchfuzz:example:k"]
        assert "s3cret-pw" not in repr(db) and ":***@" in repr(db)
        wrong = server.url.replace("s3cret-pw", "wrong-pw")
        with pytest.raises(DatabaseError, match="cannot reach the example database") as info:
            open_database(wrong, local_dir=tmp_path / "local")
        assert "wrong-pw" not in str(info.value) and "s3cret-pw" not in str(info.value)
    finally:
        server.stop()


# --------------------------------------------------------------------------- losing the server mid-run


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_killing_the_server_mid_run_warns_once_and_keeps_every_save(tmp_path: Path, redis_server: RedisServer) -> None:
    messages: list[str] = []
    db = open_database(redis_server.url, local_dir=tmp_path / "local", warn=messages.append)
    shared = _shared(db)
    clock = _Clock()
    shared.clock = clock
    assert db is not None
    for i in range(5):
        db.save(b"k", b"before-%d" % i)
    assert len(redis_server.client().smembers(b"batchfuzz:example:k")) == 5
    redis_server.kill()

    calls = {"n": 0}
    real_pipeline = shared.client.pipeline

    def counting_pipeline(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        return real_pipeline(*args, **kwargs)

    shared.client.pipeline = counting_pipeline
    for i in range(50):  # nothing raises
        db.save(b"k", b"after-%d" % i)
        assert b"before-0" in list(db.fetch(b"k"))  # served by the local copy
    assert len(messages) == 1, messages
    assert "lost the shared example database" in messages[0] and redis_server.url in messages[0]
    assert "local copy" in messages[0]
    assert shared.lost is not None and "ConnectionError" in shared.lost
    assert calls["n"] == 1, "the lost server must not be tried again on every example (back-off)"
    local = set(DirectoryBasedExampleDatabase(tmp_path / "local").fetch(b"k"))
    assert local == {b"before-%d" % i for i in range(5)} | {b"after-%d" % i for i in range(50)}
    assert shared.pending == 50

    clock.now += 1.5  # the back-off has passed: one more try, still down, a longer wait
    db.save(b"k", b"late")
    assert calls["n"] == 2 and len(messages) == 1
    clock.now += 1.5  # within the doubled delay (2 s): not tried
    db.save(b"k", b"later")
    assert calls["n"] == 2

    # The server comes back (empty: no persistence); the next try reconnects and sends the missed saves.
    again = RedisServer(redis_server.workdir, port=redis_server.port).start()
    try:
        clock.now += 60
        db.save(b"k", b"back")
        assert shared.lost is None and shared.pending == 0 and len(messages) == 1
        raw = again.client().smembers(b"batchfuzz:example:k")
        assert raw == {b"after-%d" % i for i in range(50)} | {b"late", b"later", b"back"}
    finally:
        again.stop()


def test_without_the_guard_a_killed_server_raises(tmp_path: Path, redis_server: RedisServer) -> None:
    """The scenario above is real: Hypothesis's own Redis database, unguarded, raises mid-run."""
    import redis
    from hypothesis.extra.redis import RedisExampleDatabase

    db = RedisExampleDatabase(redis.Redis.from_url(redis_server.url, socket_timeout=2))
    db.save(b"k", b"v")
    redis_server.kill()
    with pytest.raises(redis.exceptions.ConnectionError):
        db.save(b"k", b"w")


def test_the_default_warning_is_a_database_warning(tmp_path: Path, redis_server: RedisServer) -> None:
    db = open_database(redis_server.url, local_dir=tmp_path / "local")
    assert db is not None
    redis_server.kill()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(10):
            db.save(b"k", b"v")
    ours = [w for w in caught if issubclass(w.category, DatabaseWarning)]
    assert len(ours) == 1 and "lost the shared example database" in str(ours[0].message)


# --------------------------------------------------------------------------- a server answering wrong types

# RESP replies of the wrong type for every command: an integer, a string, arrays, a null, a set of integers, a map, a double.
WRONG_REPLIES = [b":7\r\n", b"$5\r\nhello\r\n", b"*2\r\n:1\r\n:2\r\n", b"_\r\n", b"~2\r\n:1\r\n:2\r\n",
                 b"%1\r\n:1\r\n:2\r\n", b",1.5\r\n"]


@pytest.mark.parametrize("reply", WRONG_REPLIES)
def test_a_server_answering_wrong_types_is_lost_like_a_silent_one(tmp_path: Path, reply: bytes) -> None:
    """A fetch or a save that gets a reply of the wrong type raises nothing:
    the server is lost (one warning), fetches give the local copy's bytes."""
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'batchfuzz[redis]')")
    server = WrongTypeServer(reply)
    try:
        messages: list[str] = []
        db = open_database(server.url, local_dir=tmp_path / "local", warn=messages.append)
        assert db is not None
        assert list(db.fetch(b"k")) == []  # a set of integers, a string: never handed to Hypothesis as examples
        db.save(b"k", b"v")
        assert list(db.fetch(b"k")) == [b"v"]
    finally:
        server.close()
    assert len(messages) == 1 and "lost the shared example database" in messages[0], messages
    assert _shared(db).lost is not None


def test_a_wrong_greeting_at_start_is_a_database_error(tmp_path: Path) -> None:
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'batchfuzz[redis]')")
    server = WrongTypeServer(b"+OK\r\n", hello=b"$5\r\nhello\r\n")
    try:
        with pytest.raises(DatabaseError, match="cannot reach the example database"):
            open_database(server.url, local_dir=tmp_path / "local")
    finally:
        server.close()


def test_a_fuzz_run_against_a_server_answering_wrong_types_passes_on_the_local_copy(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A correct implementation passes (exit 0), the loss said in summary.json, not an item error (exit 1)."""
    pytest.importorskip("redis", reason="the redis client is not installed (pip install 'batchfuzz[redis]')")
    from batchfuzz import cli

    server = WrongTypeServer(b":7\r\n")
    try:
        code = cli.main(["fuzz", "--contract", "split_dummy_tokens", "--impl", "impl:numpy@cpu", "--property",
                         "matches_oracle", "--profile", "dev", "--max-examples", "20", "--budget", "300",
                         "--database", server.url, "--report", str(tmp_path / "report"), "--corpus",
                         str(tmp_path / "corpus"), "--progress", "none"])
    finally:
        server.close()
    out = capsys.readouterr().out
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert code == 0 and s["errors"] == [], out
    assert s["database_lost"] and "TypeError" in s["database_lost"][0], s["database_lost"]


# --------------------------------------------------------------------------- across processes


def _python(code: str, *args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    full_env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
    full_env["PYTHONPATH"] = str(REPO) + (os.pathsep + full_env["PYTHONPATH"] if full_env.get("PYTHONPATH") else "")
    full_env.update(env or {})
    r = subprocess.run([sys.executable, "-c", textwrap.dedent(code), *args], cwd=REPO, env=full_env,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr
    return r


_SAVE = """
import sys
from batchfuzz.fuzz.database import open_database
open_database(sys.argv[1], local_dir=sys.argv[2]).save(b"shard-key", sys.argv[3].encode())
"""

_FETCH = """
import json, sys
from batchfuzz.fuzz.database import open_database
print(json.dumps(sorted(v.decode() for v in open_database(sys.argv[1], local_dir=sys.argv[2]).fetch(b"shard-key"))))
"""


def test_a_value_saved_by_one_process_is_fetched_by_a_later_one(tmp_path: Path, redis_url: str) -> None:
    _python(_SAVE, redis_url, str(tmp_path / "machine-1"), "shrunk-failure", env={"PYTHONHASHSEED": "1"})
    r = _python(_FETCH, redis_url, str(tmp_path / "machine-2"), env={"PYTHONHASHSEED": "2"})
    assert json.loads(r.stdout) == ["shrunk-failure"]
    assert not (tmp_path / "machine-2").exists() or not any((tmp_path / "machine-2").rglob("*"))  # not from a local copy


# A planted bug that random search does not hit on its first example. Each
# process prints the examples it ran until the first failure and the failing value.
_PLANTED = """
import json, sys
from hypothesis import given, seed, settings, strategies as st
from batchfuzz.fuzz.database import open_database

calls = []

# settings outside seed: Hypothesis's @seed switches the database off, settings applied after it switch it on
@settings(database=open_database(sys.argv[1], local_dir=sys.argv[2]), max_examples=500, deadline=None, derandomize=False)
@seed(int(sys.argv[3]))
@given(st.integers(0, 1000), st.integers(0, 1000))
def test_sum_is_small(a, b):
    calls.append((a, b))
    assert a + b < 1000, (a, b)

try:
    test_sum_is_small()
except AssertionError as exc:
    first = next(i for i, (a, b) in enumerate(calls) if a + b >= 1000)
    print(json.dumps({"failed": True, "first_failure_at": first + 1, "first": calls[first], "final": list(exc.args[0])}))
else:
    print(json.dumps({"failed": False}))
"""


def test_a_failure_shrunk_in_one_process_is_replayed_first_by_another(tmp_path: Path, redis_url: str) -> None:
    """Shard 1 finds and shrinks a failure; shard 2 (another process, another local copy) fails on its first example."""
    one = json.loads(_python(_PLANTED, redis_url, str(tmp_path / "shard-1"), "1").stdout)
    assert one["failed"] and one["first_failure_at"] > 1  # found by search, not on the first example
    two = json.loads(_python(_PLANTED, redis_url, str(tmp_path / "shard-2"), "2").stdout)
    assert two["failed"]
    assert two["first_failure_at"] == 1, two
    assert two["first"] == one["final"]  # the very example shard 1 shrunk to
    # The control: without the shared database, seed 2 needs a search of its own.
    alone = json.loads(_python(_PLANTED, str(tmp_path / "alone-db"), str(tmp_path / "unused"), "2").stdout)
    assert alone["failed"] and alone["first_failure_at"] > 1, alone


def test_a_redis_url_in_the_environment_is_the_fuzz_jobs_database_with_a_local_directory(
        tmp_path: Path, redis_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """``BATCHFUZZ_DATABASE=redis://...`` is what ``fuzz`` opens; the local copy (and the
    profiles' directory database) stays a directory, not a folder named ``redis:``."""
    from batchfuzz import profiles
    from batchfuzz.fuzz import controller
    from batchfuzz.fuzz.request import FuzzRequest

    monkeypatch.setenv(profiles.DATABASE_ENV_VAR, redis_url)
    monkeypatch.chdir(tmp_path)
    assert profiles.database_path() == profiles.DEFAULT_DATABASE
    assert controller._database(FuzzRequest(profile="nightly")) == redis_url
    monkeypatch.setenv(profiles.DATABASE_ENV_VAR, str(tmp_path / "dir"))
    assert profiles.database_path() == str(tmp_path / "dir")


def test_check_reads_a_shared_database_without_writing_to_it(tmp_path: Path, redis_server: RedisServer,
                                                              monkeypatch: pytest.MonkeyPatch) -> None:
    """``batchfuzz check --database redis://...`` replays what the nightly job
    shared but writes nothing there: the failure it finds and shrinks goes to
    the local copy only."""
    from batchfuzz import cli

    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("BATCHFUZZ_DATABASE", str(tmp_path / "local"))
    shared = redis_server.client()
    shared.set(b"unrelated", b"1")  # the server is not empty; only keys check writes would be new
    rc = cli.main(["check", "split_dummy_tokens", "variant:remainder_to_last.input_batch", "--budget", "20",
                   "--no-isolation", "--database", redis_server.url])
    assert rc == 1
    assert _keys(redis_server) == [b"unrelated"]
    assert any((tmp_path / "local").rglob("*")), "the shrunk failure should be in the local copy"


def test_check_with_an_unreachable_shared_database_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    from batchfuzz import cli

    rc = cli.main(["check", "split_dummy_tokens", "impl:numpy", "--database", f"redis://127.0.0.1:{free_port()}/0"])
    assert rc == 2
    err = capsys.readouterr().err
    try:
        import redis  # noqa: F401
    except ImportError:  # the README's test install has no redis extra: a usage error saying how to get it
        assert "needs the redis client" in err, err
    else:
        assert "cannot reach the example database" in err, err


# --------------------------------------------------------------------------- the password in what a run writes


def _files_holding(root: Path, secret: bytes) -> list[str]:
    """Every regular file under ``root`` whose bytes hold ``secret`` (symbolic links and the like are skipped)."""
    return sorted(str(p) for p in root.rglob("*") if p.is_file() and not p.is_symlink() and secret in p.read_bytes())


@pytest.mark.parametrize("form", ["--database URL", "--database=URL", "?password=SECRET"])
def test_a_fuzz_run_writes_the_redis_password_nowhere(tmp_path: Path, form: str) -> None:
    """The promise of docs/nightly.md: the password of a ``--database`` URL is
    in no file a ``fuzz --observe`` run writes (its reports, ``.run/``, the
    observability records, the corpus, the local copy) nor in its output.
    A planted failure makes the run write a corpus entry and a failure report."""
    secret = "Pw-0f-the-night"
    server = RedisServer(tmp_path / "redis", password=secret).start()
    try:
        url = server.url if form != "?password=SECRET" else f"redis://127.0.0.1:{server.port}/0?password={secret}"
        planted = tmp_path / "planted.py"
        planted.write_text("def split(num_reqs, num_tokens):\n    return [num_tokens // num_reqs] * num_reqs\n")
        database = ["--database", url] if form == "--database URL" else [f"--database={url}"]
        cmd = [sys.executable, "-m", "batchfuzz", "fuzz", "--contract", "split_dummy_tokens", "--impl", f"{planted}:*",
               "--property", "matches_oracle", "--target", f"split_dummy_tokens={planted}:split", "--profile", "dev",
               "--max-examples", "30", "--budget", "300", "--report", str(tmp_path / "report"),
               "--corpus", str(tmp_path / "corpus"), "--progress", "lines", "--observe", *database]
        env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BATCHFUZZ_", "HYPOTHESIS_"))}
        env.update(PYTHONPATH=str(REPO), BATCHFUZZ_DATABASE=str(tmp_path / "local"))
        r = subprocess.run(cmd, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=400)
    finally:
        server.stop()
    out = r.stdout + r.stderr
    assert r.returncode == 1, out  # the planted failure, found with the shared database in use
    assert secret not in out
    assert "database redis://" in r.stdout and ("***@" in r.stdout or "password=***" in r.stdout), out
    written = [tmp_path / "report", tmp_path / "corpus", tmp_path / ".hypothesis", tmp_path / "local"]
    assert (tmp_path / "report" / ".run" / "job.json").is_file() and any((tmp_path / ".hypothesis" / "observed").iterdir())
    assert [f for root in written for f in _files_holding(root, secret.encode())] == []
    s = json.loads((tmp_path / "report" / "summary.json").read_text())
    assert s["database"] is not None and "***" in s["database"], s["database"]
    merged = tmp_path / "merged"
    from batchfuzz import cli

    assert cli.main(["merge-reports", str(tmp_path / "report"), "--report", str(merged)]) == 1
    assert _files_holding(merged, secret.encode()) == []
