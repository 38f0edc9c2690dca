"""Contract I over real processes (``batchfuzz.distributed``): the rank pool
gives the in-process answers on every catalogue variant, a rank killed
inside the all-reduce or hanging outside it is a verdict naming it with no
process left behind, and the in-process mode's own failures. (The registry's
generated tests cover the contract's properties, implementations, error
inputs and variants.)

Cheap on purpose: one pool of up to eight processes for the module, a few
dozen steps per variant; every verdict depends on what the ranks did, never
on how long they took (a deadline is only reached by a rank that never
answers).
"""

from __future__ import annotations

import contextlib
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings

from batchfuzz import distributed, registry
from batchfuzz.distributed import RankFailure, RankPool
from batchfuzz.impl._dp import ARGUMENTS, per_rank_args
from tests._lazy import LazyModule

torch = LazyModule("torch")

CONTRACT = registry.get("coordinate_dp")
PROCESS_VARIANTS = [v for v in CONTRACT.variants if v.fn.__qualname__.startswith("ranks[")]


def _ref(variant: registry.Variant) -> str:
    return variant.fn.__qualname__[len("ranks["):].rsplit(", ", 1)[0]


def _children() -> set[int]:
    """Live (not zombie) processes whose parent is this process, from /proc."""
    me, out = os.getpid(), set()
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == me and fields[0] != "Z":
            out.add(int(entry.name))
    return out


def _gone(pids: list[int]) -> bool:
    return all(not Path(f"/proc/{pid}").exists() for pid in pids)


@pytest.fixture(scope="module")
def pool() -> Iterator[RankPool]:
    with RankPool(distributed.MAX_RANKS, timeout_s=60) as p:
        yield p


def _steps(examples: int) -> list[list[tuple]]:
    """Per-rank arguments of ``examples`` derandomized spec-domain steps (2 to 8 ranks)."""
    out: list[list[tuple]] = []

    @settings(max_examples=examples, derandomize=True, database=None, deadline=None,
              suppress_health_check=list(HealthCheck))
    @given(CONTRACT.strategy("spec"))
    def collect(case: object) -> None:
        out.append(per_rank_args(*(case.args[k] for k in ARGUMENTS)))  # type: ignore[attr-defined]

    collect()
    return out


STEPS = _steps(25)


@pytest.mark.parametrize("variant", PROCESS_VARIANTS, ids=[v.name for v in PROCESS_VARIANTS])
def test_processes_and_in_process_give_the_same_answers(pool: RankPool, variant: registry.Variant) -> None:
    ref = _ref(variant)
    fn = distributed.rank_function(ref)
    assert any(len(s) > 4 for s in STEPS) and any(len(s) == 2 for s in STEPS)
    for ranks in STEPS:
        assert pool.run(ref, ranks) == distributed.run_in_process(fn, ranks), (variant.name, ranks)


def test_the_rank_implementation_agrees_across_modes_with_the_oracle(pool: RankPool) -> None:
    from batchfuzz.impl import coordinate_dp_torch
    from batchfuzz.reference.coordinate_dp import coordinate_dp

    @settings(max_examples=40, derandomize=True, database=None, deadline=None, suppress_health_check=list(HealthCheck))
    @given(CONTRACT.strategy("engine"))
    def check(case: object) -> None:
        args = [case.args[k] for k in ARGUMENTS]  # type: ignore[attr-defined]
        assert pool.run(coordinate_dp_torch.RANK_FUNCTION, per_rank_args(*args)) == coordinate_dp(*args)

    check()
    assert pool.starts == 1  # one start for every call of the module so far


# ---------------------------------------------------------------- ranks that fail


def crash_in_collective(rank: int, world: int, all_reduce, *args: object) -> int:
    """Rank 1 enters the all-reduce and is killed there by the test; rank 0 never reaches it."""
    if rank == 0:
        while True:
            time.sleep(0.05)
    table = torch.zeros(2, world, dtype=torch.int32)
    all_reduce(table)
    return int(table.sum())


def hang_before_collective(rank: int, world: int, all_reduce, *args: object) -> int:
    """Rank 1 never reaches the all-reduce; the others wait in it."""
    if rank == 1:
        while True:
            time.sleep(0.05)
    table = torch.zeros(1, dtype=torch.int32)
    all_reduce(table)
    return 0


def raises_on_rank_2(rank: int, world: int, all_reduce, *args: object) -> int:
    if rank == 2:
        raise ValueError("rank 2 refuses")
    table = torch.zeros(1, dtype=torch.int32)
    all_reduce(table)
    return 0


