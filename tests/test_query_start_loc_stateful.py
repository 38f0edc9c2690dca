"""Contract C, stateful form: one persistent buffer over long sequences of steps.

docs/contracts.md, contract C: "one buffer serves a long sequence of steps of
varying R and P (larger steps then smaller ones, real steps mixed with dummy
runs). After every step its first P + 1 entries obey the contract, whatever
earlier steps left there." A Hypothesis ``RuleBasedStateMachine`` owns the
buffer (numpy, or a torch tensor on CPU/CUDA) and checks every property of one
result after every step, on the returned value and on ``buffer[:P+1]`` as the
model runner hands it to a consumer, and that ``buffer[P+1:]`` is untouched.

Also here: the torch implementation's graph-capturability (meta device, a
TorchFunctionMode that forbids host reads, CUDA graph capture and the sync
debug mode on CUDA), the dtype rule, and the demonstration that fresh arrays
cannot see the shipped bug.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import Any, ClassVar

import numpy as np
import pytest
from hypothesis import Phase, event, given, settings
from hypothesis import strategies as st
from hypothesis.errors import HypothesisException
from hypothesis.stateful import RuleBasedStateMachine, initialize, precondition, rule, run_state_machine_as_test

from batchfuzz import registry, runner
from batchfuzz.case import Case
from batchfuzz.checks import PropertyViolation, assert_array_equal
from batchfuzz.contracts import pad_query_start_loc_variants as bugs
from batchfuzz.contracts.pad_query_start_loc import check_query_start_loc
from batchfuzz.impl import pad_query_start_loc_numpy
from batchfuzz.reference import pad_query_start_loc as oracle
from batchfuzz.reference._args import INT_DTYPES
from batchfuzz.strategies import stale_arrays
from batchfuzz.strategies.pad_query_start_loc import dummy_runs, padded_steps, smaller_steps
from tests._lazy import LazyModule

torch = LazyModule("torch")
pad_query_start_loc_torch = LazyModule("batchfuzz.impl.pad_query_start_loc_torch")
_torch_helpers = LazyModule("tests._torch_helpers")  # the torch-mode guard

CONTRACT = registry.get("pad_query_start_loc")
# Bounded stateful_step_count: 12 steps a run under ci/dev, 50 under the
# nightly profile (thousands of examples).
STEP_COUNT, NIGHTLY_STEP_COUNT = 12, 50
MAX_STEPS_SHRUNK = 3
CUDA = pytest.mark.gpu


# ---------------------------------------------------------------- buffer backends


class NumpyBackend:
    """The persistent buffer is a numpy array; the target is canonical (numpy in)."""

    name = "numpy"

    def buffer(self, stale: np.ndarray) -> Any:
        return stale.copy()

    def read(self, buf: Any) -> np.ndarray:
        return np.array(buf, copy=True)

    def write_real(self, buf: Any, nst: np.ndarray) -> None:
        buf[0] = 0
        buf[1 : nst.size + 1] = np.cumsum(nst)

    def call(self, target: Callable[..., Any], nst: np.ndarray, p: int, buf: Any) -> tuple[Any, np.ndarray]:
        """The target's result, and the counts it was given as they are after the call."""
        passed = nst.copy()
        return target(passed, p, buf), passed

    def host(self, value: Any) -> Any:
        return value


