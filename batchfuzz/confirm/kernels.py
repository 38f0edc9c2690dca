"""An engine's attention kernels, read from a release and loaded without the engine.

Two halves, for two machines:

- :func:`extract` (a machine that can read the release: a wheel in the cache,
  a source checkout, the installed distribution) copies just the files a
  kernel needs into a *kernel folder* (``cache_dir()/kernels/vllm-VERSION``
  by default) with a ``manifest.json`` naming the release, the source and each
  file's SHA-256. A folder of a few hundred kB can be carried to a GPU machine
  that has no network; a whole wheel cannot.
- :func:`load` (the GPU machine, inside a confirm worker process only) imports
  the kernel files from such a folder, unchanged, over stand-ins for the five
  engine modules they import (``vllm.envs``, ``vllm.logger``,
  ``vllm.platforms``, ``vllm.triton_utils``, ``vllm.v1.kv_cache_interface``).
  The stand-ins are built here from what the kernel files read of them; the
  one enum they use (``KVQuantMode``) is cut out of the release's own
  ``kv_cache_interface.py`` with the binding kit (``batchfuzz.bind``), so its
  members are the release's. Because the files import ``vllm.*`` by absolute
  name, :func:`load` installs its modules under the name ``vllm`` in
  ``sys.modules``: it is meant for a dedicated process (``batchfuzz.confirm``
  runs it in its worker), never for one that imports a real vLLM.

:data:`KERNELS` is the one record per kernel: the files it needs, the entry
point, and the contracts whose counterexamples it can confirm (the test that
reads ``contracts`` is tests/test_confirm.py::test_every_kernel_names_contracts).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from batchfuzz.engines import ReleaseSource, SourceError, cache_dir

MANIFEST = "manifest.json"
_OPS = "vllm/v1/attention/ops"
_KV_CACHE_INTERFACE = "vllm/v1/kv_cache_interface.py"


@dataclass(frozen=True)
class Kernel:
    """One attention kernel of an engine release.

    ``files`` are the paths inside the release that :func:`extract` copies
    (the kernel's module first); ``module`` and ``entry`` name the function
    that :func:`load` returns; ``contracts`` are the contracts whose layouts
    this kernel consumes in the engine, so that ``confirm`` can replay their
    counterexamples through it (read by ``batchfuzz.confirm.layouts``).
    ``adapter`` names the function of ``batchfuzz.confirm.attention`` that
    calls ``entry`` through the unified kernel's signature (empty: the entry
    has that signature), read by the confirm worker; ``needs`` is a text the
    kernel's module must contain for that call to mean what the adapter
    says (a release without it lists the kernel as absent: :func:`extract`).
    """

    name: str
    files: tuple[str, ...]
    module: str
    entry: str
    contracts: tuple[str, ...]
    description: str
    adapter: str = ""
    needs: str = ""


KERNELS: dict[str, Kernel] = {
    k.name: k
    for k in (
        Kernel(
            "unified",
            (f"{_OPS}/triton_unified_attention.py", f"{_OPS}/triton_attention_helpers.py"),
            "vllm.v1.attention.ops.triton_unified_attention",
            "unified_attention",
            ("split_dummy_tokens", "make_dummy", "pad_query_start_loc", "allow_microbatching", "find_conflicts"),
            "the Triton unified attention kernel (prefill, decode and mixed steps over a paged KV cache): "
            "reads cu_seqlens_q, seqused_k and the block table, so every layout of A, B, C and E reaches it",
        ),
        Kernel(
            "decode",
            (f"{_OPS}/triton_decode_attention.py",),
            "vllm.v1.attention.ops.triton_decode_attention",
            "decode_attention_fwd",
            ("make_dummy",),
            "the Triton paged decode kernel (one query token per sequence): reads seq lens and the block table "
            "but no query_start_loc, so it confirms a dummy layout's seq_lens (contract B), not C's padding",
            adapter="decode_as_unified",
        ),
        Kernel(
            "prefix_prefill",
            (f"{_OPS}/prefix_prefill.py",),
            "vllm.v1.attention.ops.prefix_prefill",
            "context_attention_fwd",
            ("split_dummy_tokens", "make_dummy", "pad_query_start_loc", "allow_microbatching", "find_conflicts"),
            "the Triton prefix-prefill kernel (context_attention_fwd), on its cached-K/V path (k=None: every token's "
            "K/V read from the paged cache): reads b_start_loc (query_start_loc), b_seq_len and the block table "
            "(b_loc) over its own cache layout, so every layout of A, B, C and E reaches it",
            adapter="prefix_prefill_as_unified",
            needs="KV_FROM_CACHE",
        ),
    )
}

_EXTRA_FILES = (_KV_CACHE_INTERFACE,)


class KernelError(LookupError):
    """A kernel folder is missing, incomplete, or its files do not load."""


def default_folder(version: str) -> Path:
    """Where :func:`extract` puts a release's kernel files by default."""
    return cache_dir() / "kernels" / f"vllm-{version}"


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def extract(source: ReleaseSource, dest: str | os.PathLike[str] | None = None) -> Path:
    """Copy every kernel's files (and the enum module they read) from
    ``source`` into ``dest`` (default :func:`default_folder`), with a
    manifest. A kernel whose files the release lacks is listed as absent
    in the manifest. Returns the folder. Raises ``SourceError`` when the
    release has none of the kernels."""
    folder = Path(dest) if dest is not None else default_folder(source.version)
    files: dict[str, str] = {}
    kernels: dict[str, str] = {}
    for kernel in KERNELS.values():
        texts = {path: source.read(path) for path in kernel.files}
        missing = [path for path, text in texts.items() if text is None]
        if missing:
            kernels[kernel.name] = f"absent: the release has no {', '.join(missing)}"
            continue
        if kernel.needs and kernel.needs not in (texts[kernel.files[0]] or ""):
            kernels[kernel.name] = f"absent: the release's {kernel.files[0]} has no {kernel.needs} (the call confirm makes)"
            continue
        kernels[kernel.name] = "extracted"
        files.update({path: text for path, text in texts.items() if text is not None})
    if not files:
        raise SourceError(f"{source!r} has none of the kernels {sorted(KERNELS)}")
    for path in _EXTRA_FILES:
        text = source.read(path)
        if text is not None:
            files[path] = text
    for path, text in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text)
    manifest = {
        "engine": "vllm",
        "version": source.version,
        "source": source.ref,
        "kernels": kernels,
        "files": {path: _sha256(text) for path, text in sorted(files.items())},
    }
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, folder / MANIFEST)
    return folder


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a kernel folder, each file checked against its
    SHA-256. Raises KernelError naming the folder or the file."""
    root = Path(folder)
    try:
        manifest = json.loads((root / MANIFEST).read_text())
    except FileNotFoundError:
        raise KernelError(f"kernel folder {str(folder)!r} has no {MANIFEST}: make one with `batchfuzz confirm --extract`") from None
    except (OSError, ValueError) as exc:
        raise KernelError(f"kernel folder {str(folder)!r}: {MANIFEST} is unreadable ({exc})") from None
    for path, digest in manifest.get("files", {}).items():
        try:
            text = (root / path).read_text()
        except OSError:
            raise KernelError(f"kernel folder {str(folder)!r} lacks {path}, listed in its manifest") from None
        if _sha256(text) != digest:
            raise KernelError(f"kernel folder {str(folder)!r}: {path} differs from the release's file (SHA-256)")
    return manifest


# ----------------------------------------------------------------- stand-ins


class _Logger(logging.LoggerAdapter):
    """vLLM's logger adds ``*_once`` methods; a plain logger with them."""

    def debug_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.debug(msg, *args)

    def info_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.info(msg, *args)

    def warning_once(self, msg: str, *args: Any, **kwargs: Any) -> None:
        self.warning(msg, *args)