def collectives_differ(rank: int, world: int, all_reduce, *args: object) -> int:
    """Rank 0 runs a second all-reduce the others never join."""
    table = torch.zeros(1, dtype=torch.int32)
    all_reduce(table)
    if rank == 0:
        all_reduce(table)
    return 0


HERE = __name__


def test_a_rank_killed_inside_the_all_reduce_is_a_crash_naming_it_and_no_process_remains() -> None:
    before = _children()
    pool = RankPool(3, timeout_s=120)
    result: dict[str, BaseException] = {}

    def run() -> None:
        try:
            pool.run(f"{HERE}:crash_in_collective", [(), (), ()])
        except BaseException as exc:
            result["exc"] = exc

    try:
        # Start the pool and learn its processes before the call.
        assert pool.run("batchfuzz.impl.coordinate_dp_torch:coordinate_rank",
                        per_rank_args(*(CONTRACT.examples[0].args[k] for k in ARGUMENTS)))
        pids = pool.pids()
        assert len(pids) == 3 and set(pids) <= _children()
        caller = threading.Thread(target=run)
        caller.start()
        deadline = time.monotonic() + 60
        while (pool.phase(0), pool.phase(1)) != ("running its own code", "inside the all-reduce"):
            assert time.monotonic() < deadline, "rank 1 never entered the all-reduce"
            time.sleep(0.01)
        os.kill(pids[1], 9)
        caller.join(60)
        assert not caller.is_alive()
    finally:
        pool.close()
    exc = result.get("exc")
    assert isinstance(exc, RankFailure) and exc.kind == "crash" and exc.rank == 1, exc
    assert "rank 1: killed by SIGKILL" in str(exc) and "rank 0: running its own code" in str(exc)
    assert _gone(pids) and _children() <= before


def test_a_rank_that_never_reaches_the_collective_is_a_timeout_naming_it() -> None:
    before = _children()
    # The deadline only ends the wait for rank 1, which never answers; the others need far less to reach the
    # all-reduce, even on a loaded machine.
    with RankPool(3, timeout_s=5) as pool:
        with pytest.raises(RankFailure) as info:
            pool.run(f"{HERE}:hang_before_collective", [(), (), ()])
        pids = pool.pids()
        assert pids == []  # stopped after the verdict
        # The next call starts a fresh pool.
        ranks = per_rank_args(*(CONTRACT.examples[1].args[k] for k in ARGUMENTS))
        assert pool.run("batchfuzz.impl.coordinate_dp_torch:coordinate_rank", ranks) == CONTRACT.oracle(
            *(CONTRACT.examples[1].args[k] for k in ARGUMENTS))
        assert pool.starts == 2
    exc = info.value
    assert exc.kind == "timeout" and exc.rank == 1
    assert "rank 1: no answer within 5 s (running its own code)" in str(exc)
    assert "rank 0: no answer within 5 s (inside the all-reduce)" in str(exc)
    assert _children() <= before


def test_a_rank_that_raises_is_an_error_naming_it() -> None:
    with RankPool(3, timeout_s=60) as pool:
        with pytest.raises(RankFailure) as info:
            pool.run(f"{HERE}:raises_on_rank_2", [(), (), ()])
    assert info.value.kind == "error" and info.value.rank == 2 and "ValueError: rank 2 refuses" in str(info.value)


def test_in_process_failures_name_the_rank() -> None:
    with pytest.raises(RankFailure) as info:
        distributed.run_in_process(raises_on_rank_2, [(), (), ()])
    assert info.value.kind == "error" and info.value.rank == 2
    with pytest.raises(RankFailure) as info:
        distributed.run_in_process(collectives_differ, [(), ()])
    assert info.value.kind == "timeout" and info.value.rank == 0 and "never join" in str(info.value)


def test_the_canonical_target_splits_and_joins_the_ranks() -> None:
    from batchfuzz.impl._dp import ranks_target

    case = CONTRACT.examples[2]
    args = [case.args[k] for k in ARGUMENTS]
    target = ranks_target("batchfuzz.impl.coordinate_dp_torch:coordinate_rank", "processes")
    assert target(*args) == CONTRACT.oracle(*args)
    with pytest.raises(ValueError, match="mode must be one of"):
        ranks_target("x:y", "threads")
    with pytest.raises(ValueError, match="per_rank_args must have one entry per rank, 2 <= ranks <= 8, got 1"):
        distributed.run_ranks("x:y", [((1,), ())])
    with pytest.raises(ValueError, match="ref must be 'MODULE:QUALNAME'"):
        distributed.rank_function("nocolon")
    assert np.asarray(args[0]).size == 3