class TorchBackend:
    """The persistent buffer is a tensor on ``device``; the target takes tensors.
    On CUDA the call runs under ``torch.cuda.set_sync_debug_mode("error")``:
    any host synchronisation inside it fails the step."""

    def __init__(self, device: str) -> None:
        self.device = device
        self.name = f"torch-{device}"

    def buffer(self, stale: np.ndarray) -> Any:
        return torch.from_numpy(stale.copy()).to(self.device)

    def read(self, buf: Any) -> np.ndarray:
        return buf.cpu().numpy().copy()

    def write_real(self, buf: Any, nst: np.ndarray) -> None:
        buf[:1].zero_()
        buf[1 : nst.size + 1].copy_(torch.cumsum(torch.from_numpy(nst).to(self.device), 0))

    def call(self, target: Callable[..., Any], nst: np.ndarray, p: int, buf: Any) -> tuple[Any, np.ndarray]:
        t = torch.from_numpy(nst.copy()).to(self.device)
        with _no_sync(self.device):
            raw = target(t, p, buf)
        return raw, t.cpu().numpy()

    def host(self, value: Any) -> Any:
        return value.cpu().numpy() if isinstance(value, torch.Tensor) else value


@contextlib.contextmanager
def _no_sync(device: str) -> Iterator[None]:
    if not device.startswith("cuda"):
        yield
        return
    torch.cuda.synchronize()
    previous = torch.cuda.get_sync_debug_mode()
    torch.cuda.set_sync_debug_mode("error")
    try:
        yield
    finally:
        torch.cuda.set_sync_debug_mode(previous)


# ---------------------------------------------------------------- the machine


def machine_for(target: Callable[..., Any], backend: Any) -> type[RuleBasedStateMachine]:
    """A state machine class over one persistent buffer, calling ``target``.

    ``runs`` (class attribute) records the steps of every run; after a failure
    the last entry is the run Hypothesis replayed last, the shrunk one.
    """

    class PaddedQueryStartLocMachine(RuleBasedStateMachine):
        runs: ClassVar[list[list[str]]] = []

        def __init__(self) -> None:
            super().__init__()
            self.steps: list[str] = []
            type(self).runs.append(self.steps)
            self.cap = 0
            self.last = (0, 0)  # R and P of the previous step

        @initialize(
            cap=st.one_of(st.integers(0, 16), st.sampled_from([64, 256, 1024])),
            dtype=st.sampled_from(INT_DTYPES),
            nst_dtype=st.sampled_from(INT_DTYPES),
            slack=st.one_of(st.just(0), st.integers(1, 4)),
            data=st.data(),
        )
        def new_buffer(self, cap: int, dtype: type, nst_dtype: type, slack: int, data: st.DataObject) -> None:
            """A buffer of ``max_num_reqs + 1`` entries (plus slack) holding stale
            values (shrinks to zeros: a freshly allocated buffer)."""
            self.cap, self.nst_dtype = cap, nst_dtype
            self.stale = data.draw(stale_arrays(cap + 1 + slack, dtype), label="initial buffer")
            self.buf = backend.buffer(self.stale)

        @rule(data=st.data())
        def step(self, data: st.DataObject) -> None:
            """A real step, padded as engines pad it (mixed, uniform decode, long prefill, edges)."""
            _, nst, p, kind = data.draw(padded_steps(max_num_reqs=self.cap), label="step")
            self._run(f"step[{kind}]", nst, p, runner_sequence=False)

        @rule(data=st.data())
        def dummy_run(self, data: st.DataObject) -> None:
            """A dummy run (capture, profiling, idle DP rank) on the same buffer."""
            _, nst, p, _ = data.draw(dummy_runs(self.cap), label="dummy run")
            self._run("dummy_run", nst, p, runner_sequence=False)

        @precondition(lambda self: self.last[1] > 0)
        @rule(data=st.data())
        def smaller_step(self, data: st.DataObject) -> None:
            """A step no larger than the previous one: padded slots meet its leftovers."""
            nst, p = data.draw(smaller_steps(*self.last), label="smaller step")
            self._run("smaller_step", nst, p, runner_sequence=False)

        @rule(data=st.data())
        def runner_step(self, data: st.DataObject) -> None:
            """The model runner's sequence: it writes the real entries itself,
            the target writes the padding, then ``buffer[:P+1]`` goes to the consumer."""
            _, nst, p, kind = data.draw(padded_steps(max_num_reqs=self.cap), label="runner step")
            self._run(f"runner_step[{kind}]", nst, p, runner_sequence=True)

        def _run(self, what: str, nst_list: list[int], p: int, *, runner_sequence: bool) -> None:
            nst: np.ndarray = np.asarray(nst_list, dtype=self.nst_dtype)
            self.steps.append(f"{what}(nst={nst_list}, P={p})")
            before = backend.read(self.buf)
            r, total = nst.size, int(nst.sum())
            if p > r and bool((before[r + 1 : p + 1] != total).any()):
                event("padding overwrites stale values (a forgetful target fails here)")
            if self.last[1] > p:
                event("smaller P than the previous step")
            if runner_sequence:
                backend.write_real(self.buf, nst)
            raw, passed = backend.call(target, nst, p, self.buf)
            after = backend.read(self.buf)
            where = (f"{backend.name} buffer of {after.size} {after.dtype}, step {len(self.steps)}: {what}; "
                     f"steps so far: {self.steps}")
            check_query_start_loc(after[: p + 1], nst, p, f"buffer[:P+1] handed to the consumer, {where}")
            assert_array_equal(backend.host(raw), after[: p + 1], f"returned value vs buffer[:P+1], {where}")
            assert_array_equal(after[p + 1 :], before[p + 1 :], f"buffer[P+1:] must be untouched, {where}")
            assert_array_equal(passed, nst, f"num_scheduled_tokens after the call (the caller's counts), {where}")
            self.last = (nst.size, p)

    return PaddedQueryStartLocMachine


