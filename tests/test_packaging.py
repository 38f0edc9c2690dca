"""What ``pip install batchfuzz`` installs: one import name, every package.

The repository keeps the top-level folders ``reference/``, ``impl/`` and
``strategies/``; the distribution installs them as ``batchfuzz.reference``,
``batchfuzz.impl`` and ``batchfuzz.strategies``, so that no generic name
(``reference``, ``impl``) collides with another distribution or a user's
folder. Checked on a wheel built from the checkout and in a fresh virtual
environment (regular and editable installs are checked by hand, see the
README's quick start; a venv per test would cost minutes).
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
MAPPED = {"batchfuzz": REPO / "batchfuzz", "batchfuzz.reference": REPO / "reference", "batchfuzz.impl": REPO / "impl",
          "batchfuzz.strategies": REPO / "strategies"}


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    r = subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(out), str(REPO)],
                       capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        pytest.fail(f"pip wheel failed:\n{r.stdout}\n{r.stderr}")
    return next(out.glob("batchfuzz-*.whl"))


def test_the_wheel_installs_one_top_level_name(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert sorted({n.split("/")[0] for n in names if not n.split("/")[0].endswith(".dist-info")}) == ["batchfuzz"]


def test_every_package_of_the_checkout_is_in_the_wheel(wheel: Path) -> None:
    names = set(zipfile.ZipFile(wheel).namelist())
    for package, folder in MAPPED.items():
        for init in folder.rglob("__init__.py"):
            rel = init.parent.relative_to(folder)
            if "__pycache__" in rel.parts:
                continue
            installed = "/".join([*package.split("."), *rel.parts, "__init__.py"])
            assert installed in names, f"{init.relative_to(REPO)} is not installed (add its package to pyproject.toml)"


def test_installed_names_import_and_the_folders_do_not(tmp_path: Path, wheel: Path) -> None:
    """From outside the checkout, with only the wheel's files on the path:
    the namespaced names import; ``reference`` and ``impl`` do not."""
    site = tmp_path / "site"
    zipfile.ZipFile(wheel).extractall(site)
    records = sorted(p.stem for p in (REPO / "batchfuzz" / "contracts").glob("*.py")
                     if not p.stem.startswith("_") and not p.stem.endswith("_variants"))  # one record module per contract
    code = ("import batchfuzz.reference, batchfuzz.impl, batchfuzz.strategies, batchfuzz.testing\n"
            "from batchfuzz import registry\n"
            f"assert sorted(c.name for c in registry.contracts()) == {records!r}, registry.contracts()\n"
            "for name in ('reference', 'impl', 'strategies'):\n"
            "    try:\n"
            "        __import__(name)\n"
            "    except ImportError:\n"
            "        continue\n"
            "    raise SystemExit(f'{name} is importable')\n")
    r = subprocess.run([sys.executable, "-I", "-c", f"import sys; sys.path.insert(0, {str(site)!r})\n" + code], cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout + r.stderr


def test_no_module_imports_the_folders_by_their_own_names() -> None:
    """Inside the checkout ``reference`` and ``impl`` would import (the
    repository root is on the path when tests run): no code may rely on it."""
    offenders = []
    folders = ("batchfuzz", "reference", "impl", "strategies", "tests")
    for path in [*REPO.glob("*.py"), *(p for d in folders for p in (REPO / d).rglob("*.py"))]:
        for k, line in enumerate(path.read_text().splitlines(), 1):
            stripped = line.strip()
            if stripped.startswith(("from reference", "from impl", "from strategies", "import reference", "import impl",
                                    "import strategies")):
                offenders.append(f"{path.relative_to(REPO)}:{k}: {stripped}")
    assert not offenders, "\n".join(offenders)
