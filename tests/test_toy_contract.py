"""A new contract needs exactly the pieces the README's "Adding a contract"
lists, and nothing else: this test writes a toy contract from those pieces
into a package of its own (outside the repository), registers it through
``$BATCHFUZZ_CONTRACTS``, and runs it through ``batchfuzz list``, ``check``,
``fuzz`` and ``catalogue`` as a user would.

The toy contract, ``request_offsets(counts) -> R + 1 offsets``, is the
exclusive prefix sum at the heart of ``query_start_loc``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

PIECES = {
    "reference/request_offsets.py": '''
        """Oracle of the toy contract: offsets[0] = 0, offsets[i + 1] = offsets[i] + counts[i]."""

        from batchfuzz.reference._args import check_count_array


        def request_offsets(counts):
            values = check_count_array("counts", counts, minimum=0).tolist()
            out = [0]
            for v in values:
                out.append(out[-1] + v)
            return out
        ''',
    "impl/request_offsets_numpy.py": '''
        import numpy as np

        from batchfuzz.reference._args import check_count_array


        def request_offsets(counts):
            c = check_count_array("counts", counts, minimum=0)
            out = np.zeros(c.size + 1, dtype=np.int64)
            np.cumsum(c, out=out[1:])
            return out
        ''',
    "strategies/request_offsets.py": '''
        import numpy as np
        from hypothesis import strategies as st

        from batchfuzz.case import Case

        DOMAINS = ("spec", "engine")


        def cases(domain="spec"):
            low = 1 if domain == "engine" else 0
            return st.lists(st.integers(low, 64), max_size=8).map(
                lambda xs: Case({"counts": np.array(xs, dtype=np.int64)}))


        def in_domain(case, domain):
            c = np.asarray(case.args["counts"])
            return bool((c >= (1 if domain == "engine" else 0)).all())


        def size(case):
            c = np.asarray(case.args["counts"], dtype=np.int64)
            return (int(c.size), int(c.sum()))


        def reductions(case):
            c = np.asarray(case.args["counts"])
            for i in range(c.size):
                yield Case({"counts": np.delete(c, i)})
                if c[i] > 0:
                    smaller = c.copy()
                    smaller[i] -= 1
                    yield Case({"counts": smaller})
        ''',
    "contracts/request_offsets_variants.py": '''
        import numpy as np

        from batchfuzz.registry import Variant


        def inclusive(counts):
            return np.concatenate([np.cumsum(counts), [int(np.sum(counts))]])


        def no_zero(counts):
            return np.cumsum(np.concatenate([[1], counts]))


        def drops_last(counts):
            out = np.concatenate([[0], np.cumsum(counts)])
            out[-1] = out[-2] if out.size > 1 else 0
            return out


        def int8(counts):
            return np.concatenate([[0], np.cumsum(np.asarray(counts).astype(np.int8), dtype=np.int8)])


        def one_short(counts):
            return np.concatenate([[0], np.cumsum(counts)])[:-1]


        VARIANTS = (
            Variant("inclusive", "inclusive scan", inclusive, "mutant", ("matches_oracle", "diff_is_counts"), {"counts": [1]}),
            Variant("no_zero", "starts at 1", no_zero, "mutant", ("starts_at_zero",), {"counts": []}),
            Variant("drops_last", "the last offset repeats", drops_last, "mutant", ("last_is_total",), {"counts": [1]}),
            Variant("int8", "int8 running sum", int8, "mutant", ("matches_oracle",), {"counts": [64, 64]}),
            Variant("one_short", "one offset short", one_short, "mutant", ("length",), {"counts": []}),
        )
        ''',
    "contracts/request_offsets.py": '''
        """Toy contract record: offsets of each request's tokens."""

        import numpy as np

        from batchfuzz import registry
        from batchfuzz.checks import as_int_array, assert_array_equal, require
        from batchfuzz.registry import Contract, ErrorInput, Property

        from toycontract.contracts.request_offsets_variants import VARIANTS
        from toycontract.impl import request_offsets_numpy
        from toycontract.reference import request_offsets as oracle
        from toycontract.strategies import request_offsets as strategies


        def _offsets(target, case):
            out = as_int_array(target(case.args["counts"]), "offsets")
            require(out.shape == (case.args["counts"].size + 1,), f"expected R + 1 offsets, got shape {out.shape}")
            return out


        def _matches_oracle(target, case):
            assert_array_equal(_offsets(target, case), oracle.request_offsets(case.args["counts"]), "offsets")


        def _length(target, case):
            out = as_int_array(target(case.args["counts"]), "offsets")
            require(out.size == case.args["counts"].size + 1, f"{out.size} offsets for {case.args['counts'].size} requests")


        def _starts_at_zero(target, case):
            require(int(_offsets(target, case)[0]) == 0, "offsets[0] != 0")


        def _diff(target, case):
            assert_array_equal(np.diff(_offsets(target, case)), case.args["counts"], "diff(offsets)")


        def _last(target, case):
            require(int(_offsets(target, case)[-1]) == int(case.args["counts"].sum()), "offsets[R] != sum(counts)")


        CONTRACT = registry.register(Contract(
            name="request_offsets", title="Request offsets (toy)", section="T", signature="request_offsets(counts) -> R + 1 ints",
            arguments=("counts",), oracle=oracle.request_offsets,
            implementations=(registry.host_impl("numpy", request_offsets_numpy.request_offsets, "cumsum into a slice"),),
            inputs=registry.input_space(strategies, {"spec": "any counts >= 0", "engine": "every count >= 1"}),
            properties=(
                Property("matches_oracle", "offsets[i + 1] = offsets[i] + counts[i]", _matches_oracle, label=registry.SAFETY),
                Property("length", "R + 1 offsets", _length, label=registry.SAFETY),
                Property("starts_at_zero", "offsets[0] == 0", _starts_at_zero, label=registry.SAFETY),
                Property("diff_is_counts", "diff(offsets) == counts", _diff, label=registry.SAFETY),
                Property("last_is_total", "offsets[R] == sum(counts)", _last, label=registry.SAFETY),
            ),
            error_inputs=(ErrorInput({"counts": np.array([-1])}, ValueError, r"counts\\[0\\] must be >= 0, got -1"),),
            variants=VARIANTS,
        ))
        ''',
}

USER_TARGET = '''
def offsets(counts):
    out = [0]
    for c in list(counts):
        out.append(out[-1] + int(c))
    return out[:-1] + [out[-1] + 0]


