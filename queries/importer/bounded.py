"""Reading an import's file within fixed bounds, whatever the file holds (issue 41).

Every importer reads what a user uploads; the bounds here keep the cost of a hostile or careless file
small: a line (``TJWATER_IMPORT_MAX_LINE_BYTES``) or a field (``TJWATER_IMPORT_MAX_FIELD_BYTES``) is never
read whole into memory past its bound, a compressed file never unpacks past
``TJWATER_IMPORT_MAX_UNPACKED_BYTES`` or a ratio of ``TJWATER_IMPORT_MAX_RATIO`` (a bomb), and a zip's
members are checked by name and size before anything reads them. Each refusal is a ``HostileInput`` whose
message names the file and the line or member; the importers re-raise it as their own error.

``line_chunks`` is the CSV readers' source: whole lines, in chunks of at most ``CHUNK_BYTES``, with the
number of their first line, so a parser (pandas' C reader) only ever sees a bounded buffer of lines that
passed the checks. Lines are physical lines: a quoted field spanning lines is not supported by the files
these importers take (numbers, times, identifiers).
"""

from __future__ import annotations

import gzip
import re
import stat
import zipfile
import zlib
from collections.abc import Iterator
from pathlib import Path, PurePosixPath
from typing import BinaryIO, NoReturn

import numpy as np
from django.conf import settings

#: Bytes handed to a parser at once (whole lines); a chunk holds at most this plus one line.
CHUNK_BYTES = 4 * 1024 * 1024
_READ = 1024 * 1024  # bytes read from the file (or the decompressor) at a time
#: A compressed file is judged for its ratio once this much has been unpacked (a small file that
#: compresses well, e.g. 10 KiB of zeros, is not a bomb).
RATIO_AFTER_BYTES = 16 * 1024 * 1024


class HostileInput(Exception):
    """A file exceeds a bound; the message is one sentence naming the file and the line or member."""


def _mib(n: int) -> str:
    return f"{n / 1024 / 1024:g} MiB" if n >= 1024 * 1024 else f"{n / 1024:g} KiB"


class _Unpacked:
    """A gzip stream read with a bound on the bytes it unpacks, in total and per byte read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.raw = path.open("rb")
        self.stream = gzip.GzipFile(fileobj=self.raw, mode="rb")
        self.unpacked = 0
        self.limit = int(settings.TJWATER_IMPORT_MAX_UNPACKED_BYTES)
        self.ratio = int(settings.TJWATER_IMPORT_MAX_RATIO)

    def read(self, n: int) -> bytes:
        try:
            data = self.stream.read(n)
        except (OSError, EOFError, zlib.error) as exc:
            raise HostileInput(
                f"{self.path.name}: not a readable gzip file after {_mib(self.unpacked)} ({exc.__class__.__name__})"
            ) from None
        self.unpacked += len(data)
        if self.unpacked > self.limit:
            raise HostileInput(
                f"{self.path.name}: unpacks to more than {_mib(self.limit)} (TJWATER_IMPORT_MAX_UNPACKED_BYTES): "
                "refused as a decompression bomb"
            )
        if self.unpacked > RATIO_AFTER_BYTES and self.unpacked > self.ratio * max(1, self.raw.tell()):
            raise HostileInput(
                f"{self.path.name}: unpacks more than {self.ratio} times its size "
                "(TJWATER_IMPORT_MAX_RATIO): refused as a decompression bomb"
            )
        return data

    def close(self) -> None:
        self.stream.close()
        self.raw.close()


def is_gzip(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(2) == b"\x1f\x8b"


def open_bounded(path: Path) -> _Unpacked | BinaryIO:
    """The file's bytes: a gzip file (by its magic number) unpacked within the bounds, any other as is."""
    return _Unpacked(path) if is_gzip(path) else path.open("rb")


def line_chunks(
    path: Path, *, skip_bom: bool = True, chunk_bytes: int = CHUNK_BYTES, check_fields: bool = True
) -> Iterator[tuple[int, bytes]]:
    """``(number of the first line, whole lines)`` of ``path`` (gzip unpacked), at most ``chunk_bytes``
    plus one line per chunk; ``HostileInput`` names the first line over ``TJWATER_IMPORT_MAX_LINE_BYTES``,
    the first comma-separated field over ``TJWATER_IMPORT_MAX_FIELD_BYTES`` or the first NUL byte. Memory
    is bounded by the chunk and the line bound, never by the file."""
    max_line = int(settings.TJWATER_IMPORT_MAX_LINE_BYTES)
    max_field = int(settings.TJWATER_IMPORT_MAX_FIELD_BYTES)
    stream = open_bounded(path)
    try:
        pending = bytearray()
        line_no = 1  # the number of the first line in ``pending``
        data = stream.read(_READ)
        if skip_bom and data.startswith(b"\xef\xbb\xbf"):
            data = data[3:]
        while data:
            pending += data
            tail = pending.rfind(b"\n") + 1  # where the unfinished last line starts
            if len(pending) - tail > max_line:
                _too_long(path, line_no + pending.count(b"\n", 0, tail), max_line)
            if len(pending) >= chunk_bytes and tail:
                whole = bytes(pending[:tail])
                del pending[:tail]
                _check(whole, line_no, path, max_line, max_field, check_fields)
                yield line_no, whole
                line_no += whole.count(b"\n")
            data = stream.read(_READ)
        if pending:
            whole = bytes(pending) if pending.endswith(b"\n") else bytes(pending) + b"\n"
            _check(whole, line_no, path, max_line, max_field, check_fields)
            yield line_no, whole
    finally:
        stream.close()