class _Platform:
    """What the kernel files ask of ``current_platform``, answered from torch
    for a CUDA device."""

    def fp8_dtype(self) -> Any:
        import torch

        return torch.float8_e4m3fn

    def is_rocm(self) -> bool:
        return False

    def is_cuda(self) -> bool:
        return True

    def get_device_capability(self) -> Any:
        import torch

        return torch.cuda.get_device_capability() if torch.cuda.is_available() else None

    def has_device_capability(self, capability: Any) -> bool:
        cap = self.get_device_capability()
        if cap is None:
            return False
        want = capability if isinstance(capability, tuple) else divmod(int(capability), 10)
        return tuple(cap) >= tuple(want)

    def is_device_capability(self, capability: Any) -> bool:
        cap = self.get_device_capability()
        want = capability if isinstance(capability, tuple) else divmod(int(capability), 10)
        return cap is not None and tuple(cap) == tuple(want)

    def is_device_capability_family(self, family: int) -> bool:
        cap = self.get_device_capability()
        return cap is not None and cap[0] == int(family) // 10


def _kv_quant_mode(folder: Path) -> Any:
    """The release's own ``KVQuantMode`` enum, cut out of its
    ``kv_cache_interface.py`` with the binding kit (only the class; the
    module's other imports are never read)."""
    from batchfuzz import bind

    path = folder / _KV_CACHE_INTERFACE
    if not path.is_file():
        raise KernelError(f"kernel folder {str(folder)!r} lacks {_KV_CACHE_INTERFACE} (the KVQuantMode enum)")
    tree = bind.TextTree({_KV_CACHE_INTERFACE: path.read_text()})
    loader = bind.Loader(tree, "vllm")
    return loader.load(loader.file(_KV_CACHE_INTERFACE).piece("KVQuantMode"))