def bad_offsets(counts):
    out = [0]
    for c in list(counts):
        out.append(out[-1] + int(c))
    out[-1] = max(0, out[-1] - (1 if len(out) > 2 else 0))
    return out
'''


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("toy")
    pkg = root / "toycontract"
    for folder in ("", "reference", "impl", "strategies", "contracts"):
        (pkg / folder).mkdir(parents=True, exist_ok=True)
        (pkg / folder / "__init__.py").write_text("")
    for rel, text in PIECES.items():
        (pkg / rel).write_text(textwrap.dedent(text).lstrip())
    (root / "usertarget.py").write_text(USER_TARGET)
    env = dict(os.environ, PYTHONPATH=str(root), BATCHFUZZ_CONTRACTS="toycontract.contracts.request_offsets",
               BATCHFUZZ_CORPUS=str(root / "corpus"))
    env.pop("CI", None)
    return root, env


def _run(toy: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    root, env = toy
    return subprocess.run([sys.executable, "-m", "batchfuzz", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_toy_contract_is_listed(toy: tuple[Path, dict[str, str]]) -> None:
    r = _run(toy, "list", "--variants")
    assert r.returncode == 0, r.stderr
    assert "request_offsets: Request offsets (toy)" in r.stdout and "variant one_short (mutant)" in r.stdout


def test_check_passes_a_correct_function_and_catches_a_bad_one(toy: tuple[Path, dict[str, str]]) -> None:
    root = toy[0]
    good = _run(toy, "check", "request_offsets", "usertarget:offsets", "--budget", "8", "--seed", "1")
    assert good.returncode == 0, good.stdout + good.stderr
    bad = _run(toy, "check", "request_offsets", "usertarget:bad_offsets", "--budget", "10", "--seed", "1",
               "--json", str(root / "bad.json"))
    assert bad.returncode == 1, bad.stdout + bad.stderr
    report = json.loads((root / "bad.json").read_text())
    # the reduction reaches the smallest counterexample: two requests, one token each
    assert report["status"] == "counterexample" and report["case"]["args"]["counts"]["ndarray"] == [0, 1], report["case"]


def test_fuzz_runs_the_toy_contract(toy: tuple[Path, dict[str, str]]) -> None:
    root = toy[0]
    # Driven by examples: 20 per item (5 items), the budget only a ceiling a loaded machine does not reach
    r = _run(toy, "fuzz", "--contract", "request_offsets", "--max-examples", "20", "--budget", "240", "--no-database",
             "--report", str(root / "report"))
    assert r.returncode == 0, r.stdout + r.stderr
    summary = json.loads((root / "report" / "summary.json").read_text())
    c = summary["contracts"]["request_offsets"]
    assert c["examples"] == 20 * c["items"] and c["items_run"] == c["items"], c


def test_the_catalogue_finds_every_toy_variant(toy: tuple[Path, dict[str, str]]) -> None:
    r = _run(toy, "catalogue", "--contract", "request_offsets")
    assert r.returncode == 0, r.stdout + r.stderr
    assert "5/5 variants caught with a counterexample no larger than the documented one" in r.stdout
