"""Whether a release wheel is the release: checked against the SHA-256 its
index publishes, and its files against the wheel's own ``RECORD``.

``fetch_wheel`` (``batchfuzz.engines``) asks pip for the index's hash of the
wheel it will download (``pip install --dry-run --report``: the simple API's
``#sha256=`` of the chosen file, read through pip's own index settings),
checks the downloaded file against it and every file inside against the
``RECORD``, and keeps the hash beside the wheel (``NAME.whl.sha256``). A
cached wheel is checked against that hash whenever it is reused; a wheel in
the cache without one is checked against the index first (refused when the
index cannot be reached: nothing else says it is the release).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
import os
import subprocess
import sys
import zipfile
from pathlib import Path

from batchfuzz.engines import SourceError

# A RECORD larger than this is not a release's (vLLM's is about 0.3 MB).
MAX_RECORD_BYTES = 16 << 20
_SIGNATURES = ("RECORD", "RECORD.jws", "RECORD.p7s")


def sha256_file(path: Path) -> str:
    """The hex SHA-256 of the file at ``path``, read in chunks."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def record_digest(data: bytes) -> str:
    """A file's hash as a wheel's RECORD writes it (``sha256=`` and the urlsafe
    base64 of the digest, unpadded)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()


def record_lines(archive: zipfile.ZipFile, wheel: str) -> dict[str, list[str]]:
    """The ``RECORD`` rows of a wheel by path (``[path, hash, size]``).
    SourceError naming ``wheel`` when it has no single dist-info RECORD or
    the RECORD cannot be read."""
    names = [n for n in archive.namelist() if n.count("/") == 1 and n.endswith(".dist-info/RECORD")]
    if len(names) != 1:
        raise SourceError(f"wheel {wheel!r} has {len(names)} dist-info RECORD files, not one: not a release wheel")
    info = archive.getinfo(names[0])
    if info.file_size > MAX_RECORD_BYTES:
        raise SourceError(f"wheel {wheel!r}: its RECORD is {info.file_size} bytes, over {MAX_RECORD_BYTES}")
    try:
        rows = list(csv.reader(io.StringIO(archive.read(names[0]).decode("utf-8"))))
    except (UnicodeDecodeError, csv.Error, zipfile.BadZipFile) as exc:
        raise SourceError(f"wheel {wheel!r}: its RECORD is unreadable ({exc})") from None
    return {row[0]: row for row in rows if len(row) == 3}


def check_record(path: Path) -> None:
    """Every file of the wheel at ``path`` is in its RECORD with a matching
    SHA-256. SourceError naming the wheel and the first file that is not."""
    try:
        with zipfile.ZipFile(path) as archive:
            rows = record_lines(archive, path.name)
            for info in archive.infolist():
                if info.is_dir() or info.filename.rsplit("/", 1)[-1] in _SIGNATURES:
                    continue
                row = rows.get(info.filename)
                if row is None or not row[1].startswith("sha256="):
                    raise SourceError(f"wheel {path.name!r}: {info.filename} has no SHA-256 in its RECORD")
                with archive.open(info) as fh:
                    h = hashlib.sha256()
                    for chunk in iter(lambda: fh.read(1 << 20), b""):
                        h.update(chunk)
                if "sha256=" + base64.urlsafe_b64encode(h.digest()).rstrip(b"=").decode() != row[1]:
                    raise SourceError(f"wheel {path.name!r}: {info.filename} differs from its RECORD (SHA-256)")
    except (zipfile.BadZipFile, OSError) as exc:
        raise SourceError(f"{str(path)!r} is not a readable wheel (zip): {exc}") from None


def index_hash(distribution: str, version: str, timeout_s: float) -> tuple[str, str]:
    """The file name and SHA-256 the package index publishes for the wheel
    pip would download for ``distribution==version`` here (pip's own index
    settings). SourceError when pip cannot say."""
    cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--no-deps",
           "--only-binary=:all:", "--quiet", "--report", "-", "--timeout", "20", "--retries", "1",
           f"{distribution}=={version}"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout_s)
    except subprocess.TimeoutExpired:
        raise SourceError(f"asking the index for the hash of {distribution}=={version} took more than {timeout_s:g} s") from None
    try:
        info = json.loads(proc.stdout)["install"][0]["download_info"]
        name = info["url"].rsplit("/", 1)[-1].split("#", 1)[0]
        digest = info["archive_info"]["hashes"]["sha256"]
    except (ValueError, LookupError, TypeError, AttributeError):
        said = [ln for ln in (proc.stderr or "").splitlines() if ln.startswith("ERROR")][-1:] or ["no hash in pip's report"]
        raise SourceError(f"cannot learn the index's SHA-256 of {distribution}=={version} (pip exit {proc.returncode}): "
                          f"{said[0][:200]}") from None
    return name, str(digest).lower()


def _sidecar(wheel: Path) -> Path:
    return wheel.with_name(wheel.name + ".sha256")


def verified(wheel: Path, distribution: str, version: str, timeout_s: float,
             published: tuple[str, str] | None = None) -> Path:
    """``wheel`` when it is the release: its SHA-256 the one the index
    published (``published``, else the one kept beside it, else asked of the
    index now) and, the first time, its files those of its RECORD; the hash
    is then kept beside it. SourceError naming the wheel otherwise."""
    kept = _sidecar(wheel)
    expected = None
    if published is None and kept.is_file() and kept.stat().st_size < 200:
        expected = kept.read_text().strip().lower()
    if expected is None:
        try:
            name, expected = published or index_hash(distribution, version, timeout_s)
        except SourceError as exc:
            raise SourceError(f"cached wheel {str(wheel)!r} cannot be checked against the index: {exc} "
                              f"(delete it, or fetch it where the index can be reached)") from None
        if name != wheel.name:
            raise SourceError(f"wheel {str(wheel)!r} is not the file the index publishes for {distribution}=={version} "
                              f"({name})")
    if sha256_file(wheel) != expected:
        raise SourceError(f"wheel {str(wheel)!r} differs from the release the index publishes (SHA-256): delete it")
    if not kept.is_file():
        check_record(wheel)
        tmp = kept.with_name(kept.name + ".tmp")
        tmp.write_text(expected + "\n")
        os.replace(tmp, kept)
    return wheel


def kept_hash(wheel: Path) -> str | None:
    """The index's SHA-256 kept beside a checked wheel, or None."""
    kept = _sidecar(wheel)
    return kept.read_text().strip() if kept.is_file() and kept.stat().st_size < 200 else None
