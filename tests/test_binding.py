"""batchfuzz.bind and batchfuzz.binding/ on a small engine-shaped source tree.

The fixture engine ``toyengine`` is code in the shape of an engine's (a model
runner whose methods read persistent buffers and configuration, a batch
class with a classmethod constructor, a slice result type, helpers imported
from other modules of the package, and imports of modules that do not exist
here): the binding layer must cut out what it is asked for and run it over
stand-ins, report what is missing, and let the contracts judge the result.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from hypothesis import settings

from batchfuzz import bind, registry, runner
from batchfuzz.bind import Record, Recorder, Stub, Writes
from batchfuzz.reference import pad_query_start_loc as qsl_oracle
from batchfuzz.reference import split_dummy_tokens as dummy_oracle
from batchfuzz.reference import split_ubatches as ubatch_oracle
from tests._lazy import LazyModule

torch = LazyModule("torch")

RUNNER = '''\
"""The toy engine's model runner."""
import numpy as np
import torch

import toyengine.envs as envs
from toyengine.kernels import launch_attention
from toyengine.utils.math import ceil_div
from toyengine.worker.slices import StepSlice, pad_last

PAD_SLOT = -1
FULL_MASK = (1 << 31) - 1
logger = make_logger(__name__)


class ToyRunner:
    def __init__(self, config, device):
        self.config = config
        self.offsets = make_buffer(config.max_num_seqs + 1)
        self.kernels = launch_attention(device)

    @torch.inference_mode()
    def warmup(self, num_tokens: int, uniform: bool = False, profile: bool = False) -> torch.Tensor:
        max_reqs = self.config.max_num_seqs
        if uniform:
            num_reqs = min(max_reqs, ceil_div(num_tokens, self.decode_len))
            counts = [self.decode_len] * num_reqs
        else:
            num_reqs = min(num_tokens, max_reqs)
            counts = [num_tokens // num_reqs] * num_reqs
            for i in range(num_tokens % num_reqs):
                counts[num_reqs - 1 - i] += 1
        assert sum(counts) == num_tokens or uniform
        num_reqs_padded = self.pad_reqs(num_reqs)
        cu = np.cumsum(counts)
        self.offsets.np[0] = 0
        self.offsets.np[1 : num_reqs + 1] = cu
        self.offsets.np[num_reqs + 1 : num_reqs_padded + 1].fill(cu[-1])
        self.offsets.copy_to_gpu()
        with self.kernels.stream():
            out = self.model(self.offsets.gpu[: num_reqs_padded + 1], profile=profile)
        logger.debug("warmup done")
        return out

    def plan_ubatches(self, counts, num_tokens_padded, num_reqs_padded, n):
        if (num_tokens_padded // n) * (n - 1) >= int(np.sum(counts)):
            return None, None
        step = num_tokens_padded // n
        cu = np.concatenate([[0], np.cumsum(counts)])
        slices = []
        start = 0
        for end in [step * k for k in range(1, n)] + [int(cu[-1])]:
            first = int(np.searchsorted(cu, start, side="right") - 1)
            stop = int(np.searchsorted(cu, end, side="left"))
            slices.append(StepSlice(slice(first, stop), slice(start, end)))
            start = end
        return slices, pad_last(slices, num_tokens_padded, num_reqs_padded)

    def attention_mode(self):
        return envs.TOY_ATTENTION_MODE

    def launch(self, num_tokens):
        return launch_attention(num_tokens)

    def full_mask(self):
        return FULL_MASK & PAD_SLOT

    def early_exit(self, num_tokens):
        if num_tokens == 0:
            self.offsets.np[:] = 0
            return None
        self.offsets.np[1] = num_tokens

    @staticmethod
    def capture_sizes(limit):
        sizes = [1, 2, 4] + [8 * k for k in range(1, limit // 8 + 1)]
        return [s for s in sizes if s <= limit]

    @classmethod
    def describe(cls):
        return cls.__name__


class ToyBatch:
    @classmethod
    def dummy(cls, num_reqs, num_tokens, buffers):
        base, extra = divmod(num_tokens, num_reqs)
        counts = np.full(num_reqs, base, dtype=np.int32)
        counts[num_reqs - extra :] += 1
        buffers.seq_lens[:num_reqs] = torch.from_numpy(counts)
        buffers.seq_lens[num_reqs:] = 0
        return cls(num_reqs=num_reqs, counts=counts, seq_lens=buffers.seq_lens[:num_reqs])
'''

SLICES = '''\
from dataclasses import dataclass


@dataclass
class StepSlice:
    request_slice: slice
    token_slice: slice

    @property
    def num_tokens(self) -> int:
        return self.token_slice.stop - self.token_slice.start


def pad_last(slices, num_tokens_padded, num_reqs_padded):
    last = slices[-1]
    return slices[:-1] + [StepSlice(slice(last.request_slice.start, num_reqs_padded), slice(last.token_slice.start, num_tokens_padded))]
'''

MATH = '''\
def ceil_div(a, b):
    return -(a // -b)
'''

TREE = bind.TextTree({
    "toyengine/__init__.py": "",
    "toyengine/worker/__init__.py": "",
    "toyengine/worker/runner.py": RUNNER,
    "toyengine/worker/slices.py": SLICES,
    "toyengine/utils/__init__.py": "",
    "toyengine/utils/math.py": MATH,
    "toyengine/envs.py": "TOY_ATTENTION_MODE = 'flash'\n",
})
PATH = "toyengine/worker/runner.py"


def loader(**stand_ins: object) -> bind.Loader:
    return bind.Loader(TREE, "toyengine", stand_ins=stand_ins)


def lines_of(piece: bind.Piece) -> list[int]:
    return [n.lineno for n in piece.nodes]


def line(text: str) -> int:
    """The 1-based line of ``text`` in the model runner's source."""
    hits = [k + 1 for k, row in enumerate(RUNNER.splitlines()) if text in row]
    assert len(hits) == 1, (text, hits)
    return hits[0]


# ---------------------------------------------------------------- locating pieces


def test_pieces_have_their_kind_params_and_unapplied_decorators() -> None:
    f = loader().file(PATH)
    warmup = f.piece("ToyRunner.warmup")
    assert (warmup.kind, warmup.params, warmup.decorators) == ("method", ("self", "num_tokens", "uniform", "profile"),
                                                                 ("torch.inference_mode()",))
    assert f.piece("ToyRunner.capture_sizes").kind == "staticmethod"
    assert f.piece("ToyRunner.describe").kind == "classmethod"
    assert f.piece("ToyBatch.dummy").kind == "classmethod"
    assert f.piece("ToyBatch").kind == "class"
    assert warmup.lines == (line("def warmup"), line("return out"))


def test_a_missing_function_method_or_file_is_absent() -> None:
    f = loader().file(PATH)
    with pytest.raises(bind.Absent, match=r"toyengine/worker/runner.py has no class or function 'make_dummy'"):
        f.piece("make_dummy")
    with pytest.raises(bind.Absent, match=r"ToyRunner has no attribute '_allow_microbatching'"):
        f.piece("ToyRunner._allow_microbatching")
    with pytest.raises(bind.Absent, match=r"is a function, not a class"):
        f.piece("ToyRunner.warmup.inner")
    with pytest.raises(bind.Absent, match=r"toyengine/worker/model_runner_v2.py is not in this source tree"):
        loader().file("toyengine/worker/model_runner_v2.py")
    assert not f.has("ToyRunner.missing") and f.has("ToyRunner.warmup")


def test_staticmethod_and_classmethod_run_with_their_own_first_argument() -> None:
    sc = loader()
    f = sc.file(PATH)
    assert sc.load(f.piece("ToyRunner.capture_sizes"))(20) == [1, 2, 4, 8, 16]
    assert sc.load(f.piece("ToyRunner.describe"))(Record) == "Record"


# ---------------------------------------------------------------- fragments


def test_fragment_takes_the_writes_and_the_statements_they_read() -> None:
    f = loader().file(PATH)
    piece = f.fragment("ToyRunner.warmup", Writes("self.offsets"), given=("self", "num_reqs", "num_reqs_padded", "counts"))
    # the four statements writing self.offsets, and `cu = np.cumsum(counts)` they read; counts and the sizes are given
    assert lines_of(piece) == [line("cu = np.cumsum"), line("self.offsets.np[0] = 0"), line("self.offsets.np[1 :"),
                               line(".fill(cu[-1])"), line("self.offsets.copy_to_gpu()")]
    assert piece.defaults == () and piece.params == ("self", "num_reqs", "num_reqs_padded", "counts")
    # given only num_tokens, it takes the split and the padding too, back to the method's parameters
    whole = f.fragment("ToyRunner.warmup", Writes("self.offsets"), given=("self", "num_tokens"))
    assert lines_of(whole) == [line("max_reqs = self.config"), line("if uniform:"), line("num_reqs_padded = self.pad_reqs"),
                               *lines_of(piece)]
    assert [name for name, _ in whole.defaults] == ["uniform"]
    assert line("assert sum(counts)") not in lines_of(whole)  # reads, does not write


def test_fragment_refuses_a_dependency_that_rebinds_a_given_name() -> None:
    f = loader().file(PATH)
    with pytest.raises(bind.Unbindable, match=rf"depends on line {line('if uniform:')}, which rebinds given name\(s\) num_reqs"):
        f.fragment("ToyRunner.warmup", Writes("self.offsets"), given=("self", "num_tokens", "num_reqs", "num_reqs_padded"))


def test_fragment_in_branches_takes_the_whole_compound_statement() -> None:
    f = loader().file(PATH)
    piece = f.fragment("ToyRunner.warmup", Writes("counts"), given=("self", "num_tokens"))
    assert lines_of(piece) == [line("max_reqs = self.config"), line("if uniform:")]
    sc = loader()
    run = sc.load(piece)
    runner_ = Stub("ToyRunner", config=Stub("config", max_num_seqs=3), decode_len=1)
    assert run(runner_, 5)["counts"] == [1, 2, 2]
    assert run(runner_, 5, True)["counts"] == [1, 1, 1]  # uniform=True: the other branch, passed positionally after the given


def test_fragment_runs_unchanged_on_a_stub_self_with_an_out_buffer() -> None:
    sc = loader()
    piece = sc.file(PATH).fragment("ToyRunner.warmup", Writes("self.offsets"), given=("self", "num_tokens"))
    run = sc.load(piece)
    out = np.full(6, 99, dtype=np.int32)  # a stale persistent buffer
    pad = Recorder("pad_reqs", returns=4)
    runner_ = Stub("ToyRunner", config=Stub("config", max_num_seqs=3), offsets=bind.cpu_gpu_buffer(out),
                   methods={"pad_reqs": lambda self, r: pad(r)})
    run(runner_, 5)
    assert out.tolist() == [0, 1, 3, 5, 5, 99]  # [R+1, P] padded with the total, out[P+1:] untouched
    assert runner_.offsets.gpu.tolist() == out.tolist()  # copy_to_gpu ran
    assert pad.last.args == (3,)


def test_fragment_that_is_not_there_or_returns_is_unbindable() -> None:
    f = loader().file(PATH)
    with pytest.raises(bind.Unbindable, match=r"ToyRunner.warmup has no statement that writes self.query_start_loc"):
        f.fragment("ToyRunner.warmup", Writes("self.query_start_loc"), given=("self",))
    with pytest.raises(bind.Unbindable, match=r"holds a return at line"):
        f.fragment("ToyRunner.early_exit", Writes("self.offsets"), given=("self",))
    with pytest.raises(bind.Unbindable, match=r"reads parameter\(s\) num_tokens, which have no default"):
        f.fragment("ToyRunner.warmup", Writes("counts"), given=("self",))
    with pytest.raises(ValueError, match=r"target must be a dotted name like 'self.buffer', got 'self\.\[0\]'"):
        Writes("self.[0]")


def test_writes_recognises_assignments_method_calls_and_out_arguments() -> None:
    import ast

    def matches(code: str, target: str) -> bool:
        return Writes(target).matches(ast.parse(code).body[0])

    assert matches("self.buf.np[1:3] = x", "self.buf")
    assert matches("self.buf.np[1:3] += x", "self.buf.np")
    assert matches("self.buf.np[2:].fill(7)", "self.buf")
    assert matches("self.buf.copy_to_gpu()", "self.buf")
    assert matches("np.cumsum(a, out=self.buf.np[1:])", "self.buf")
    assert matches("a, self.buf = 1, 2", "self.buf")
    assert not matches("x = self.buf.np[0]", "self.buf")  # a read
    assert not matches("self.buffer2[0] = 1", "self.buf")  # another name with the same prefix
    assert not matches("f(self.buf)", "self.buf")


# ---------------------------------------------------------------- resolving names


def test_imports_of_the_package_are_followed_and_constants_evaluated() -> None:
    sc = loader()
    piece = sc.file(PATH).fragment("ToyRunner.warmup", Writes("counts"), given=("self", "num_tokens"))
    run = sc.load(piece)  # ceil_div comes from toyengine/utils/math.py
    runner_ = Stub("ToyRunner", config=Stub("config", max_num_seqs=8), decode_len=2)
    assert run(runner_, 5, True)["counts"] == [2, 2, 2]
    assert sc.namespace("toyengine/utils/math.py")["ceil_div"](7, 2) == 4
    assert sc.load(sc.file(PATH).piece("ToyRunner.full_mask"))(None) == ((1 << 31) - 1) & -1


def test_a_name_no_one_provides_makes_the_piece_unbindable_with_where_it_is_read() -> None:
    sc = loader()
    f = sc.file(PATH)
    where = line("return launch_attention(num_tokens)")
    with pytest.raises(bind.Unbindable, match=rf"needs 'launch_attention' \(line {where}\): imported from toyengine.kernels, not in "
                       r"this source tree, which the binding does not provide"):
        sc.load(f.piece("ToyRunner.launch"))
    with pytest.raises(bind.Unbindable, match=r"needs 'envs'.*toyengine.envs is a module of the engine \(give a stand-in\)"):
        sc.load(f.piece("ToyRunner.attention_mode"))
    where = line("logger.debug")
    with pytest.raises(bind.Unbindable, match=rf"ToyRunner.warmup \(method, lines \d+-\d+\) needs 'logger' \(line {where}\): "
                       r"toyengine/worker/runner.py computes it at import time \(make_logger\(__name__\)\)"):
        sc.load(f.piece("ToyRunner.warmup"))
    # the fragment that computes the output does not read the logger: it loads (its `with` context is lifted away)
    sc.load(f.fragment("ToyRunner.warmup", Writes("out"), given=("self", "num_reqs_padded")))
    # ... and a stand-in provides it.
    sc2 = loader(envs=Stub("envs", TOY_ATTENTION_MODE="triton"))
    assert sc2.load(sc2.file(PATH).piece("ToyRunner.attention_mode"))(None) == "triton"


def test_super_and_private_names_make_a_method_unbindable() -> None:
    tree = bind.TextTree({"eng/m.py": "class A(B):\n    def f(self):\n        return super().f() + 1\n\n"
                                      "    def g(self):\n        return self.__cache\n"})
    sc = bind.Loader(tree, "eng")
    with pytest.raises(bind.Unbindable, match=r"A.f \(method, lines 2-3\) uses super \(line 3\), which needs the class"):
        sc.load(sc.file("eng/m.py").piece("A.f"))
    with pytest.raises(bind.Unbindable, match=r"reads the private name __cache \(line 6\), mangled with its class's name"):
        sc.load(sc.file("eng/m.py").piece("A.g"))


def test_only_allowed_real_modules_are_imported() -> None:
    tree = bind.TextTree({"eng/m.py": "import triton\nimport math\n\ndef f(x):\n    return triton.cdiv(x, 2)\n\n"
                                      "def g(x):\n    return math.ceil(x / 2)\n"})
    sc = bind.Loader(tree, "eng")
    assert sc.load(sc.file("eng/m.py").piece("g"))(3) == 2
    with pytest.raises(bind.Unbindable, match=r"needs 'triton' \(line 5\): eng/m.py imports it from triton, which is not an "
                       r"allowed module"):
        sc.load(sc.file("eng/m.py").piece("f"))


def test_an_import_of_the_engine_inside_a_function_binds_the_stand_in() -> None:
    """vLLM's ``VllmConfig._set_cudagraph_sizes`` imports ``current_platform``
    in its body: the binding's stand-in is what it gets, not the installed
    engine's (another release) or an ImportError (none installed). An import
    whose names are not all stood in for, or of another package, is left alone."""
    tree = bind.TextTree({"eng/m.py": "def f(x):\n    from eng.platforms import current_platform as p\n"
                                      "    return p.scale * x\n\n"
                                      "def g(x):\n    from eng.platforms import current_platform, other\n    return x\n\n"
                                      "def h(x):\n    if x:\n        from .platforms import current_platform\n"
                                      "        return current_platform.scale\n    return 0\n"})
    sc = bind.Loader(tree, "eng", stand_ins={"p": Stub("p", scale=3), "current_platform": Stub("cp", scale=5)})
    assert sc.load(sc.file("eng/m.py").piece("f"))(2) == 6
    assert sc.load(sc.file("eng/m.py").piece("h"))(1) == 5
    with pytest.raises(ModuleNotFoundError, match="eng"):
        sc.load(sc.file("eng/m.py").piece("g"))(1)


# ---------------------------------------------------------------- engine result types and tuples


def test_tuple_result_of_engine_slice_objects_converts_to_pairs() -> None:
    sc = loader()
    plan = sc.load(sc.file(PATH).piece("ToyRunner.plan_ubatches"))

    def split_ubatches(nst: Any, num_tokens_padded: int, num_reqs_padded: int, num_ubatches: int) -> Any:  # the canonical signature
        return bind.slice_pairs(bind.tuple_part(plan(None, nst, num_tokens_padded, num_reqs_padded, num_ubatches), 1, size=2))

    assert split_ubatches(np.array([5, 11]), 16, 2, 2) == [((0, 2), (0, 8)), ((1, 2), (8, 16))]
    assert split_ubatches(np.array([1]), 2, 1, 2) is None
    for nst, np_, rp, n in [([3, 3, 3], 9, 3, 2), ([1] * 5, 8, 8, 2), ([2, 7, 1], 12, 4, 3)]:
        assert split_ubatches(np.array(nst), np_, rp, n) == ubatch_oracle.split_ubatches(np.array(nst), np_, rp, n)
    with pytest.raises(TypeError, match=r"slice object 0 \(int\) has no Python slices .request_slice and .token_slice"):
        bind.slice_pairs([3])
    with pytest.raises(TypeError, match=r"expected a tuple of 2, got one of 3"):
        bind.tuple_part((1, 2, 3), 0, size=2)


def test_classmethod_result_type_is_a_record_of_its_keywords() -> None:
    sc = loader()
    dummy = sc.load(sc.file(PATH).piece("ToyBatch.dummy"))
    buffers = Stub("buffers", seq_lens=torch.full((5,), 7, dtype=torch.int32))
    batch = dummy(Record, 3, 5, buffers)
    assert isinstance(batch, Record) and batch.num_reqs == 3
    assert batch.counts.tolist() == [1, 2, 2] and bind.to_numpy(buffers.seq_lens).tolist() == [1, 2, 2, 0, 0]


def test_stub_names_what_it_lacks_and_recorder_what_was_passed() -> None:
    s = Stub("GPUModelRunner", a=1)
    with pytest.raises(AttributeError, match=r"GPUModelRunner has no attribute 'speculator': the binding does not provide it"):
        _ = s.speculator
    r = Recorder("execute_model")
    with r(1, 2, dummy=True):
        pass
    assert r.last.arg(0, "scheduler_output") == 1 and r.last.arg(5, "dummy") is True
    with pytest.raises(KeyError, match=r"neither argument 3 nor x="):
        r.last.arg(3, "x")
    with pytest.raises(bind.StandInReached, match=r"get_pp_group was reached"):
        bind.unreachable("get_pp_group")()


def test_builders_of_buffers_and_block_tables() -> None:
    arr = np.zeros(4, dtype=np.int32)
    buf = bind.cpu_gpu_buffer(arr)
    buf.np[1:] = 5
    assert buf.cpu.tolist() == [0, 5, 5, 5] and buf.gpu.tolist() == [0, 0, 0, 0]
    buf.copy_to_gpu(2)
    assert buf.gpu.tolist() == [0, 5, 0, 0]
    table = np.array([[1, 2], [3, 0]], dtype=np.int32)
    bt = bind.block_table(16, table)
    assert bt.block_size == 16 and bt.get_numpy_array() is table and bt.get_device_tensor(1).tolist() == [[1, 2]]
    with pytest.raises(ValueError, match=r"block_size must be an int >= 1, got 0"):
        bind.block_table(0, table)
    with pytest.raises(TypeError, match=r"array must be a numpy array, got list"):
        bind.cpu_gpu_buffer([1, 2])  # type: ignore[arg-type]


def test_argument_checks_name_the_argument_and_value() -> None:
    with pytest.raises(TypeError, match=r"num_reqs must be an int, got float 2.0"):
        bind.count("num_reqs", 2.0)
    with pytest.raises(ValueError, match=r"num_ubatches must be >= 2, got 1"):
        bind.count("num_ubatches", 1, 2)
    with pytest.raises(ValueError, match=r"num_scheduled_tokens\[1\] must be >= 0, got -3"):
        bind.int_array("num_scheduled_tokens", [1, -3])
    with pytest.raises(TypeError, match=r"out must have dtype int32 or int64, got float64"):
        bind.int_array("out", np.zeros(3))
    assert bind.int_array("out", np.array([-7, 3], dtype=np.int32), minimum=None).tolist() == [-7, 3]
    with pytest.raises(ValueError, match=r"block_tables\[0\] must have one row per request \(2\), got 1 rows"):
        bind.table("block_tables[0]", np.array([[1, 2]]), 2)
    with pytest.raises(ValueError, match=r"block_tables\[0\]\[0, 1\] must be a block id >= 0, got -1"):
        bind.table("block_tables[0]", [[1, -1]], 1)
    with pytest.raises(ValueError, match=r"buffers.seq_lens holds 4294967296, which the engine's int32 buffer cannot hold"):
        bind.cast_exact("buffers.seq_lens", np.array([0, 2**32]), np.int32)


def test_probe_turns_a_changed_signature_into_unbindable() -> None:
    sc = loader()
    capture_sizes = sc.load(sc.file(PATH).piece("ToyRunner.capture_sizes"))
    with pytest.raises(bind.Unbindable, match=r"dry run of capture_sizes failed: TypeError: .*positional argument"):
        bind.probe(lambda n: capture_sizes(n, 2), 8, what="capture_sizes")
    bind.probe(lambda n: capture_sizes(n), 8)  # an answer, right or wrong, is the properties' business


def test_tracebacks_through_cut_out_code_show_the_engine_lines() -> None:
    import traceback

    sc = loader()
    run = sc.load(sc.file(PATH).fragment("ToyRunner.warmup", Writes("counts"), given=("self", "num_tokens")))
    with pytest.raises(AttributeError) as info:
        run(Stub("ToyRunner"), 5)
    frames = [f for f in traceback.extract_tb(info.value.__traceback__) if f.filename == f"<source {PATH}>"]
    assert frames and frames[-1].lineno == line("max_reqs = self.config") and frames[-1].line == "max_reqs = self.config.max_num_seqs"


# ---------------------------------------------------------------- a binding judged by the contracts


def _warmup_split(source: str) -> Callable[..., Any]:
    """contract A's canonical signature over the toy model runner's warmup split, cut
    from ``source`` (the fixture or a mutated copy)."""
    sc = bind.Loader(bind.TextTree({**TREE.files, PATH: source}), "toyengine")
    run = sc.load(sc.file(PATH).fragment("ToyRunner.warmup", Writes("counts"), given=("self", "num_tokens")))

    def split_dummy_tokens(num_reqs: int, num_tokens: int) -> list[int]:
        return run(Stub("ToyRunner", config=Stub("config", max_num_seqs=num_reqs)), num_tokens)["counts"]

    return split_dummy_tokens


def _hunt(contract_name: str, target: Callable[..., Any], examples: int = 60) -> runner.Failure | None:
    contract = registry.get(contract_name)
    for prop in contract.properties:
        r = runner.hunt(contract, target, prop,
                        runner.HuntOptions(settings(max_examples=examples, database=None, derandomize=True, deadline=None)),
                        target_name="toy")
        if r.failure is not None:
            return r.failure
    return None


def test_the_bound_toy_split_meets_contract_a_and_a_mutant_does_not() -> None:
    good = _warmup_split(RUNNER)
    assert _hunt("split_dummy_tokens", good) is None
    # Every (R, N) of a small grid, against the oracle.
    for r in range(1, 12):
        for n in range(r, 40):
            assert list(good(r, n)) == list(dummy_oracle.split_dummy_tokens(r, n)), (r, n)
    buggy = _warmup_split(RUNNER.replace("counts[num_reqs - 1 - i] += 1", "counts[num_reqs - 1] += 1"))
    failure = _hunt("split_dummy_tokens", buggy)
    assert failure is not None and (failure.case.args["num_reqs"], failure.case.args["num_tokens"]) == (3, 5)


def _warmup_offsets(source: str) -> Callable[..., Any]:
    """contract C's canonical signature over the toy model runner's offsets fill."""
    sc = bind.Loader(bind.TextTree({**TREE.files, PATH: source}), "toyengine")
    run = sc.load(sc.file(PATH).fragment("ToyRunner.warmup", Writes("self.offsets"),
                                         given=("self", "num_reqs", "num_reqs_padded", "counts")))

    def pad_query_start_loc(nst: Any, num_reqs_padded: int, out: Any = None) -> Any:  # the engine domain: R >= 1
        buf = np.zeros(num_reqs_padded + 1, dtype=np.int64) if out is None else out
        run(Stub("ToyRunner", offsets=bind.cpu_gpu_buffer(buf)), len(nst), num_reqs_padded, nst)
        return buf[: num_reqs_padded + 1]

    return pad_query_start_loc


def test_the_bound_toy_offsets_fill_meets_contract_c_and_an_unpadded_one_does_not() -> None:
    good = _warmup_offsets(RUNNER)
    rng = np.random.default_rng(0)
    for _ in range(200):
        nst = rng.integers(0, 9, size=int(rng.integers(1, 6)))
        p = int(nst.size + rng.integers(0, 4))
        out = rng.integers(-50, 50, size=p + 3)
        before = out.copy()
        assert good(nst, p, out).tolist() == qsl_oracle.pad_query_start_loc(nst, p).tolist()
        assert out[p + 1 :].tolist() == before[p + 1 :].tolist()
    unpadded = _warmup_offsets(RUNNER.replace("self.offsets.np[num_reqs + 1 : num_reqs_padded + 1].fill(cu[-1])", "pass"))
    stale = np.array([0, 4, 8, 12], dtype=np.int64)
    assert unpadded(np.array([2]), 3, stale).tolist() == [0, 2, 8, 12]  # the padded slots keep the stale values


# ---------------------------------------------------------------- the example of docs/bindings.md


def test_docs_example(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Runs the code blocks of docs/bindings.md (``# file: PATH`` headers) on
    the engine files they define and checks the verdicts the page states."""
    import re
    import runpy

    page = (Path(__file__).resolve().parents[1] / "docs" / "bindings.md").read_text()
    blocks = dict(re.findall(r"```python\n# file: (\S+)\n(.*?)```", page, re.S))
    assert set(blocks) == {"myengine/worker/runner.py", "myengine/utils.py", "mybinding.py"}
    for path, text in blocks.items():
        dest = tmp_path / ("src" if path.startswith("myengine/") else "") / path
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(text)
    monkeypatch.setenv("MYENGINE_SRC", str(tmp_path / "src"))
    ns = runpy.run_path(str(tmp_path / "mybinding.py"))
    assert "needs 'device_stream' (line 22): imported from myengine.platform, not in this source tree" in ns["WHY_NOT_WHOLE"]
    split, fill = ns["split_dummy_tokens"], ns["pad_query_start_loc"]
    for r in range(1, 10):
        for n in range(r, 30):
            assert list(split(r, n)) == list(dummy_oracle.split_dummy_tokens(r, n))
    assert _hunt("split_dummy_tokens", split, 30) is None
    failure = _hunt("pad_query_start_loc", fill, 30)
    assert failure is not None and failure.property == "matches_oracle"
    out = np.array([0, 9, 9, 9], dtype=np.int32)
    assert fill(np.array([2]), 3, out).tolist() == [0, 2, 2, 9]  # slot P keeps the stale 9


def test_probe_blames_the_engine_for_what_its_own_lines_raise_and_the_binding_for_a_misfit() -> None:
    """An off-by-one on the engine's own list is the engine's (probe returns it; the matrix checks that input as a
    counterexample); an index of the wrong rank, or an attribute a stand-in lacks, is the binding's (Unbindable)."""
    text = ("def last(counts, n):\n    return counts[n]\n\n"
            "def corner(table):\n    return table[0, 0, 0]\n\n"
            "def size(config):\n    return config.max_num_seqs\n")
    sc = bind.Loader(bind.TextTree({"toy/mod.py": text}), "toy")
    f = sc.file("toy/mod.py")
    last, corner, size = (sc.load(f.piece(name)) for name in ("last", "corner", "size"))
    assert bind.probe(last, [1, 2, 3], 3, what="last") == "IndexError: list index out of range"
    assert bind.probe(last, [1, 2, 3], 2, what="last") == ""
    with pytest.raises(bind.Unbindable, match=r"dry run of corner failed: IndexError: too many indices"):
        bind.probe(corner, np.zeros((2, 2)), what="corner")
    with pytest.raises(bind.Unbindable, match=r"config has no attribute 'max_num_seqs'"):
        bind.probe(size, Stub("config"), what="size")
    # Raised in batchfuzz's own adapter around the engine's code: the binding's.
    with pytest.raises(bind.Unbindable, match=r"KeyError"):
        bind.probe(lambda: {}["x"] if last([1], 0) else None, what="adapter")


def test_bind_scope_is_a_deprecated_name_of_loader() -> None:
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert bind.Scope is bind.Loader
    assert any(issubclass(w.category, DeprecationWarning) and "bind.Loader" in str(w.message) for w in seen)
    with pytest.raises(AttributeError, match=r"has no attribute 'Nope'"):
        _ = bind.Nope  # type: ignore[attr-defined]
