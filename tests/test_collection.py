"""Collecting the tests imports no torch and no vLLM (README, "Development":
a test module names them through ``tests/_lazy.py``), so ``--collect-only``,
``-k`` and ``-m inner`` start in seconds. The suite is collected in a fresh
pytest process with a small plugin that, once collection is done, writes
which of the watched modules are in ``sys.modules``."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
HEAVY = ("torch", "vllm")

PROBE = '''
import json
import os
import sys


def pytest_collection_finish(session):
    watched = os.environ["COLLECT_PROBE_WATCH"].split(",")
    with open(os.environ["COLLECT_PROBE_OUT"], "w") as f:
        json.dump({"items": len(session.items), "imported": [m for m in watched if m in sys.modules]}, f)
'''


def collect(tmp_path: Path, args: list[str], watch: tuple[str, ...], cwd: Path, *, plugins: bool = True) -> dict[str, object]:
    """Run ``pytest --collect-only ARGS`` in ``cwd`` with the probe plugin (and
    the installed plugins, unless ``plugins`` is false): how many tests it
    collected and which of ``watch`` it had imported."""
    (tmp_path / "collect_probe.py").write_text(PROBE)
    out = tmp_path / "probe.json"
    # A fresh run: not this run's xdist worker or options.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join(p for p in (str(tmp_path), env.get("PYTHONPATH")) if p)
    env |= {"COLLECT_PROBE_WATCH": ",".join(watch), "COLLECT_PROBE_OUT": str(out)}
    if not plugins:
        env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    run = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider",
                          "-p", "collect_probe", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    result: dict[str, object] = json.loads(out.read_text())
    return result


def test_collecting_the_suite_imports_no_torch_and_no_vllm(tmp_path: Path) -> None:
    probe = collect(tmp_path, [], HEAVY, ROOT)
    assert isinstance(probe["items"], int) and probe["items"] > 1000  # the whole suite was collected
    assert probe["imported"] == [], "a test module (or conftest.py) imports these at collection: use tests/_lazy.py"


def test_the_probe_sees_a_module_imported_at_collection(tmp_path: Path) -> None:
    """A planted test module that imports one stand-in at module level and
    another inside its test: only the first is seen."""
    suite = tmp_path / "planted"
    suite.mkdir()
    (suite / "eager_dep.py").write_text("")
    (suite / "lazy_dep.py").write_text("")
    (suite / "test_planted.py").write_text(textwrap.dedent('''
        import eager_dep


        def test_uses_both():
            import lazy_dep

            assert eager_dep and lazy_dep
        '''))
    probe = collect(tmp_path, ["--rootdir", str(suite), "-c", os.devnull, str(suite)], ("eager_dep", "lazy_dep"), suite,
                    plugins=False)
    assert probe == {"items": 1, "imported": ["eager_dep"]}
