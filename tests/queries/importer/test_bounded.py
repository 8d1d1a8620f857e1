"""The bounded reading of import files (queries.importer.bounded): lines, fields, NUL, UTF-8, gzip and
zip bombs, zip members that escape — each refused naming the line or member, in bounded memory."""

from __future__ import annotations

import gzip
import stat
import zipfile
from pathlib import Path

import pytest
from django.test import override_settings

from queries.importer.bounded import HostileInput, check_lines, check_zip, line_chunks


def _joined(path: Path, **kwargs: object) -> tuple[list[int], bytes]:
    firsts, parts = [], []
    for first, whole in line_chunks(path, **kwargs):  # type: ignore[arg-type]
        firsts.append(first)
        parts.append(whole)
    return firsts, b"".join(parts)


def test_chunks_are_whole_lines_numbered_and_lose_nothing(tmp_path: Path) -> None:
    body = b"".join(b"line %d,%s\n" % (i, b"7" * 600) for i in range(1, 5001))  # 3 MB
    path = tmp_path / "a.csv"
    path.write_bytes(b"\xef\xbb\xbf" + body + b"last,no newline")
    firsts, joined = _joined(path, chunk_bytes=4096)
    assert joined == body + b"last,no newline\n"
    assert len(firsts) >= 3 and firsts[0] == 1
    # each chunk's first line number is the count of lines before it, plus one
    offsets = [1]
    for first, whole in line_chunks(path, chunk_bytes=4096):
        assert first == offsets[-1] and whole.endswith(b"\n")
        offsets.append(first + whole.count(b"\n"))


@override_settings(TJWATER_IMPORT_MAX_LINE_BYTES=1000, TJWATER_IMPORT_MAX_FIELD_BYTES=100)
@pytest.mark.parametrize(
    ("tail", "words"),
    [
        (b"x" * 5000 + b"\n", "line 4 is longer than"),  # a long line in the middle of a chunk
        (b"9" * 3_000_000, "line 4 is longer than"),  # one endless last line (never read whole)
        (b"a," + b"b" * 200 + b",c\n", "line 4 has a field longer than"),
        (b"a,\x00,c\n", "line 4 holds a NUL byte"),
    ],
)
def test_a_line_over_the_bounds_is_refused_by_number(tmp_path: Path, tail: bytes, words: str) -> None:
    path = tmp_path / "h.csv"
    path.write_bytes(b"h1,h2\n1,2\n3,4\n" + tail + b"5,6\n")
    with pytest.raises(HostileInput, match=words):
        _joined(path)


def test_invalid_utf8_is_refused_by_line(tmp_path: Path) -> None:
    path = tmp_path / "net.inp"
    path.write_bytes(b"[TITLE]\nok\n\xff\xfe bad\n")
    with pytest.raises(HostileInput, match=r"net.inp: line 3 of the network file is not UTF-8"):
        check_lines(path, what="network file")
    path.write_bytes("[TITLE]\nNetz Süd\n".encode())
    check_lines(path, what="network file")


@override_settings(TJWATER_IMPORT_MAX_RATIO=200)
def test_a_gzip_bomb_is_refused_before_it_unpacks(tmp_path: Path) -> None:
    path = tmp_path / "bomb.csv.gz"
    with gzip.open(path, "wb", compresslevel=9) as fh:
        line = b"PT-1,2026-01-01T00:00:00Z,1.0\n" * 10_000
        for _ in range(2000):  # ~600 MB unpacked from ~1 MB
            fh.write(line)
    assert path.stat().st_size < 3_000_000
    with pytest.raises(HostileInput, match=r"bomb.csv.gz: unpacks more than 200 times its size"):
        _joined(path)


@override_settings(TJWATER_IMPORT_MAX_UNPACKED_BYTES=10_000)
def test_a_gzip_over_the_unpacked_size_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "big.csv.gz"
    path.write_bytes(gzip.compress(b"1,2\n" * 5000))
    with pytest.raises(HostileInput, match=r"unpacks to more than 9.765\d* KiB"):
        _joined(path)
    small = tmp_path / "small.csv.gz"
    small.write_bytes(gzip.compress(b"1,2\n" * 100))
    assert _joined(small)[1] == b"1,2\n" * 100


def test_a_truncated_gzip_is_refused_with_a_sentence(tmp_path: Path) -> None:
    path = tmp_path / "cut.csv.gz"
    path.write_bytes(gzip.compress(b"1,2\n" * 100_000)[:200])
    with pytest.raises(HostileInput, match=r"cut.csv.gz: not a readable gzip file"):
        _joined(path)


def _zip(path: Path, members: list[tuple[str, bytes, int | None]]) -> Path:
    with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_DEFLATED) as zf:
        for name, data, mode in members:
            info = zipfile.ZipInfo(name)
            info.compress_type = zipfile.ZIP_DEFLATED
            if mode is not None:
                info.external_attr = mode << 16
            zf.writestr(info, data)
    return path


@pytest.mark.parametrize(
    ("name", "mode", "words"),
    [
        ("../../etc/passwd", None, "member '../../etc/passwd' points outside the archive"),
        ("/abs/mains.shp", None, "member '/abs/mains.shp' points outside"),
        ("a/../../b.shp", None, "points outside"),
        ("C:/win.shp", None, "points outside"),
        ("link.shp", stat.S_IFLNK | 0o777, "member 'link.shp' is a symbolic link"),
    ],
)
def test_zip_members_that_escape_are_refused(tmp_path: Path, name: str, mode: int | None, words: str) -> None:
    path = _zip(tmp_path / "m.zip", [("mains.shp", b"ok", None), (name, b"x", mode)])
    with pytest.raises(HostileInput, match=words):
        check_zip(path)


def test_a_zip_bomb_is_refused_naming_the_member(tmp_path: Path) -> None:
    path = _zip(tmp_path / "b.zip", [("mains.dbf", b"\0" * 50_000_000, None)])
    with pytest.raises(HostileInput, match=r"member 'mains.dbf' unpacks more than 200 times"):
        check_zip(path)
    with override_settings(TJWATER_IMPORT_MAX_UNPACKED_BYTES=1000):
        fine = _zip(tmp_path / "f.zip", [("a.shp", b"1" * 600, None), ("a.dbf", b"2" * 600, None)])
        with pytest.raises(HostileInput, match=r"member 'a.dbf' takes the archive past"):
            check_zip(fine)
    check_zip(_zip(tmp_path / "ok.zip", [("a.shp", b"1" * 600, None), ("dir/a.dbf", b"2" * 600, None)]))


def test_not_a_zip_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "x.zip"
    path.write_bytes(b"not a zip")
    with pytest.raises(HostileInput, match=r"x.zip: not a readable zip file"):
        check_zip(path)