def _machine_settings(min_examples: int = 0, shrink: bool = True) -> settings:
    """The current profile's settings, with a bounded step count. The explain
    phase (which reruns the shrunk case many times to say which parts matter)
    is off: it tripled the cost of a caught variant and the steps say it all."""
    current = settings()
    phases = tuple(p for p in current.phases if p != Phase.explain and (shrink or p != Phase.shrink))
    steps = STEP_COUNT if current.max_examples <= 500 else NIGHTLY_STEP_COUNT
    # No database: every machine of this file is a class of one name, so they would share one key and replay each
    # other's failures (a variant's saved failure shrunk again against the next variant).
    return settings(current, stateful_step_count=steps, report_multiple_bugs=False, database=None,
                    max_examples=max(current.max_examples, min_examples), phases=phases)


def _run_machine(target: Callable[..., Any], backend: Any, min_examples: int = 0,
                 shrink: bool = True) -> tuple[BaseException | None, list[list[str]]]:
    machine = machine_for(target, backend)
    try:
        run_state_machine_as_test(machine, settings=_machine_settings(min_examples, shrink))
    except HypothesisException:
        raise
    except Exception as exc:
        return exc, machine.runs  # type: ignore[attr-defined]
    return None, machine.runs  # type: ignore[attr-defined]


def _torch_binder_cpu(nst: Any, p: Any, out: Any = None) -> Any:
    return CONTRACT.implementation("torch").for_device("cpu")(nst, p, out)


CORRECT_NUMPY_TARGETS = [
    pytest.param(oracle.pad_query_start_loc, id="oracle"),
    pytest.param(pad_query_start_loc_numpy.pad_query_start_loc, id="numpy"),
    pytest.param(_torch_binder_cpu, id="torch-binder-cpu"),
]


@pytest.mark.parametrize("target", CORRECT_NUMPY_TARGETS)
def test_machine_holds_on_a_numpy_buffer(target: Callable[..., Any]) -> None:
    err, runs = _run_machine(target, NumpyBackend())
    assert err is None, f"{err}\nshrunk steps: {runs[-1]}"
    assert sum(len(r) for r in runs) > len(runs), "the machine ran no multi-step sequences"


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_machine_holds_on_a_torch_buffer(device: str) -> None:
    err, runs = _run_machine(pad_query_start_loc_torch.pad_query_start_loc, TorchBackend(device))
    assert err is None, f"{err}\nshrunk steps: {runs[-1]}"


