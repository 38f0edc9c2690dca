"""GPU tests: device placement, CUDA-graph capture and replay, crash isolation
on a real device fault, and the exhaustive contract-A sweep.

All are marked ``gpu`` and skip without CUDA (conftest.py). The registry's
generated tests already cover every torch implementation on ``cuda`` against
the oracle (tests/test_contracts.py, ids ``...-cuda-...``). Set
``BATCHFUZZ_RESULTS_DIR`` to collect measured figures as JSON.
"""

from __future__ import annotations

import json
import os
import random
import time
from collections.abc import Callable

import numpy as np
import pytest
from hypothesis import settings

from batchfuzz import registry, runner
from batchfuzz.execution import Isolated
from batchfuzz.reference import make_dummy as dummy_oracle
from batchfuzz.reference.make_dummy import DummyBuffers
from batchfuzz.reproduce import reproduction
from batchfuzz.strategies._engine import default_capture_sizes
from tests._lazy import LazyModule

torch = LazyModule("torch")
sweep = LazyModule("batchfuzz.sweep")
make_dummy_torch = LazyModule("batchfuzz.impl.make_dummy_torch")
pad_query_start_loc_torch = LazyModule("batchfuzz.impl.pad_query_start_loc_torch")
split_dummy_tokens_torch = LazyModule("batchfuzz.impl.split_dummy_tokens_torch")

pytestmark = pytest.mark.gpu
CUDA = "cuda"


def _record(name: str, data: dict) -> None:
    out = os.environ.get("BATCHFUZZ_RESULTS_DIR")
    if out:
        os.makedirs(out, exist_ok=True)
        with open(os.path.join(out, f"{name}.json"), "w") as fh:
            json.dump(data, fh, indent=2)


def _capture(step: Callable[[], object]) -> torch.cuda.CUDAGraph:
    """Warm ``step`` up on a side stream, then capture it into a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        step()
    return graph


def _oracle_qsl(nst: list[int], p: int) -> list[int]:
    q = [0]
    for x in nst:
        q.append(q[-1] + x)
    while len(q) < p + 2:
        q.append(q[-1])
    return q[: p + 1]


def test_torch_outputs_stay_on_the_device_with_stated_dtypes() -> None:
    n = split_dummy_tokens_torch.split_dummy_tokens(7, 100, device=CUDA)
    assert n.device.type == "cuda" and n.dtype == torch.int64
    for dtype in (torch.int32, torch.int64):
        buf = DummyBuffers(*(torch.full((k,), -5, dtype=dtype, device=CUDA) for k in (8, 9, 128, 128)))
        batch = make_dummy_torch.make_dummy(5, 100, buf)
        for name in ("num_scheduled_tokens", "seq_lens", "query_start_loc", "positions", "idx_mapping", "logits_indices"):
            t = getattr(batch, name)
            assert t.device.type == "cuda" and t.dtype == dtype, name


def test_layout_kernels_do_not_synchronise_with_the_host() -> None:
    """torch's sync debug mode raises on any host synchronisation."""
    buf = DummyBuffers(*(torch.zeros(k, dtype=torch.int32, device=CUDA) for k in (64, 65, 512, 512)))
    nst = torch.zeros(64, dtype=torch.int32, device=CUDA)
    r, n = torch.tensor(5, device=CUDA), torch.tensor(100, device=CUDA)
    out = torch.zeros(65, dtype=torch.int32, device=CUDA)
    torch.cuda.synchronize()
    torch.cuda.set_sync_debug_mode("error")
    try:
        make_dummy_torch.make_dummy_graph(r, n, buf, nst)
        pad_query_start_loc_torch.pad_query_start_loc_graph(nst, r, 32, out)
        make_dummy_torch.make_dummy(5, 100, buf)
    finally:
        torch.cuda.set_sync_debug_mode("default")
    torch.cuda.synchronize()


def test_make_dummy_cuda_graph_replays_match_eager_and_oracle() -> None:
    max_reqs, max_tokens = 256, 8192
    rng = random.Random(0)
    static = DummyBuffers(*(torch.full((k,), 12345, dtype=torch.int32, device=CUDA)
                            for k in (max_reqs, max_reqs + 1, max_tokens, max_tokens)))
    nst = torch.full((max_reqs,), -1, dtype=torch.int32, device=CUDA)
    r_in = torch.tensor(1, device=CUDA)
    n_in = torch.tensor(1, device=CUDA)
    graph = _capture(lambda: make_dummy_torch.make_dummy_graph(r_in, n_in, static, nst))  # once, over the persistent buffers
    sizes = [(1, 1), (256, 256), (256, 496), (1, 8192), (255, 8192)] + [
        (r, rng.randint(r, max_tokens)) for r in (rng.randint(1, max_reqs) for _ in range(300))]
    start = time.perf_counter()
    for r, n in sizes:
        # Stale garbage between steps, as a persistent buffer would hold.
        for t in (static.seq_lens, static.query_start_loc, static.positions, static.input_ids, nst):
            t.fill_(rng.randint(-1000, 1000))
        r_in.fill_(r)
        n_in.fill_(n)
        graph.replay()
        eager = DummyBuffers(*(torch.full((k,), 777, dtype=torch.int32, device=CUDA)
                               for k in (max_reqs, max_reqs + 1, max_tokens, max_tokens)))
        eager_nst = torch.zeros(max_reqs, dtype=torch.int32, device=CUDA)
        make_dummy_torch.make_dummy_graph(torch.tensor(r, device=CUDA), torch.tensor(n, device=CUDA), eager, eager_nst)
        host = DummyBuffers.zeros(max_reqs, max_tokens, np.int64)
        expected = dummy_oracle.make_dummy(r, n, host)
        assert torch.equal(nst, eager_nst) and torch.equal(static.query_start_loc, eager.query_start_loc)
        assert nst[:r].cpu().tolist() == list(expected.num_scheduled_tokens), (r, n)
        assert static.seq_lens.cpu().tolist() == host.seq_lens.tolist(), (r, n)
        assert static.query_start_loc.cpu().tolist() == host.query_start_loc.tolist(), (r, n)
        assert not static.positions[:n].any() and not static.input_ids[:n].any()
    torch.cuda.synchronize()
    _record("cuda_graph_make_dummy", {"replays": len(sizes), "seconds": time.perf_counter() - start,
                                      "max_num_reqs": max_reqs, "max_num_tokens": max_tokens})