def _module(name: str, **attrs: Any) -> types.ModuleType:
    mod = types.ModuleType(name)
    mod.__dict__.update(attrs)
    return mod


def install_stand_ins(folder: Path) -> None:
    """Put the engine's package tree (as namespace packages over ``folder``)
    and the five stand-in modules into ``sys.modules``. For a worker process
    of its own only (see the module docstring)."""
    import triton
    import triton.language as tl

    for pkg in ("vllm", "vllm.v1", "vllm.v1.attention", "vllm.v1.attention.ops"):
        mod = types.ModuleType(pkg)
        mod.__path__ = [str(folder / pkg.replace(".", "/"))]
        sys.modules[pkg] = mod
    logger = logging.getLogger("batchfuzz.confirm.kernel")
    sys.modules["vllm.envs"] = _module("vllm.envs", VLLM_BATCH_INVARIANT=False, VLLM_TRITON_USE_TD=False)
    sys.modules["vllm.logger"] = _module("vllm.logger", init_logger=lambda name: _Logger(logger, {}))
    sys.modules["vllm.platforms"] = _module("vllm.platforms", current_platform=_Platform())
    sys.modules["vllm.triton_utils"] = _module("vllm.triton_utils", triton=triton, tl=tl, HAS_TRITON=True)
    sys.modules["vllm.v1.kv_cache_interface"] = _module("vllm.v1.kv_cache_interface", KVQuantMode=_kv_quant_mode(folder))
    sys.modules["vllm"].envs = sys.modules["vllm.envs"]  # type: ignore[attr-defined]


def load(folder: str | os.PathLike[str], kernel: str) -> Callable[..., Any]:
    """The entry point of ``kernel`` (a name of :data:`KERNELS`) from a kernel
    folder, imported unchanged over the stand-ins. Raises KernelError when
    the folder lacks it or its files do not import."""
    import importlib

    if kernel not in KERNELS:
        raise KernelError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    spec = KERNELS[kernel]
    root = Path(folder)
    manifest = read_manifest(root)
    status = manifest.get("kernels", {}).get(kernel, "absent: not in the manifest")
    if status != "extracted":
        raise KernelError(f"kernel {kernel!r} of vllm {manifest.get('version')}: {status}")
    if "vllm.envs" not in sys.modules or getattr(sys.modules.get("vllm"), "__path__", None) != [str(root / "vllm")]:
        install_stand_ins(root)
    try:
        module = importlib.import_module(spec.module)
    except Exception as exc:  # an import error inside the release's file: name it
        raise KernelError(f"kernel {kernel!r} of vllm {manifest.get('version')} does not import over the stand-ins: "
                          f"{type(exc).__name__}: {exc}") from exc
    return getattr(module, spec.entry)