# ---------------------------------------------------------------- known bugs, stateful


def _assert_caught_and_shrunk(target: Callable[..., Any], backend: Any, what: str) -> list[str]:
    err, runs = _run_machine(target, backend, min_examples=50)
    assert err is not None, f"the state machine did not catch {what} in {len(runs)} runs"
    shrunk = runs[-1]
    assert 1 <= len(shrunk) <= MAX_STEPS_SHRUNK, f"{what}: shrunk to {len(shrunk)} steps: {shrunk}\n{err}"
    return shrunk


def test_shipped_unwritten_padding_is_caught_and_shrinks_to_at_most_3_steps() -> None:
    shrunk = _assert_caught_and_shrunk(bugs.padding_unwritten, NumpyBackend(), "padding_unwritten")
    print("padding_unwritten shrunk to:", shrunk)


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=CUDA)])
def test_shipped_unwritten_padding_is_caught_on_a_torch_buffer(device: str) -> None:
    _assert_caught_and_shrunk(bugs.padding_unwritten_torch, TorchBackend(device), "padding_unwritten_torch")


def test_padded_token_count_variant_is_caught() -> None:
    _assert_caught_and_shrunk(bugs.pads_with_padded_token_count, NumpyBackend(), "pads_with_padded_token_count")


@pytest.mark.parametrize("variant", [pytest.param(v, id=v.name) for v in CONTRACT.variants])
def test_every_registered_variant_fails_the_machine(variant: registry.Variant) -> None:
    """Every variant writes a wrong buffer somewhere, so the machine catches
    each (found only, not shrunk: shrinking is what the three tests above pay for)."""
    err, runs = _run_machine(variant.fn, NumpyBackend(), min_examples=50, shrink=False)
    assert err is not None, f"the state machine did not catch {variant.name} in {len(runs)} runs"


@settings(max_examples=100)
@given(case=CONTRACT.domain("spec").cases())
def test_fresh_arrays_cannot_see_the_shipped_bug(case: Case) -> None:
    """The point of the stateful form: a check that only ever uses fresh
    arrays (``out=None``) passes the shipped variant on every case."""
    nst, p = case.args["num_scheduled_tokens"], case.args["num_reqs_padded"]
    assert_array_equal(bugs.padding_unwritten(nst, p), oracle.pad_query_start_loc(nst, p), "fresh query_start_loc")


# ---------------------------------------------------------------- graph capturability


_SHAPES = [(0, 0, 0), (0, 3, 2), (3, 3, 0), (3, 4, 2), (5, 9, 0)]  # (R, P, extra slots in out)


@pytest.mark.parametrize(("r", "p", "extra"), _SHAPES)
@pytest.mark.parametrize("with_out", [False, True])
def test_torch_runs_on_meta_tensors(r: int, p: int, extra: int, with_out: bool) -> None:
    """On the meta device a tensor has no values: any host read raises. The
    implementation runs there, so it never reads a device value on the host."""
    nst = torch.empty(r, dtype=torch.int32, device="meta")
    out = torch.empty(p + 1 + extra, dtype=torch.int64, device="meta") if with_out else None
    q = pad_query_start_loc_torch.pad_query_start_loc(nst, p, out)
    assert q.shape == (p + 1,) and q.device.type == "meta"
    assert q.dtype == (torch.int64 if with_out else torch.int32)


def test_forbid_host_reads_mode_catches_a_host_read() -> None:
    with _torch_helpers.ForbidHostReads(), pytest.raises(AssertionError, match="host read"):
        int(torch.tensor([1, 2]).sum().item())


