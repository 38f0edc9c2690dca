"""The fork server (``batchfuzz.execution.fork_server``): a process forked from
it forks its own processes from the same server (``share_fork_server``, as a
fuzz job process does), and starts one of its own when a target killed it."""

from __future__ import annotations

import os
import sys
from typing import Any

import pytest

from batchfuzz import registry
from batchfuzz.case import Case
from batchfuzz.execution import PASSED, Isolated, process_context, share_fork_server, without_main_module
from batchfuzz.execution.fork_server import _SHARING_CHECKED
from batchfuzz.execution.processes import _gone

pytestmark = pytest.mark.skipif(process_context().get_start_method() != "forkserver" or
                                not _SHARING_CHECKED[0] <= sys.version_info[:2] <= _SHARING_CHECKED[1],
                                reason="shares a fork server only where multiprocessing has one, on the Pythons read")


def _report_parent(conn: Any) -> None:
    conn.send(os.getppid())


def _child_of(ctx: Any) -> int:
    """The parent pid of a process started here through ``ctx``."""
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=_report_parent, args=(child,))
    proc.start()
    pid = parent.recv()
    proc.join()
    return int(pid)


def _shares(conn: Any) -> None:
    shared = share_fork_server()
    conn.send((shared, os.getppid(), _child_of(process_context())))


def _outlives_its_server(conn: Any) -> None:
    """Shares the server, kills it (as ``tests/hostile.py:kills_fork_server``
    does from a worker), then checks a case in an isolated worker."""
    share_fork_server()
    server = os.getppid()
    os.kill(server, 9)
    assert _gone(server)
    case = Case({"num_reqs": 2, "num_tokens": 5}, {"max_model_len": 5})
    with Isolated(registry.get("split_dummy_tokens"), "impl:numpy@cpu") as ex:
        status = ex.check("sum_is_num_tokens", case, 60).status
    conn.send((status, _child_of(process_context()) != server))


def _run(target: Any) -> Any:
    ctx = process_context()
    parent, child = ctx.Pipe()
    proc = ctx.Process(target=target, args=(child,))
    with without_main_module():
        proc.start()
    child.close()
    try:
        assert parent.poll(240), "the process did not answer"
        return parent.recv()
    finally:
        proc.join(60)


def test_a_process_forked_from_the_fork_server_forks_from_it_too() -> None:
    shared, server, grandchild_parent = _run(_shares)
    assert shared and grandchild_parent == server


def test_a_shared_fork_server_that_is_killed_gives_way_to_one_of_its_own() -> None:
    """The worker's start finds the server gone, and starts from a fresh one."""
    status, elsewhere = _run(_outlives_its_server)
    assert status == PASSED and elsewhere