def test_padded_query_start_loc_cuda_graphs_per_capture_size() -> None:
    rng = random.Random(1)
    max_reqs = 512
    nst_buf = torch.zeros(max_reqs, dtype=torch.int32, device=CUDA)
    r_in = torch.tensor(0, device=CUDA)
    out = torch.zeros(max_reqs + 1, dtype=torch.int32, device=CUDA)
    graphs = {}
    sizes = default_capture_sizes(512)
    for p in sizes:  # one graph per padded size, as engines capture
        graphs[p] = _capture(lambda p=p: pad_query_start_loc_torch.pad_query_start_loc_graph(nst_buf, r_in, p, out))
    replays = 0
    start = time.perf_counter()
    # Larger steps then smaller ones, real steps mixed with dummy runs.
    for p in sorted(sizes, reverse=True) + [rng.choice(sizes) for _ in range(300)]:
        r = rng.choice([0, p, max(0, p - 1), rng.randint(0, p)])
        nst = [rng.randint(0, 64) for _ in range(r)]
        nst_buf.copy_(torch.randint(-10**6, 10**6, (max_reqs,), dtype=torch.int32))  # stale tail
        nst_buf[:r] = torch.tensor(nst, dtype=torch.int32)
        r_in.fill_(r)
        out.fill_(-99)
        graphs[p].replay()
        got = out[: p + 1].cpu().tolist()
        eager = pad_query_start_loc_torch.pad_query_start_loc_graph(nst_buf, torch.tensor(r, device=CUDA), p, torch.empty_like(out))
        eager = eager.cpu().tolist()
        assert got == eager == _oracle_qsl(nst, p), (p, r)
        assert out[p + 1 :].eq(-99).all()  # the tail is untouched
        diffs = torch.diff(out[: p + 1])
        assert torch.repeat_interleave(torch.arange(p, device=CUDA), diffs).numel() == sum(nst)
        replays += 1
    torch.cuda.synchronize()
    _record("cuda_graph_query_start_loc", {"graphs": len(graphs), "replays": replays, "seconds": time.perf_counter() - start})


def test_device_fault_is_isolated_reported_and_the_run_continues() -> None:
    contract = registry.get("split_dummy_tokens")
    prop = contract.property("dummy_attention_in_bounds")
    env = {"BATCHFUZZ_KERNEL_DEVICE": CUDA}
    start = time.perf_counter()
    with Isolated(contract, "variant:remainder_to_last.dummy_run", device=CUDA, env=env) as bad:
        r = runner.hunt(contract, bad, prop,
                        runner.HuntOptions(settings(settings(), max_examples=100, database=None), example_timeout_s=60),
                        target_name="variant:remainder_to_last.dummy_run")
        crashes, started = bad.crashes, bad.started
    assert r.failure is not None, "the faulting variant was not found"
    assert r.failure.property == "crash" and "device fault" in r.failure.message, r.failure.message
    assert crashes >= 1
    repro = reproduction(r.failure)
    # The parent's own CUDA context is intact, and a correct target passes in a fresh worker.
    assert torch.ones(4, device=CUDA).sum().item() == 4
    with Isolated(contract, f"impl:torch@{CUDA}", env=env) as good:
        r2 = runner.hunt(contract, good, prop,
                         runner.HuntOptions(settings(settings(), max_examples=50, database=None), example_timeout_s=60),
                         target_name=f"impl:torch@{CUDA}")
    assert r2.failure is None
    _record("crash_isolation", {"variant": "remainder_to_last.dummy_run", "property": prop.name,
                                "failure_property": r.failure.property, "message": r.failure.message[:600],
                                "shrunk_args": r.failure.case.args, "context": r.failure.case.context,
                                "worker_crashes": crashes, "workers_started": started,
                                "reproduction": repro, "then_correct_impl_examples": r2.examples,
                                "seconds": time.perf_counter() - start})


def test_exhaustive_sweep_of_the_production_domain() -> None:
    res = sweep.sweep_split(split_dummy_tokens_torch.split_dummy_tokens_batched, max_reqs=1024, max_tokens=16384, device=CUDA)
    _record("sweep_gpu", {"pairs": res.pairs, "elements": res.elements, "seconds": res.seconds,
                          "failures": res.failures, "device": torch.cuda.get_device_name(0)})
    assert res.ok, res.failures
    assert res.pairs == sum(16384 - r + 1 for r in range(1, 1025))
