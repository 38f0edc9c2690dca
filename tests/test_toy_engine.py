"""A new engine needs exactly what docs/bindings.md's "Adding an engine"
lists, and nothing else: this test writes a toy engine's source tree (a
package in an engine's shape, as a source checkout) and an engine module
binding two of its functions to existing contracts (its specs and binders,
the rest from ``batchfuzz.engines.base``), both outside the repository; registers the module through ``$BATCHFUZZ_ENGINES``; and runs
its release matrix through ``batchfuzz engine`` as a user would.

The toy engine's step runner prepares a dummy batch: its split of the
tokens over the requests is correct (contract A, ``split_dummy_tokens``);
its fill of the persistent ``query_start_loc`` buffer pads ``[R+1, P)``
where contract C (``pad_query_start_loc``) wants ``[R+1, P]``, so slot ``P``
keeps a stale value. A third binding names a function the release does not
have. Verdicts are driven by example counts (``--max-examples``), not by time.
"""

from __future__ import annotations

import ast
import json
import os
import shlex
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ENGINE_TREE = {
    "toyengine/__init__.py": "",
    "toyengine/_version.py": '__version__ = version = "1.4.0"\n',
    "toyengine/platform.py": '''
        def device_stream():
            raise RuntimeError("a GPU runtime, not available here")
        ''',
    "toyengine/worker/__init__.py": "",
    "toyengine/worker/runner.py": '''
        import numpy as np

        from toyengine.platform import device_stream


        class StepRunner:
            def prepare_dummy(self, num_tokens):
                num_reqs = min(num_tokens, self.max_num_seqs)
                counts = np.full(num_reqs, num_tokens // num_reqs, dtype=np.int32)
                counts[num_reqs - num_tokens % num_reqs :] += 1
                num_reqs_padded = self.pad_reqs(num_reqs)
                self.query_start_loc.np[0] = 0
                np.cumsum(counts, out=self.query_start_loc.np[1 : num_reqs + 1])
                self.query_start_loc.np[num_reqs + 1 : num_reqs_padded] = num_tokens
                self.query_start_loc.copy_to_gpu()
                with device_stream():
                    return self.model(self.query_start_loc.gpu[: num_reqs_padded + 1])
        ''',
}

# The engine module, in the shape batchfuzz.plugins.EngineModule declares: its specs and binders, and the rest
# from the shared skeleton (batchfuzz.engines.base.Engine).
ENGINE_MODULE = '''
    """The toy engine's bindings (an engine module for batchfuzz)."""

    import numpy as np

    from batchfuzz import bind, engines
    from batchfuzz.engines.base import Engine, Spec

    ENGINE = "toyengine"
    RELEASES = ("1.4.0",)
    RUNNER = "toyengine/worker/runner.py"


    class ReleaseSource(engines.ReleaseSource):
        distribution = "toyengine"
        package = "toyengine"


    def _split(rel):
        loader = rel.loader()
        run = loader.load(loader.file(RUNNER).fragment("StepRunner.prepare_dummy", bind.Writes("counts"),
                                                       ("self", "num_tokens")))

        def split_dummy_tokens(num_reqs, num_tokens):
            r, n = bind.count("num_reqs", num_reqs, 1), bind.count("num_tokens", num_tokens, 1)
            if r > n:
                raise ValueError(f"num_reqs must be <= num_tokens, got num_reqs={r}, num_tokens={n}")
            return np.asarray(run(bind.Stub("StepRunner", max_num_seqs=r), n)["counts"])

        return split_dummy_tokens, "the statements of StepRunner.prepare_dummy writing counts"


    def _fill(rel):
        loader = rel.loader()
        run = loader.load(loader.file(RUNNER).fragment(
            "StepRunner.prepare_dummy", bind.Writes("self.query_start_loc"),
            ("self", "num_reqs", "num_reqs_padded", "counts", "num_tokens")))

        def pad_query_start_loc(num_scheduled_tokens, num_reqs_padded, out=None):
            nst = bind.int_array("num_scheduled_tokens", num_scheduled_tokens)
            p = bind.count("num_reqs_padded", num_reqs_padded, nst.size)
            buf = np.zeros(p + 1, dtype=np.int32) if out is None else bind.int_array("out", out, minimum=None)
            run(bind.Stub("StepRunner", query_start_loc=bind.cpu_gpu_buffer(buf)), nst.size, p, nst, int(nst.sum()))
            return buf[: p + 1]

        return pad_query_start_loc, "the statements of StepRunner.prepare_dummy writing self.query_start_loc"


    def _gone(rel):
        loader = rel.loader()
        return loader.load(loader.file(RUNNER).piece("StepRunner.plan_ubatches")), "StepRunner.plan_ubatches"


    SPECS = (
        Spec(f"{RUNNER}:StepRunner.prepare_dummy", "split_dummy_tokens", _split, (3, 5)),
        Spec(f"{RUNNER}:StepRunner.prepare_dummy", "pad_query_start_loc", _fill, (np.array([2, 1]), 3)),
        Spec(f"{RUNNER}:StepRunner.plan_ubatches", "split_ubatches", _gone, ()),
    )

    _ENGINE = Engine(ENGINE, ReleaseSource, SPECS)
    bindings, binding_plan, resolve = _ENGINE.bindings, _ENGINE.binding_plan, _ENGINE.resolve
    '''


