"""The split search (``batchfuzz.engines.split_search``): which shapes of code
it finds, what it binds, what it reports unbindable and why, and that its
rows round-trip through ``batchfuzz.engines.vllm.resolve``. A small made-up
source tree, then the worker folder of the real 0.33.0 wheel (skipped when
the registry cannot be reached)."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
from hypothesis import Phase, settings

from batchfuzz import engines, registry, runner
from batchfuzz.engines import split_search
from batchfuzz.reference import split_dummy_tokens as oracle
from tests._lazy import LazyModule

vllm = LazyModule("batchfuzz.engines.vllm")  # imports torch: when a test first uses it

RUNNER = '''
import math
import numpy as np
import torch


def cdiv(a, b):
    return -(a // -b)


class Runner:
    def dummy(self, num_tokens):
        num_reqs = min(num_tokens, self.max_num_seqs)
        base = num_tokens // num_reqs
        counts = [base] * num_reqs
        counts[-1] += num_tokens % num_reqs
        return counts

    def fixed(self, num_reqs, num_tokens):
        per, extra = divmod(num_tokens, num_reqs)
        lens = torch.full((num_reqs,), per, dtype=torch.int32)
        if extra:
            lens[-extra:] += 1
        return lens

    def by_comprehension(self, n, r):
        split = [n // r + (i >= r - n % r) for i in range(r)]
        return split

    def by_loop(self, num_tokens, num_reqs):
        per = num_tokens // num_reqs
        out = [per] * num_reqs
        for i in range(num_reqs - num_tokens % num_reqs, num_reqs):
            out[i] += 1  # the loop binds i: no local from outside the split
        return out

    def uniform(self, num_tokens, q):
        num_reqs = cdiv(num_tokens, q)
        out = [q] * num_reqs
        if num_tokens % q:
            out[-1] = num_tokens % q
        return out

    def from_attributes(self):
        each = np.full(self.num_reqs, self.num_tokens // self.num_reqs)
        each[-1] += self.num_tokens % self.num_reqs
        return each

    def reads_a_local(self, num_tokens, num_reqs, floor):
        width = max(floor, 1)
        parts = np.full(num_reqs, num_tokens // num_reqs * width)
        parts[-1] += num_tokens % num_reqs
        return parts

    def blocks(self, num_tokens, block_size):
        num_blocks = num_tokens // block_size
        offset = num_tokens % block_size
        return num_blocks, offset

    def lanes(self, x):
        words = np.zeros(x // 8)
        words[-1] = x % 8
        return words


def make_hook():
    def hook(num_reqs, num_tokens):
        sched = np.full(num_reqs, num_tokens // num_reqs, dtype=np.int32)
        extra = num_tokens % num_reqs
        if extra > 0:
            sched[-extra:] += 1
        return sched
    return hook
'''

F = "vllm/worker/runner.py"


@pytest.fixture()
def tree(tmp_path: Path) -> vllm.ReleaseSource:
    root = tmp_path / "src"
    (root / "vllm" / "worker").mkdir(parents=True)
    (root / "vllm" / "_version.py").write_text("__version__ = version = '0.99.0'\n")
    (root / "vllm" / "__init__.py").write_text("")
    (root / F).write_text(textwrap.dedent(RUNNER))
    return vllm.ReleaseSource.from_dir(root)


def test_the_search_finds_every_shape_and_only_those(tree: vllm.ReleaseSource) -> None:
    sites = {s.function: s for s in split_search.search(tree)}
    assert sorted(sites) == sorted(f"{F}:{q}" for q in (
        "Runner.dummy#counts=num_tokens/num_reqs", "Runner.fixed#lens=num_tokens/num_reqs",
        "Runner.by_comprehension#split=n/r", "Runner.by_loop#out=num_tokens/num_reqs", "Runner.uniform#out=num_tokens/q",
        "Runner.from_attributes#each=self.num_tokens/self.num_reqs", "Runner.reads_a_local#parts=num_tokens/num_reqs",
        "make_hook.<locals>.hook#sched=num_tokens/num_reqs"))  # not blocks (no per-request container), not lanes (a literal)
    assert {f for f, s in sites.items() if not s.problem} == {f"{F}:{q}" for q in (
        "Runner.dummy#counts=num_tokens/num_reqs", "Runner.fixed#lens=num_tokens/num_reqs",
        "Runner.by_comprehension#split=n/r", "Runner.by_loop#out=num_tokens/num_reqs",
        "make_hook.<locals>.hook#sched=num_tokens/num_reqs")}
    assert sites[f"{F}:Runner.uniform#out=num_tokens/q"].problem.startswith("a ceil split: the request count is ceil(num_tokens / q)")
    assert "the operand self.num_tokens is an expression" in sites[f"{F}:Runner.from_attributes#each=self.num_tokens/self.num_reqs"].problem
    lines = textwrap.dedent(RUNNER).splitlines()
    at = {text.strip(): k + 1 for k, text in enumerate(lines)}
    assert sites[f"{F}:Runner.reads_a_local#parts=num_tokens/num_reqs"].problem.startswith(
        f"line {at['width = max(floor, 1)']} reads floor: parameter(s) or local(s) of "
        "Runner.reads_a_local besides the two counts")  # the statement computing width is the split's; floor is not
    dummy = sites[f"{F}:Runner.dummy#counts=num_tokens/num_reqs"]
    # The split's statements: not `num_reqs = min(...)` (num_reqs is an input), not the return.
    first, last = at["base = num_tokens // num_reqs"], at["counts[-1] += num_tokens % num_reqs"]
    assert (dummy.kind, dummy.line, dummy.lines, len(dummy.statements)) == ("floor", first, (first, last), 3)


def test_found_copies_are_bound_to_contract_a_and_resolve(tree: vllm.ReleaseSource) -> None:
    bounds = {b.function: b for b in vllm.bindings(tree) if "#" in b.function}
    assert len(bounds) == 8 and all(b.contract == "split_dummy_tokens" for b in bounds.values())
    bad = bounds[f"{F}:Runner.uniform#out=num_tokens/q"]
    assert bad.status == "unbindable" and bad.target is None and "a ceil split" in bad.reason
    last = bounds[f"{F}:Runner.dummy#counts=num_tokens/num_reqs"]
    assert last.status == "bound" and last.detail.startswith("found by the split search")
    assert last.target is not None and list(last.target(3, 5)) == [1, 1, 3]  # the remainder on the last request
    for name in ("Runner.fixed#lens=num_tokens/num_reqs", "Runner.by_comprehension#split=n/r",
                 "Runner.by_loop#out=num_tokens/num_reqs", "make_hook.<locals>.hook#sched=num_tokens/num_reqs"):
        fn = bounds[f"{F}:{name}"].target
        assert fn is not None
        for r in range(1, 7):
            for n in range(r, 20):
                assert list(map(int, fn(r, n))) == list(oracle.split_dummy_tokens(r, n)), (name, r, n)
    resolved = engines.resolve(last.ref)
    assert last.ref == f"vllm::{tree.ref}::{F}:Runner.dummy#counts=num_tokens/num_reqs::split_dummy_tokens"
    assert list(resolved(2, 5)) == [2, 3] and vllm.resolve(last.ref) is resolved
    with pytest.raises(LookupError, match=r"is unbindable in vllm 0.99.0: .*a ceil split"):
        vllm.resolve(bad.ref or f"vllm::{tree.ref}::{bad.function}::split_dummy_tokens")
    with pytest.raises(LookupError, match=r"has no split site"):
        vllm.resolve(f"vllm::{tree.ref}::{F}:Runner.blocks#num_blocks=num_tokens/block_size::split_dummy_tokens")
    base = settings(max_examples=60, derandomize=True, database=None, deadline=None,
                    phases=(Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink))
    contract = registry.get("split_dummy_tokens")
    found = runner.hunt(contract, last.target, contract.property("matches_oracle"),
                        runner.HuntOptions(base, domain="engine", reduce=True), target_name="copy")
    assert found.failure is not None and (found.failure.case.args["num_reqs"], found.failure.case.args["num_tokens"]) == (3, 5)


def test_the_text_test_lets_every_site_through() -> None:
    """The search parses only files that pass a cheap text test; every file
    with a site passes it, a file without a pair of quotient and remainder does not."""
    assert split_search.search_text(F, textwrap.dedent(RUNNER))
    assert split_search._may_hold_split("a = n // r\nb = n % r\n") and split_search._may_hold_split("q, e = divmod(n, r)\n")
    assert split_search._may_hold_split("x = cdiv(n, q)\ny = n % q\n")
    assert not split_search._may_hold_split("a = n // r\nb = '%s' % name\n")
    assert split_search.search_text("x.py", "def f(:\n") == []  # a file that does not parse has no site


RELEASE = "0.33.0"


@pytest.fixture(scope="module")
def wheel() -> Path:
    try:
        return engines.fetch_wheel("vllm", RELEASE)
    except engines.SourceError as exc:
        pytest.skip(f"cannot download vllm=={RELEASE} from the package registry: {exc}")


def test_the_worker_copies_of_0_33_0(wheel: Path) -> None:
    """Every copy a reader finds in 0.33.0's worker folder (docs/split-copies.md
    says how they were found by hand), with its verdict on a small grid."""
    source = vllm.ReleaseSource.from_wheel(wheel)
    sites = {s.function: s for s in split_search.search(source, under="vllm/v1/worker")}
    v1, gpu = "vllm/v1/worker/gpu_model_runner.py:GPUModelRunner", "vllm/v1/worker/gpu"
    assert sorted(sites) == sorted([
        f"{gpu}/input_batch.py:InputBatch.make_dummy#num_scheduled_tokens=num_tokens/num_reqs",
        f"{gpu}/lora_utils.py:create_lora_capture_hook.<locals>.hook#num_scheduled=num_tokens/num_reqs",
        f"{gpu}/model_runner.py:GPUModelRunner._dummy_run#num_tokens_per_request=num_tokens/num_reqs",
        f"{gpu}/pool/pooling_runner.py:PoolingRunner._dummy_pooler_run_task#num_scheduled_tokens=num_tokens/num_reqs",
        f"{v1}._dummy_run#num_scheduled_tokens_list=num_tokens/max_query_len",
        f"{v1}._dummy_run#num_scheduled_tokens_list=num_tokens/num_reqs",
        f"{v1}._dummy_pooler_run_task#num_scheduled_tokens_np=num_tokens/num_reqs"])
    loader = vllm._Release(source).loader()
    for function, site in sites.items():
        if site.problem:
            assert site.kind == "ceil", function
            continue
        fn = split_search.bind_site(site, loader)
        got = [list(map(int, fn(r, n))) for r in range(1, 5) for n in range(r, 12)]
        want = [list(oracle.split_dummy_tokens(r, n)) for r in range(1, 5) for n in range(r, 12)]
        assert (got == want) == (not function.startswith(v1)), function  # only the v1 copies keep the remainder on the last


def test_the_matrix_runs_the_search_only_for_a_selection_that_can_keep_a_copy(tree: vllm.ReleaseSource) -> None:
    from batchfuzz import matrix

    assert matrix.searched(None, None) and matrix.searched(["*#*"], ["split_dummy_tokens"])
    assert not matrix.searched(["*._allow_microbatching"], None) and not matrix.searched(None, ["make_dummy"])
    keep = matrix.selection(vllm, ["*#counts=*"], None)  # a '#' glob is accepted before the search has run
    with pytest.raises(LookupError, match=r"copies of the split found by the search are named PATH:QUALNAME#"):
        matrix.selection(vllm, ["*pooler*"], None)
    (_, without), = matrix.engine_releases(vllm, [tree], search=False)
    (_, with_copies), = matrix.engine_releases(vllm, [tree])
    assert not any("#" in b.function for b in without())
    kept = [b.function for b in with_copies() if keep(b)]
    assert kept == [f"{F}:Runner.dummy#counts=num_tokens/num_reqs"]


def test_release_sources_list_their_python_files(tree: vllm.ReleaseSource, tmp_path: Path,
                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import json
    import zipfile

    monkeypatch.setenv("BATCHFUZZ_CACHE", str(tmp_path / "cache"))

    assert tree.paths() == ["vllm/__init__.py", "vllm/_version.py", F] and tree.paths("vllm/worker") == [F]
    whl = tmp_path / "vllm-0.99.1-cp38-abi3-manylinux_2_28_x86_64.whl"
    with zipfile.ZipFile(whl, "w") as z:
        z.writestr(F, textwrap.dedent(RUNNER))
        z.writestr("vllm/README.txt", "not python")
        z.writestr("vllm-0.99.1.dist-info/METADATA", "")
    w = vllm.ReleaseSource.from_wheel(whl)
    assert w.paths() == [F] and w.paths(suffix=".txt") == ["vllm/README.txt"]
    first = [s.function for s in split_search.search(w, under="vllm/worker")]
    assert first[0] == f"{F}:Runner.dummy#counts=num_tokens/num_reqs" and len(first) == 8
    memo, = (tmp_path / "cache" / "split-search").iterdir()  # the wheel's files that hold sites, remembered
    assert json.loads(memo.read_text())["paths"] == [F]
    assert [s.function for s in split_search.search(w, under="vllm/worker")] == first
    with pytest.raises(ValueError, match=r"under must be a relative folder inside the release, got '../x'"):
        w.paths("../x")
    with pytest.raises(TypeError, match=r"source must be a ReleaseSource, got str"):
        split_search.search("0.33.0")  # type: ignore[arg-type]
