"""An engine's attention kernels, read from a release and loaded without the engine.

Two halves, for two machines: :func:`extract` copies the files a kernel
needs into a small *kernel folder* with a checked manifest (carried to a GPU
machine with no network), and :func:`load` imports them there, unchanged,
over stand-ins for the engine modules they import, in a dedicated confirm
worker (it installs them as ``vllm`` in ``sys.modules``). :data:`KERNELS` is
the one record per kernel. Why, and how the folder is checked:
docs/confirm.md, "The kernels".
"""

from __future__ import annotations

import csv
import hashlib
import importlib.abc
import importlib.util
import io
import json
import logging
import os
import stat
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


# Bounds on what a kernel folder may hold (the largest kernel file of vLLM 0.33 is about 60 kB).
MAX_MANIFEST_BYTES = 1 << 20
MAX_FILE_BYTES = 4 << 20
RECORD = "RECORD"
_ALLOWED = frozenset(path for kernel in KERNELS.values() for path in kernel.files) | frozenset(_EXTRA_FILES)


def _release_record(source: ReleaseSource) -> dict[str, list[str]] | None:
    """The release's own RECORD rows by path: a wheel's dist-info RECORD, an
    installed distribution's; None for a source checkout (it has none)."""
    import zipfile

    from batchfuzz.engines import _wheels

    kind, _, rest = source.ref.partition(":")
    if kind == "wheel":
        with zipfile.ZipFile(rest) as archive:
            return _wheels.record_lines(archive, Path(rest).name)
    if kind == "installed":
        import importlib.metadata

        dist = importlib.metadata.distribution(source.distribution)
        return {str(f).replace(os.sep, "/"): [str(f).replace(os.sep, "/"), f"{f.hash.mode}={f.hash.value}", str(f.size)]
                for f in (dist.files or ()) if f.hash is not None}
    return None


def _wheel_hash(source: ReleaseSource) -> str | None:
    """The index's SHA-256 of the source's wheel, where a checked cache kept it."""
    from batchfuzz.engines import _wheels

    kind, _, rest = source.ref.partition(":")
    return _wheels.kept_hash(Path(rest)) if kind == "wheel" else None


def _record_text(files: dict[str, str], record: dict[str, list[str]] | None) -> str | None:
    """The release's RECORD rows of ``files``, each checked against the text
    read (SourceError naming a file the RECORD says otherwise of)."""
    from batchfuzz.engines import _wheels

    if record is None:
        return None
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    for path, text in sorted(files.items()):
        row = record.get(path)
        if row is None or row[1] != _wheels.record_digest(text.encode()):
            raise SourceError(f"the release's RECORD has no matching SHA-256 for {path}: not the release's file")
        writer.writerow(row)
    return out.getvalue()


def extract(source: ReleaseSource, dest: str | os.PathLike[str] | None = None) -> Path:
    """Copy every kernel's files (and the enum module they read) from
    ``source`` into ``dest`` (default :func:`default_folder`), with a
    manifest and the release's own RECORD rows of those files (a wheel, an
    installed distribution; a source checkout has none). A kernel whose
    files the release lacks is listed as absent in the manifest. Returns
    the folder. Raises ``SourceError`` when the release has none of the
    kernels, or a file differs from its RECORD."""
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
    record = _record_text(files, _release_record(source))
    for path, text in files.items():
        target = folder / path
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")
    if record is not None:
        (folder / RECORD).write_text(record, encoding="utf-8")
    manifest = {
        "engine": "vllm",
        "version": source.version,
        "source": source.ref,
        "wheel_sha256": _wheel_hash(source),
        "record": record is not None,
        "kernels": kernels,
        "files": {path: _sha256(text) for path, text in sorted(files.items())},
    }
    tmp = folder / (MANIFEST + ".tmp")
    tmp.write_text(json.dumps(manifest, indent=2) + "\n")
    os.replace(tmp, folder / MANIFEST)
    return folder


def _read_bounded(root: Path, relpath: str, limit: int) -> bytes:
    """The bytes of the regular file ``relpath`` inside ``root`` (no link
    out of it, no FIFO or device, at most ``limit`` bytes). KernelError naming it."""
    where = f"kernel folder {str(root)!r}: {relpath}"
    path = root / relpath
    if os.path.commonpath([os.path.realpath(path), os.path.realpath(root)]) != os.path.realpath(root):
        raise KernelError(f"{where} lies outside the folder")
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_NONBLOCK", 0))
    except FileNotFoundError:
        raise KernelError(f"{where} is missing") from None
    except OSError as exc:
        raise KernelError(f"{where} cannot be opened ({exc.strerror})") from None
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode):
            raise KernelError(f"{where} is not a regular file")
        data = fh.read(limit + 1)
    if len(data) > limit:
        raise KernelError(f"{where} is larger than {limit} bytes")
    return data


def _manifest_fields(folder: str | os.PathLike[str], manifest: Any) -> dict[str, str]:
    """The manifest's ``files`` checked for shape: a non-empty mapping of
    kernel file paths (those :data:`KERNELS` name) to hex SHA-256s."""
    where = f"kernel folder {str(folder)!r}: {MANIFEST}"
    if not isinstance(manifest, dict) or not isinstance(manifest.get("kernels"), dict):
        raise KernelError(f"{where} is not a manifest (a JSON object with kernels and files)")
    files = manifest.get("files")
    if not isinstance(files, dict) or not files:
        raise KernelError(f"{where} lists no files")
    for path, digest in files.items():
        if path not in _ALLOWED:
            raise KernelError(f"{where} lists {str(path)[:200]!r}, not a kernel file batchfuzz extracts")
        if not isinstance(digest, str) or len(digest) != 64 or digest.strip("0123456789abcdef"):
            raise KernelError(f"{where}: the SHA-256 of {path} is not 64 hex digits")
    for name, status in manifest["kernels"].items():
        if status == "extracted" and (name not in KERNELS or not set(KERNELS[name].files) <= set(files)):
            raise KernelError(f"{where}: kernel {str(name)[:100]!r} is marked extracted without its files")
    return files


