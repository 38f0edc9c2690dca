#!/usr/bin/env python3
"""Run import-linter (``lint-imports``, contracts in pyproject.toml) on batchfuzz as it is installed.

The repository keeps reference/, impl/ and strategies/ at the top and installs
them as batchfuzz.reference, batchfuzz.impl and batchfuzz.strategies (a
package-dir mapping); import-linter reads a package from one folder. So this
copies the Python files into the installed layout in a temporary folder and
runs ``lint-imports`` there, with this checkout's pyproject.toml. Extra
arguments go to ``lint-imports``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LAYOUT = {"batchfuzz": "batchfuzz", "reference": "batchfuzz/reference", "impl": "batchfuzz/impl",
          "strategies": "batchfuzz/strategies"}


def main() -> int:
    with tempfile.TemporaryDirectory(prefix="batchfuzz-lint-imports-") as tmp:
        for src, dest in LAYOUT.items():
            shutil.copytree(ROOT / src, Path(tmp) / dest, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"),
                            dirs_exist_ok=True)
        env = {**os.environ, "PYTHONPATH": tmp + os.pathsep + os.environ.get("PYTHONPATH", "")}
        exe = shutil.which("lint-imports", path=os.path.dirname(sys.executable) + os.pathsep + os.environ.get("PATH", ""))
        if exe is None:
            print("lint-imports not found: pip install -e '.[dev]'", file=sys.stderr)
            return 2
        return subprocess.call([exe, str(ROOT / "pyproject.toml"), "--no-cache", *sys.argv[1:]], cwd=tmp, env=env)


if __name__ == "__main__":
    sys.exit(main())
