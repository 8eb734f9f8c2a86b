"""Make sure the data files exist in the data directory: verify, else copy from a mirror or download.

Resolution order for each file: already in ``data_dir`` with the right sha256 -> done;
else copied from ``mirror`` (a directory laid out like the data directory, e.g. ``../shared/data``);
else downloaded from its pinned upstream URL. Every file is verified against the manifest; a
file with the wrong checksum is never used.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import urllib.request
from pathlib import Path
from typing import BinaryIO, Iterable

from face.data.manifest import MANIFEST, DataFile
from face.errors import DataError
from face.files import atomic_path

log = logging.getLogger(__name__)
START_DIR = Path.cwd()  # the directory the command was run from: a relative FACE_DATA_MIRROR is read against it


def mirror_dir(value: str | Path | None) -> Path | None:
    """``FACE_DATA_MIRROR`` (or ``paths.data_mirror``) as an absolute path: ``~`` expanded, a relative one resolved
    once against the directory the command was run from (``START_DIR``), not wherever the process is later."""
    if value is None or not str(value).strip():
        return None
    return (START_DIR / os.path.expanduser(str(value))).resolve()  # (an absolute path replaces START_DIR)


def sha256_of(path: Path) -> str:
    with open(path, "rb") as f:
        return hashlib.file_digest(f, "sha256").hexdigest()


def _atomic_copy(src: BinaryIO, dest: Path, entry: DataFile) -> None:
    """Copy ``src`` to a temp file beside ``dest``, verify its sha256, then rename into place (``atomic_path``)."""
    with atomic_path(dest) as tmp:
        with open(tmp, "wb") as out:
            shutil.copyfileobj(src, out)
        got = sha256_of(tmp)
        if got != entry.sha256:
            raise DataError(dest, f"checksum mismatch after fetch: expected sha256 {entry.sha256}, got {got}")


def fetch_file(entry: DataFile, data_dir: Path, mirror: Path | None = None, download: bool = True) -> Path:
    dest = data_dir / entry.local
    if dest.exists():
        got = sha256_of(dest)
        if got == entry.sha256:
            return dest
        raise DataError(dest, f"checksum mismatch: expected sha256 {entry.sha256}, got {got}. "
                              "The file was changed or is a different version; delete it to fetch it again.")
    why = "no data mirror set (FACE_DATA_MIRROR)"
    if mirror is not None:
        if not Path(mirror).is_dir():
            raise DataError(dest, f"missing, and the data mirror {mirror} (FACE_DATA_MIRROR, read against the "
                                  f"directory you ran from, {START_DIR}) is not a folder that exists")
        src = Path(mirror) / entry.local
        if src.exists():
            log.info("copying %s from mirror %s", entry.local, mirror)
            with open(src, "rb") as f:
                _atomic_copy(f, dest, entry)
            return dest
        why = f"the data mirror {mirror} has no {entry.local}"
        log.warning("%s; downloading it", why)
    if not download:
        raise DataError(dest, f"missing: {why}, and downloading is disabled (set dataset.download=true)")
    log.info("downloading %s", entry.url)
    try:
        with urllib.request.urlopen(entry.url, timeout=60) as resp:
            _atomic_copy(resp, dest, entry)
    except OSError as e:  # URLError, timeouts, HTTP errors
        hint = (f"{why[0].upper()}{why[1:]}" if mirror is not None
                else "Without internet, point FACE_DATA_MIRROR at a copy of the data")
        raise DataError(dest, f"missing and could not be downloaded from {entry.url}: {e}. {hint}.") from None
    return dest


def ensure_data(data_dir: str | Path, files: Iterable[str] | None = None, mirror: str | Path | None = None,
                download: bool = True) -> None:
    """Fetch and verify ``files`` (local paths from the manifest; default: all) into ``data_dir``."""
    data_dir, mirror_path = Path(data_dir), mirror_dir(mirror)
    for name in (files if files is not None else MANIFEST):
        if name not in MANIFEST:
            raise DataError(data_dir / name, f"not a known data file; known: {', '.join(sorted(MANIFEST))}")
        fetch_file(MANIFEST[name], data_dir, mirror_path, download)


def data_checksums(files: Iterable[str] | None = None) -> dict[str, str]:
    """The pinned sha256 of each file (for run tags)."""
    return {name: MANIFEST[name].sha256 for name in (files if files is not None else MANIFEST)}