@pytest.mark.parametrize(("r", "p", "extra"), _SHAPES)
def test_torch_makes_no_host_reads(r: int, p: int, extra: int) -> None:
    nst = torch.arange(1, r + 1, dtype=torch.int64)
    out = torch.full((p + 1 + extra,), -7, dtype=torch.int32)
    with _torch_helpers.ForbidHostReads():
        q = pad_query_start_loc_torch.pad_query_start_loc(nst, p, out)
        fresh = pad_query_start_loc_torch.pad_query_start_loc(nst, p)
    expected = oracle.pad_query_start_loc(nst.numpy(), p)
    assert q.tolist() == expected.tolist() == fresh.tolist()
    assert out[p + 1 :].tolist() == [-7] * extra


@CUDA
def test_torch_is_captured_in_a_cuda_graph_and_replays_over_stale_buffers() -> None:
    """Capture ``pad_query_start_loc(static_nst, P, out=static_out)`` once per
    (R, P), then replay with new counts and a re-staled buffer: the padded
    entries are rewritten on every replay and the tail past P stays as it was."""
    rng = np.random.default_rng(0)
    for r, p, cap in [(0, 4, 8), (1, 1, 4), (3, 8, 16), (37, 64, 128), (256, 512, 1024)]:
        static_nst = torch.zeros(r, dtype=torch.int32, device="cuda")
        static_out = torch.zeros(cap + 1, dtype=torch.int32, device="cuda")
        stream = torch.cuda.Stream()
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):
            pad_query_start_loc_torch.pad_query_start_loc(static_nst, p, static_out)  # warm-up
        torch.cuda.current_stream().wait_stream(stream)
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            fresh = pad_query_start_loc_torch.pad_query_start_loc(static_nst, p)
            pad_query_start_loc_torch.pad_query_start_loc(static_nst, p, static_out)
        for _ in range(5):
            nst = rng.integers(0, 2048, size=r).astype(np.int32)
            stale = rng.integers(-(2**20), 2**20, size=cap + 1).astype(np.int32)
            static_nst.copy_(torch.from_numpy(nst))
            static_out.copy_(torch.from_numpy(stale))
            graph.replay()
            torch.cuda.synchronize()
            expected = oracle.pad_query_start_loc(nst, p).tolist()
            assert static_out[: p + 1].cpu().tolist() == expected, (r, p)
            assert static_out[p + 1 :].cpu().tolist() == stale[p + 1 :].tolist(), (r, p)
            assert fresh.cpu().tolist() == expected, (r, p)


@CUDA
def test_torch_does_not_synchronise_on_cuda() -> None:
    nst = torch.tensor([3, 1, 4], dtype=torch.int64, device="cuda")
    out = torch.full((9,), 99, dtype=torch.int64, device="cuda")
    with _no_sync("cuda"):
        pad_query_start_loc_torch.pad_query_start_loc(nst, 6, out)
        pad_query_start_loc_torch.pad_query_start_loc(nst, 3)
    assert out.cpu().tolist() == [0, 3, 4, 8, 8, 8, 8, 99, 99]


# ---------------------------------------------------------------- dtype rule and torch-side errors


_DTYPE_TARGETS = [
    pytest.param(oracle.pad_query_start_loc, id="oracle"),
    pytest.param(pad_query_start_loc_numpy.pad_query_start_loc, id="numpy"),
    pytest.param(_torch_binder_cpu, id="torch-binder-cpu"),
]


@pytest.mark.parametrize("target", _DTYPE_TARGETS)
@pytest.mark.parametrize("nst_dtype", INT_DTYPES)
@pytest.mark.parametrize("out_dtype", [None, *INT_DTYPES])
def test_dtype_rule(target: Callable[..., Any], nst_dtype: type, out_dtype: type | None) -> None:
    """Without out: nst's dtype. With out: out's dtype, and the result is out[:P+1]."""
    nst: np.ndarray = np.array([2, 0, 5], dtype=nst_dtype)
    if out_dtype is None:
        q = target(nst, 5)
        assert q.dtype == np.dtype(nst_dtype)
    else:
        out: np.ndarray = np.full(8, -1, dtype=out_dtype)
        q = target(nst, 5, out)
        assert q.dtype == np.dtype(out_dtype) and np.shares_memory(q, out)
        assert out[6:].tolist() == [-1, -1]
    assert q.tolist() == [0, 2, 2, 7, 7, 7]