@pytest.mark.gpu
def test_nccl_ranks_give_the_in_process_answers() -> None:
    if torch.cuda.device_count() < 2:
        pytest.skip("needs two CUDA devices (one per rank for NCCL)")
    from batchfuzz.impl import coordinate_dp_torch

    fn = distributed.rank_function(coordinate_dp_torch.RANK_FUNCTION)
    with RankPool(2, backend="nccl", timeout_s=120) as nccl:
        for ranks in [s for s in STEPS if len(s) == 2]:
            assert nccl.run(coordinate_dp_torch.RANK_FUNCTION, ranks) == distributed.run_in_process(fn, ranks)


def _ipv4_interface() -> str | None:
    """A network interface other than loopback that has an IPv4 address, or None."""
    import fcntl
    import socket
    import struct

    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        for _, name in socket.if_nameindex():
            if name.startswith("lo"):
                continue
            try:
                fcntl.ioctl(s.fileno(), 0x8915, struct.pack("256s", name.encode()[:15]))  # SIOCGIFADDR
            except OSError:
                continue
            return name
    return None


def _listening(pids: list[int]) -> list[str]:
    """The local addresses (``ADDRESS:PORT``, hex as /proc writes them) of
    every TCP socket the processes ``pids`` listen on, IPv4 and IPv6."""
    inodes = set()
    for pid in pids:
        for fd in Path(f"/proc/{pid}/fd").iterdir():
            with contextlib.suppress(OSError):
                link = os.readlink(fd)
                if link.startswith("socket:["):
                    inodes.add(link[len("socket:["):-1])
    found = []
    for table in ("tcp", "tcp6"):
        for line in Path(f"/proc/{pids[0]}/net/{table}").read_text().splitlines()[1:]:
            fields = line.split()
            if fields[3] == "0A" and fields[9] in inodes:  # state LISTEN
                found.append(fields[1])
    return found


@pytest.mark.skipif(not Path("/proc/self/net/tcp").exists(), reason="reads the sockets from Linux's /proc")
def test_the_rank_processes_listen_on_loopback_only_whatever_the_environment_says(monkeypatch: pytest.MonkeyPatch) -> None:
    """GLOO_SOCKET_IFNAME naming an outside interface (as on a cluster machine)
    changes nothing: every listening socket of the ranks is on 127.0.0.1."""
    outside = _ipv4_interface()
    if outside is None:
        pytest.skip("this machine has no network interface but loopback with an IPv4 address")
    monkeypatch.setenv("GLOO_SOCKET_IFNAME", outside)
    with RankPool(3, timeout_s=60) as pool:
        ranks = per_rank_args(*(CONTRACT.examples[0].args[k] for k in ARGUMENTS))
        assert pool.run("batchfuzz.impl.coordinate_dp_torch:coordinate_rank", ranks)
        listening = _listening(pool.pids())
    assert listening and all(a.startswith("0100007F:") for a in listening), listening  # 127.0.0.1, little-endian hex


# A process that joined a process group of its own (vLLM's engine does, world size 1) starts a pool: its rank
# processes, forked from it, inherit that group and must still join the pool's.
_IN_A_GROUP = """
import sys, tempfile
import torch.distributed as dist
from batchfuzz import distributed, registry
from batchfuzz.impl._dp import ARGUMENTS, per_rank_args

dist.init_process_group("gloo", store=dist.FileStore(tempfile.mktemp(), 1), rank=0, world_size=1)
case = registry.get("coordinate_dp").examples[2]
ranks = per_rank_args(*(case.args[k] for k in ARGUMENTS))
ref = "batchfuzz.impl.coordinate_dp_torch:coordinate_rank"
with distributed.RankPool(len(ranks), timeout_s=120) as pool:
    same = pool.run(ref, ranks) == distributed.run_in_process(distributed.rank_function(ref), ranks)
dist.destroy_process_group()
sys.exit(0 if same else 3)
"""


def test_a_pool_started_by_a_process_already_in_a_process_group_still_joins_its_ranks() -> None:
    """Before, every rank's init_process_group refused a second default group and the pool's start read EOF
    (seen when a job process had run the live engine first)."""
    import subprocess
    import sys

    done = subprocess.run([sys.executable, "-c", _IN_A_GROUP], capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-3000:]