def _too_long(path: Path, line: int, max_line: int) -> NoReturn:
    raise HostileInput(
        f"{path.name}: line {line} is longer than {_mib(max_line)} (TJWATER_IMPORT_MAX_LINE_BYTES): refused"
    )


def _check(whole: bytes, first: int, path: Path, max_line: int, max_field: int, fields: bool) -> None:
    """Refuse the first line of ``whole`` (complete lines, ending in a newline) over the bounds, by number."""
    arr = np.frombuffer(whole, dtype=np.uint8)
    newlines = np.flatnonzero(arr == 0x0A)
    ends = np.r_[-1, newlines]
    long = np.flatnonzero(np.diff(ends) - 1 > max_line)
    if len(long):
        _too_long(path, first + int(long[0]), max_line)
    nul = np.flatnonzero(arr == 0)
    if len(nul):
        at = first + int(np.searchsorted(newlines, nul[0]))
        raise HostileInput(f"{path.name}: line {at} holds a NUL byte: not a text file")
    if fields and len(whole) > max_field:
        cuts = np.flatnonzero((arr == 0x0A) | (arr == 0x2C))
        gaps = np.diff(np.r_[-1, cuts]) - 1
        wide = np.flatnonzero(gaps > max_field)
        if len(wide):
            at = first + int(np.searchsorted(newlines, cuts[wide[0]]))
            raise HostileInput(
                f"{path.name}: line {at} has a field longer than {_mib(max_field)} "
                "(TJWATER_IMPORT_MAX_FIELD_BYTES): refused"
            )


def check_lines(path: Path, *, what: str = "file", fields: bool = False) -> None:
    """Stream ``path`` once in constant memory: ``HostileInput`` for a line over the line bound, a NUL
    byte or text that is not UTF-8 (with ``fields``, a comma-separated field over the field bound),
    naming the line (``what`` names the file's role in the message)."""
    for first, whole in line_chunks(path, check_fields=fields):
        try:
            whole.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = first + whole[: exc.start].count(b"\n")
            raise HostileInput(f"{path.name}: line {line} of the {what} is not UTF-8 text") from None


#: What GDAL would not keep of JSON text: a NUL (the raw byte, or the escape ``\u0000`` not itself escaped:
#: an even run of backslashes before it), and a lone UTF-16 surrogate escape (GDAL stores U+FFFD for it).
_JSON_NUL = re.compile(
    rb"\x00|(?<!\\)(?:\\\\)*\\u(?:0000"
    rb"|[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
    rb"|(?<!\\u[dD][89abAB][0-9a-fA-F]{2}\\u)[dD][c-fC-F][0-9a-fA-F]{2})"
)
_CARRY = 64  # bytes of one read kept for the next, so a match across two reads is found


def check_json_nul(path: Path) -> None:
    """Refuse JSON text holding a NUL (raw or as ``\\u0000``) or a lone surrogate escape, naming its line:
    GDAL reads strings as C strings and would cut a value, or a field name, at a NUL without a word (and
    store U+FFFD for a lone surrogate). One pass in constant memory."""
    line, carry = 1, b""
    with path.open("rb") as fh:
        while chunk := fh.read(_READ):
            buf = carry + chunk
            found = _JSON_NUL.search(buf)
            if found is not None:
                at = line + buf.count(b"\n", 0, found.start())
                text = found.group().lstrip(b"\\").decode("ascii")
                what = "a NUL character (\\u0000)" if text in ("\0", "u0000") else f"a lone UTF-16 surrogate (\\{text})"
                raise HostileInput(f"{path.name}: line {at} holds {what}: GDAL would not keep the text as written")
            carry = buf[-_CARRY:]
            line += buf.count(b"\n", 0, len(buf) - len(carry))


def check_zip(path: Path) -> None:
    """Refuse a zip whose members could escape, be links, or unpack past the bounds, naming the member.
    Nothing is extracted."""
    limit = int(settings.TJWATER_IMPORT_MAX_UNPACKED_BYTES)
    ratio = int(settings.TJWATER_IMPORT_MAX_RATIO)
    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError):
        raise HostileInput(f"{path.name}: not a readable zip file") from None
    with archive:
        total = 0
        for info in archive.infolist():
            name = info.filename
            parts = PurePosixPath(name.replace("\\", "/")).parts
            if name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":") or ".." in parts:
                raise HostileInput(f"{path.name}: member {name!r} points outside the archive: refused")
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise HostileInput(f"{path.name}: member {name!r} is a symbolic link: refused")
            total += info.file_size
            if total > limit:
                raise HostileInput(
                    f"{path.name}: member {name!r} takes the archive past {_mib(limit)} unpacked "
                    "(TJWATER_IMPORT_MAX_UNPACKED_BYTES): refused as a decompression bomb"
                )
            if info.file_size > RATIO_AFTER_BYTES and info.file_size > ratio * max(1, info.compress_size):
                raise HostileInput(
                    f"{path.name}: member {name!r} unpacks more than {ratio} times its size "
                    "(TJWATER_IMPORT_MAX_RATIO): refused as a decompression bomb"
                )