@pytest.mark.parametrize("target", _DTYPE_TARGETS)
def test_a_list_of_ints_gives_int64(target: Callable[..., Any]) -> None:
    assert target([1, 2], 3).dtype == np.int64


def _untyped_pad(*args: Any) -> Any:
    """The torch form, called with wrong types on purpose."""
    return pad_query_start_loc_torch.pad_query_start_loc(*args)


@pytest.mark.parametrize(("call", "error", "match"), [
    (lambda: _untyped_pad(np.array([1]), 1), TypeError,
     r"num_scheduled_tokens must be a torch.Tensor, got ndarray"),
    (lambda: pad_query_start_loc_torch.pad_query_start_loc(torch.tensor([1.0]), 1), TypeError,
     r"num_scheduled_tokens must have dtype int32 or int64, got torch.float32"),
    (lambda: pad_query_start_loc_torch.pad_query_start_loc(torch.tensor([1, 2]), 1), ValueError,
     r"num_reqs_padded must be >= the number of requests R = len\(num_scheduled_tokens\) = 2, got num_reqs_padded=1"),
    (lambda: pad_query_start_loc_torch.pad_query_start_loc(torch.tensor([1]), 2, torch.zeros(3, dtype=torch.int16)), TypeError,
     r"out must have dtype int32 or int64, got torch.int16"),
    (lambda: pad_query_start_loc_torch.pad_query_start_loc(torch.tensor([1]), 4, torch.zeros(3, dtype=torch.int64)), ValueError,
     r"out has 3 entries, needs at least num_reqs_padded \+ 1 = 5"),
    (lambda: _untyped_pad(torch.tensor([1]), 1, np.zeros(3, dtype=np.int64)), TypeError,
     r"out must be a torch.Tensor or None, got ndarray"),
])
def test_torch_native_errors_name_the_argument(call: Callable[[], Any], error: type[Exception], match: str) -> None:
    with pytest.raises(error, match=match):
        call()


# ---------------------------------------------------------------- batchfuzz check sees the stateful bug


@pytest.mark.parametrize("variant_name", ["padding_unwritten", "pads_with_padded_token_count"])
def test_check_catches_the_variant_through_the_registry_properties(variant_name: str) -> None:
    """``batchfuzz check`` runs every property through ``runner.hunt_in_rounds``;
    the out= and history forms make it fail on both variants."""
    results = runner.hunt_in_rounds(CONTRACT, CONTRACT.variant(variant_name).fn, CONTRACT.properties,
                                    runner.HuntOptions(settings(settings(), max_examples=100)), runner.Rounds(budget_s=20),
                                    target_name=variant_name)
    failure = next((r.failure for r in results if r.failure is not None), None)
    assert failure is not None, f"{variant_name} passed every property"
    assert failure.case.args["num_reqs_padded"] <= 2 and failure.case.args["num_scheduled_tokens"].size <= 1


def test_persistent_buffer_property_replays_the_history_in_order() -> None:
    """A larger history step then a smaller final step on a zeroed buffer: the
    shipped variant fails persistent_buffer at the second step, the fix passes."""
    case = Case({"num_scheduled_tokens": np.array([2], dtype=np.int32), "num_reqs_padded": 3},
                {"max_num_reqs": 3, "out": np.zeros(4, dtype=np.int32),
                 "history": [(np.array([5, 5, 5], dtype=np.int32), 3)], "kind": "shipped scenario"})
    prop = CONTRACT.property("persistent_buffer")
    prop.check(pad_query_start_loc_numpy.pad_query_start_loc, case.copy())
    with pytest.raises(PropertyViolation, match="step 2 of 2"):
        prop.check(bugs.padding_unwritten, case.copy())