def checked_files(folder: str | os.PathLike[str]) -> tuple[dict[str, Any], dict[str, bytes]]:
    """The manifest of a kernel folder and its files' bytes, each file
    checked against the manifest's SHA-256 and against the release's own
    RECORD row kept beside it (every source but a checkout has one).
    Raises KernelError naming the folder or the file."""
    root = Path(folder)
    if not (root / MANIFEST).exists():
        raise KernelError(f"kernel folder {str(folder)!r} has no {MANIFEST}: make one with `batchfuzz confirm --extract`")
    try:
        manifest = json.loads(_read_bounded(root, MANIFEST, MAX_MANIFEST_BYTES))
    except (ValueError, RecursionError) as exc:
        raise KernelError(f"kernel folder {str(folder)!r}: {MANIFEST} is unreadable ({str(exc)[:200]})") from None
    files = _manifest_fields(folder, manifest)
    record = _kept_record(root, manifest)
    texts: dict[str, bytes] = {}
    for path, digest in files.items():
        data = _read_bounded(root, path, MAX_FILE_BYTES)
        if hashlib.sha256(data).hexdigest() != digest:
            raise KernelError(f"kernel folder {str(folder)!r}: {path} differs from the release's file (SHA-256)")
        if record is not None and record.get(path) != _record_digest(data):
            raise KernelError(f"kernel folder {str(folder)!r}: {path} differs from the release's RECORD (SHA-256)")
        texts[path] = data
    return manifest, texts


def _record_digest(data: bytes) -> str:
    from batchfuzz.engines import _wheels

    return _wheels.record_digest(data)


def _kept_record(root: Path, manifest: dict[str, Any]) -> dict[str, str] | None:
    """The release's RECORD hashes kept in the folder, by path; None for a
    folder from a source checkout. KernelError when a folder from a wheel
    or an installed release lacks them."""
    if str(manifest.get("source", "")).startswith("dir:") and not manifest.get("record"):
        return None
    text = _read_bounded(root, RECORD, MAX_MANIFEST_BYTES).decode("utf-8", "replace")
    return {row[0]: row[1] for row in csv.reader(io.StringIO(text)) if len(row) == 3}


def read_manifest(folder: str | os.PathLike[str]) -> dict[str, Any]:
    """The manifest of a kernel folder, each file checked (:func:`checked_files`).
    Raises KernelError naming the folder or the file."""
    return checked_files(folder)[0]


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

    text = checked_files(folder)[1].get(_KV_CACHE_INTERFACE)
    if text is None:
        raise KernelError(f"kernel folder {str(folder)!r} lacks {_KV_CACHE_INTERFACE} (the KVQuantMode enum)")
    tree = bind.TextTree({_KV_CACHE_INTERFACE: text.decode("utf-8")})
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


class _CheckedSource(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Imports the engine's modules of a kernel folder from the bytes
    :func:`checked_files` checked, compiled here: never a ``.pyc`` (a
    ``__pycache__`` planted beside them is not read), never a file the
    manifest does not list (any other ``vllm.*`` module is refused)."""

    def __init__(self, root: Path, texts: dict[str, bytes]) -> None:
        self.root = root
        self.sources = {path.removesuffix(".py").replace("/", "."): (path, data) for path, data in texts.items()}

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> Any:
        if name.split(".", 1)[0] != "vllm":
            return None
        if name not in self.sources:
            raise ImportError(f"{name} is not a file of the kernel folder's manifest", name=name)
        return importlib.util.spec_from_loader(name, self, origin=str(self.root / self.sources[name][0]))

    def create_module(self, spec: Any) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        relpath, data = self.sources[module.__name__]
        module.__file__ = str(self.root / relpath)
        exec(compile(data, module.__file__, "exec", dont_inherit=True), module.__dict__)


def load(folder: str | os.PathLike[str], kernel: str) -> Callable[..., Any]:
    """The entry point of ``kernel`` (a name of :data:`KERNELS`) from a kernel
    folder, imported unchanged over the stand-ins. Raises KernelError when
    the folder lacks it or its files do not import."""
    import importlib

    if kernel not in KERNELS:
        raise KernelError(f"kernel must be one of {sorted(KERNELS)}, got {kernel!r}")
    spec = KERNELS[kernel]
    root = Path(folder)
    manifest, texts = checked_files(root)
    status = manifest.get("kernels", {}).get(kernel, "absent: not in the manifest")
    if status != "extracted":
        raise KernelError(f"kernel {kernel!r} of vllm {manifest.get('version')}: {status}")
    sys.dont_write_bytecode = True
    if "vllm.envs" not in sys.modules or getattr(sys.modules.get("vllm"), "__path__", None) != [str(root / "vllm")]:
        install_stand_ins(root)
    sys.meta_path[:] = [f for f in sys.meta_path if not isinstance(f, _CheckedSource)]
    sys.meta_path.insert(0, _CheckedSource(root, texts))
    try:
        module = importlib.import_module(spec.module)
    except Exception as exc:  # an import error inside the release's file: name it
        raise KernelError(f"kernel {kernel!r} of vllm {manifest.get('version')} does not import over the stand-ins: "
                          f"{type(exc).__name__}: {exc}") from exc
    return getattr(module, spec.entry)
