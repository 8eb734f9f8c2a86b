"""The fetch step copies or downloads each file, verifies its sha256 and never keeps a bad file."""

from __future__ import annotations

import dataclasses
import hashlib
import re
from pathlib import Path

import pytest

from face.data import CRSARENA_EVAL, PUBLISHED_TABLE, ensure_data
from face.data import fetch as fetch_mod
from face.data.manifest import MANIFEST
from face.errors import DataError


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def sha256sums(mirror) -> dict[str, str]:
    """The mirror's own SHA256SUMS (``sha256  ./path`` lines), independent of the project's manifest."""
    f = mirror / "SHA256SUMS"
    if not f.exists():
        pytest.skip(f"{f} not present in this mirror")
    return {name.removeprefix("./"): digest for digest, name in (line.split() for line in f.read_text().splitlines())}


def test_manifest_pins_every_file_to_the_checksums_of_the_mirror(sha256sums):
    assert {name: e.sha256 for name, e in MANIFEST.items()} == sha256sums  # all 24 files, same digests


def test_manifest_urls_are_pinned_raw_github_urls():
    # the upstream of crs_arena_eval.json, as the data README gives it
    assert MANIFEST[CRSARENA_EVAL].url == ("https://raw.githubusercontent.com/informagi/face/"
                                           "cd4b3f7bcf0c99020e0f4ebc1a3d331220a8953d/dataset/crs_arena_eval.json")
    for entry in MANIFEST.values():  # https://raw.githubusercontent.com/<owner>/<repository>/<40-digit commit>/...
        assert re.fullmatch(r"https://raw\.githubusercontent\.com/[^/]+/[^/]+/[0-9a-f]{40}/.+", entry.url)


def test_copy_from_mirror_is_byte_identical(tmp_path, mirror):
    ensure_data(tmp_path, [PUBLISHED_TABLE], mirror=mirror, download=False)
    assert (tmp_path / PUBLISHED_TABLE).read_bytes() == (mirror / PUBLISHED_TABLE).read_bytes()
    assert fetch_mod.sha256_of(tmp_path / PUBLISHED_TABLE) == _sha256(mirror / PUBLISHED_TABLE)


def test_corrupt_mirror_file_is_rejected_and_not_kept(tmp_path, mirror):
    bad_mirror = tmp_path / "mirror"
    (bad_mirror / "face_released").mkdir(parents=True)
    (bad_mirror / PUBLISHED_TABLE).write_text("{}")
    dest = tmp_path / "data"
    with pytest.raises(DataError, match="checksum mismatch"):
        ensure_data(dest, [PUBLISHED_TABLE], mirror=bad_mirror, download=False)
    assert not (dest / PUBLISHED_TABLE).exists()
    assert not list((dest / "face_released").iterdir())  # no partial file left either


def test_existing_file_with_wrong_checksum_is_an_error(tmp_path, mirror):
    (tmp_path / "face_released").mkdir()
    (tmp_path / PUBLISHED_TABLE).write_text("tampered")
    with pytest.raises(DataError, match="published_table2.json.*checksum mismatch.*delete it"):
        ensure_data(tmp_path, [PUBLISHED_TABLE], mirror=mirror)


def test_missing_without_mirror_or_download(tmp_path):
    with pytest.raises(DataError, match=r"missing: no data mirror set \(FACE_DATA_MIRROR\), and downloading is "
                                        "disabled"):
        ensure_data(tmp_path, [CRSARENA_EVAL], mirror=None, download=False)


def test_unknown_file_name(tmp_path):
    with pytest.raises(DataError, match="not a known data file"):
        ensure_data(tmp_path, ["nope.json"], download=False)


def test_download_path_verifies_and_writes(tmp_path, mirror):
    """The download code path, served from a file:// URL (no internet here)."""
    src = mirror / PUBLISHED_TABLE
    entry = dataclasses.replace(MANIFEST[PUBLISHED_TABLE], url=src.as_uri())
    path = fetch_mod.fetch_file(entry, tmp_path / "d", mirror=None, download=True)
    assert path == tmp_path / "d" / PUBLISHED_TABLE and path.read_bytes() == src.read_bytes()


def test_download_failure_is_a_clear_error(tmp_path):
    entry = dataclasses.replace(MANIFEST[PUBLISHED_TABLE], url=(tmp_path / "absent.json").as_uri())
    with pytest.raises(DataError, match="could not be downloaded.*FACE_DATA_MIRROR"):
        fetch_mod.fetch_file(entry, tmp_path / "d", mirror=None, download=True)


def test_fetched_data_dir_holds_every_file_with_the_mirror_checksum(data_dir, sha256sums):
    assert {name: _sha256(data_dir / name) for name in MANIFEST} == sha256sums


def test_a_relative_mirror_is_read_once_against_the_directory_the_command_was_run_from(tmp_path, mirror,
                                                                                      monkeypatch):
    """FACE_DATA_MIRROR=../shared/data from /work/main: the copy is found even after the process changed directory,
    and the path is reported absolute."""
    import os

    start = tmp_path / "clone"
    start.mkdir()
    relative = os.path.relpath(mirror, start)
    monkeypatch.setattr(fetch_mod, "START_DIR", start)
    monkeypatch.chdir(tmp_path)  # elsewhere now: the relative path read from here would miss the mirror
    assert fetch_mod.mirror_dir(relative) == mirror.resolve()
    ensure_data(tmp_path / "data", [PUBLISHED_TABLE], mirror=relative, download=False)
    assert (tmp_path / "data" / PUBLISHED_TABLE).read_bytes() == (mirror / PUBLISHED_TABLE).read_bytes()


def test_a_mirror_folder_that_does_not_exist_is_named_as_such(tmp_path, monkeypatch):
    monkeypatch.setattr(fetch_mod, "START_DIR", tmp_path / "clone")
    with pytest.raises(DataError) as e:
        ensure_data(tmp_path / "data", [CRSARENA_EVAL], mirror="../shared/data", download=True)
    msg = str(e.value)
    assert f"the data mirror {tmp_path / 'shared' / 'data'} (FACE_DATA_MIRROR" in msg
    assert "is not a folder that exists" in msg and f"ran from, {tmp_path / 'clone'})" in msg
    assert "could not be downloaded" not in msg


def test_a_mirror_without_the_file_says_so_when_the_download_fails(tmp_path):
    entry = dataclasses.replace(MANIFEST[PUBLISHED_TABLE], url=(tmp_path / "absent.json").as_uri())
    (tmp_path / "mirror").mkdir()
    with pytest.raises(DataError, match=rf"could not be downloaded.*The data mirror {tmp_path / 'mirror'} has no "
                                        rf"{PUBLISHED_TABLE}\."):
        fetch_mod.fetch_file(entry, tmp_path / "d", mirror=tmp_path / "mirror", download=True)