def test_the_engine_module_is_its_specs_and_binders() -> None:
    """Nothing of the shared skeleton is written again: every function the module defines is a spec's binder."""
    tree = ast.parse(textwrap.dedent(ENGINE_MODULE))
    defined = {n.name for n in tree.body if isinstance(n, ast.FunctionDef)}
    binders = {a.id for n in ast.walk(tree) if isinstance(n, ast.Call) and getattr(n.func, "id", "") == "Spec"
               for a in n.args[2:3] if isinstance(a, ast.Name)}
    assert defined == binders == {"_split", "_fill", "_gone"}
    assert [n.name for n in tree.body if isinstance(n, ast.ClassDef)] == ["ReleaseSource"]


@pytest.fixture(scope="module")
def toy(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    root = tmp_path_factory.mktemp("toyengine")
    checkout = root / "checkout"
    for rel, text in ENGINE_TREE.items():
        (checkout / rel).parent.mkdir(parents=True, exist_ok=True)
        (checkout / rel).write_text(textwrap.dedent(text).lstrip())
    (root / "toy_binding.py").write_text(textwrap.dedent(ENGINE_MODULE).lstrip())
    env = dict(os.environ, PYTHONPATH=str(root), BATCHFUZZ_ENGINES="toy_binding")
    env.pop("CI", None)
    return root, env


def _run(toy: tuple[Path, dict[str, str]], *args: str) -> subprocess.CompletedProcess[str]:
    root, env = toy
    return subprocess.run([sys.executable, "-m", "batchfuzz", *args], cwd=root, env=env, capture_output=True, text=True,
                          timeout=300)


def test_the_toy_engine_runs_through_batchfuzz_engine(toy: tuple[Path, dict[str, str]]) -> None:
    root = toy[0]
    r = _run(toy, "engine", "toyengine", "--source", str(root / "checkout"), "--max-examples", "25", "--budget", "240",
             "--seed", "3", "--json", str(root / "matrix.json"))
    assert r.returncode == 1, r.stdout + r.stderr  # a cell failed
    assert r.stdout.startswith("batchfuzz toyengine: 1 release(s) (1.4.0)"), r.stdout
    rows = {(c["function"].split(":")[-1], c["contract"]): c for c in json.loads((root / "matrix.json").read_text())["rows"]}
    assert {k: c["verdict"] for k, c in rows.items()} == {
        ("StepRunner.prepare_dummy", "split_dummy_tokens"): "pass",
        ("StepRunner.prepare_dummy", "pad_query_start_loc"): "fail",
        ("StepRunner.plan_ubatches", "split_ubatches"): "absent",
    }, r.stdout
    split = rows[("StepRunner.prepare_dummy", "split_dummy_tokens")]
    assert split["release"] == "1.4.0" and split["domain"] == "engine" and split["target"].startswith("engine:toyengine::dir:")
    assert not split["check_command"] and not split["reproduction"]  # a pass needs no next step
    # one round of --max-examples per property (and the contract's explicit examples, the same for each)
    assert len(set(split["properties"].values())) == 1 and min(split["properties"].values()) >= 25, split["properties"]
    fill = rows[("StepRunner.prepare_dummy", "pad_query_start_loc")]
    assert fill["property"] and fill["counterexample"]["args"], fill
    # The failing cell's next step, in the JSON and under its row: the reproduction and the ready check line.
    check_line = fill["check_command"]
    assert check_line == (f"batchfuzz check pad_query_start_loc {fill['target']} --domain engine "
                          f"--property {fill['property']} --seed 3"), check_line
    assert f"\n--- check it again: {check_line}\n" in r.stdout and "\n--- reproduction" in r.stdout, r.stdout
    assert "engines.resolve(" in fill["reproduction"] and "assert_property" in fill["reproduction"]
    # Both work as printed: the reproduction fails while the bug is there, and check finds it again.
    repro = subprocess.run([sys.executable, "-c", fill["reproduction"]], cwd=root, env=toy[1], capture_output=True,
                           text=True, timeout=300)
    assert repro.returncode != 0 and "PropertyViolation" in repro.stderr, repro.stdout + repro.stderr
    again = _run(toy, *shlex.split(check_line)[1:], "--budget", "240", "--json", str(root / "check.json"))
    assert again.returncode == 1, again.stdout + again.stderr
    assert json.loads((root / "check.json").read_text())["property"] == fill["property"]
    assert "has no attribute 'plan_ubatches'" in rows[("StepRunner.plan_ubatches", "split_ubatches")]["reason"]


def test_a_selection_and_an_unknown_engine(toy: tuple[Path, dict[str, str]]) -> None:
    root = toy[0]
    one = _run(toy, "engine", "toyengine", "--source", str(root / "checkout"), "--contract", "split_dummy_tokens",
               "--max-examples", "5", "--budget", "240", "--seed", "1", "--no-isolation")
    assert one.returncode == 0, one.stdout + one.stderr
    assert "1 cells" in one.stdout and "1 pass" in one.stdout, one.stdout
    unknown = _run(toy, "engine", "nosuchengine", "--source", str(root / "checkout"))
    assert unknown.returncode == 2
    assert "no engine named 'nosuchengine'; registered: sglang, toyengine, vllm" in unknown.stderr, unknown.stderr
    bad_glob = _run(toy, "engine", "toyengine", "--source", str(root / "checkout"), "--function", "*nothing_like_it")
    assert bad_glob.returncode == 2 and "--function '*nothing_like_it' matches no bound function" in bad_glob.stderr
