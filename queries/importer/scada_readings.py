"""``import_scada``: SCADA history from a historian export (CSV, CSV.gz or Parquet) into the readings.

Layouts (recognised from the header unless ``fmt`` says): *long* ``device_id,time,value[,quality]``,
one sample per line; *wide* ``time,<device_id>,<device_id>,…``, the common historian export, one time per
line and an empty cell where a device sent nothing. A long file's ``quality`` column is optional;
samples flagged ``bad`` or ``invalid`` count as not received, any other flag is ignored.

Times: ISO 8601 with an offset (``Z``, ``+08:00``) are taken as given; naive times are read in
``timezone`` (default: the project's, ``queries.timezones``). A naive time that does not exist (clocks
moved forward) or is ambiguous (clocks moved back) in that zone is rejected by line — give it an offset.

Values are in the device's native unit and stored in the quantity's storage unit (``queries.scada_units``).

Slots (the documented placement rule): a sample at time *t* belongs to the device's reporting slot
``floor(t / sample_interval_s) · sample_interval_s`` (seconds since the Unix epoch, so 5-minute slots
start at :00, :05, …). Several samples in one slot: the **mean** for analog quantities (pressure, flow,
level, chlorine, temperature), the **last** (latest time, then latest line) for states (pump status and
speed, valve position). For each device, the file *replaces* its span — every slot from its first to its
last sample: slots with a sample get it, slots without stay gaps and are never filled — a missing
stretch of at most ``GAP_SLOTS`` slots between two samples as gap rows (``monitored_value`` NULL,
quality ``gap``), a longer one as no rows (reads report it as a gap, "no reading stored"), and rows
stored there before become gaps. So the rows written follow the file's samples, never the time between
its first and last. So an overlapping import replaces the overlap (last import wins), and
importing the same file again changes nothing (rows are only written when they differ).

Cleaning: the demo's rules (``queries.demo.cleaning``, vectorised as ``clean_array``) re-run over every
window an import touched, widened by ``CONTEXT_SLOTS`` slots on each side so runs and spikes at the
window's edges are judged with their neighbours; the stored rows just outside the span get their
cleaned value and flag recomputed (their measured value is never changed). ``monitored_value`` (what
the device sent) and ``cleaned_value`` (what cleaning kept) stay apart. Long spans are cleaned in blocks
of ``BLOCK_SLOTS`` slots with the same context on each side.

Bounded whatever the file (issue 41; ``queries.importer.bounded``): a line over
``TJWATER_IMPORT_MAX_LINE_BYTES``, a field over ``TJWATER_IMPORT_MAX_FIELD_BYTES``, a NUL byte or text
that is not UTF-8 refuses the file naming the line; a header of more than ``TJWATER_IMPORT_MAX_COLUMNS``
columns is refused; a ``.gz`` unpacks within ``TJWATER_IMPORT_MAX_UNPACKED_BYTES`` and a ratio of
``TJWATER_IMPORT_MAX_RATIO`` (a Parquet file's row groups the same, read from its footer), or is refused
as a bomb; a time outside ``TJWATER_IMPORT_MIN_YEAR``–``MAX_YEAR`` is rejected by line; and once the
rejects pass ``max_rejects`` the reading stops (the summary names the last line read).

Streaming, not loading: the file is read in batches (whole lines of at most ``CHUNK_BYTES`` through pandas'
CSV reader, pyarrow's Parquet batches), each converted and slotted by NumPy and COPYed (binary) into a
temporary staging table without indexes. One sort of the staged rows (a server-side cursor; the slot
aggregation only when some slot got several samples) hands them back a device block at a time; each block is
cleaned, compared with the stored rows (read by a binary COPY) and only the rows that differ are staged for
the merge — one DELETE of rows off the slot grid and one INSERT … ON CONFLICT. Re-importing the same file
writes nothing. Memory does not grow with the file. Everything runs in one transaction: an import killed mid-
way leaves the old readings, a finished one the new, never a mix. Rejected samples are reported by line
(Parquet: row) and reason; more than ``max_rejects`` of them and the file is refused whole, nothing written.
"""

from __future__ import annotations

import csv as csv_module
import io
import itertools
import re
import time as _time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import numpy as np
import pandas as pd
from django.conf import settings
from django.db import connection, transaction

from contexts.models import Project
from queries.demo.cleaning import QUALITY_NAMES, clean_array
from queries.importer.bounded import CHUNK_BYTES, RATIO_AFTER_BYTES, HostileInput, line_chunks
from queries.importer.copy import summarize_reading_brin
from queries.importer.scada_devices import ScadaImportError
from queries.models import ScadaDevice, ScadaReading
from queries.scada_units import QUANTITIES, STATE_WORDS, conversion
from queries.timezones import project_zone

BATCH_CELLS = 250_000  # values per batch read from the file (rows × value columns)
CONTEXT_SLOTS = 288  # slots of stored neighbours read on each side of a touched window (a day at 5 min)
BLOCK_SLOTS = 30 * 288  # slots cleaned at once
#: A missing stretch between two samples of the file of at most this many slots is stored as gap rows;
#: a longer one keeps no rows (every read reports it as a gap, "no reading stored"), so the rows written
#: stay proportional to the file's samples, never to the time between them.
GAP_SLOTS = 12
MAX_LISTED = 20  # rejected lines kept for the report (all are counted)
BAD_FLAGS = frozenset({"bad", "invalid"})
#: Spike thresholds (``clean_series``' ``min_threshold``) in the storage unit, per analog quantity; flow
#: uses the demo's rule (a quarter of the mean absolute flow of the block + 10 × the accuracy).
THRESHOLDS = {"pressure": 2.0, "level": 0.3, "chlorine": 0.2, "temperature": 2.0}
_OFFSET = re.compile(r"\d{2}:\d{2}(?::\d{2}(?:\.\d+)?)?\s*(?:[zZ]|[+-]\d{2}(?::?\d{2})?)$")
_LOCK_NS = 21_001  # advisory lock namespace: one SCADA import per project at a time

Progress = Callable[[int, int], None]


@dataclass
class ReadingImportSummary:
    """What an import did (the ``--json`` summary)."""

    file: str
    layout: str
    timezone: str
    dry_run: bool = False
    samples: int = 0
    #: Time entries (lines) that carried their own UTC offset (taken as given) and that did not (read in
    #: ``timezone``), so the summary can say which it was.
    offset_times: int = 0
    naive_times: int = 0
    rejects: int = 0
    reject_lines: list[str] = field(default_factory=list)
    #: Set when the rejects went past ``max_rejects``: the last line (Parquet: row) read, e.g. "line 9".
    stopped_at: str | None = None
    devices: int = 0
    #: Slots of the file's span that hold a row after the import (samples, short gaps, stored rows kept);
    #: ``inserted``/``updated`` also count stored neighbours just outside it, cleaned again.
    slots: int = 0
    inserted: int = 0
    updated: int = 0
    unchanged: int = 0
    windows: dict[str, list[str]] = field(default_factory=dict)
    phases: dict[str, float] = field(default_factory=dict)  # seconds per step (read+stage, slots, clean, merge)
    seconds: float = 0.0

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class RejectedFile(ScadaImportError):
    """The file had more rejected samples than allowed; nothing was written."""

    def __init__(self, summary: ReadingImportSummary, max_rejects: int) -> None:
        self.summary = summary
        listed = "\n".join(summary.reject_lines)
        more = summary.rejects - len(summary.reject_lines)
        stopped = (
            f" (stopped reading after {summary.stopped_at}: the rest was not read)"
            if summary.stopped_at is not None
            else ""
        )
        super().__init__(
            f"{summary.file} refused, nothing written: {summary.rejects} rejected sample(s), more than "
            f"--max-rejects {max_rejects}{stopped}:\n{listed}" + (f"\n… and {more} more" if more > 0 else "")
        )


@dataclass(frozen=True)
class _Device:
    pk: int
    device_id: str
    quantity: str
    step: int
    scale: float
    offset: float
    state: bool
    accuracy: float  # 0.0 when the device has none


# --- reading the file -------------------------------------------------------------------------------


def _is_parquet(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(4) == b"PAR1"


def _batches(path: Path) -> tuple[list[str], Iterator[tuple[int, pd.DataFrame]], str]:
    """The header, and the file as ``(first line number, DataFrame of strings/timestamps)`` batches;
    ``where`` is "line" (CSV, header = line 1) or "row" (Parquet, rows from 1)."""
    if _is_parquet(path):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            pf = pq.ParquetFile(path)
        except (pa.ArrowException, OSError) as exc:
            raise ScadaImportError(f"{path.name}: not a readable Parquet file ({exc.__class__.__name__})") from None
        header = list(pf.schema_arrow.names)
        _check_parquet(path, pf, header)
        per = max(1, BATCH_CELLS // max(1, len(header) - 1))

        def parquet() -> Iterator[tuple[int, pd.DataFrame]]:
            first = 1
            try:
                for batch in pf.iter_batches(batch_size=per):
                    try:
                        frame = batch.to_pandas()
                    except pa.ArrowInvalid:
                        # A time pandas cannot hold (before 1677, after 2262): this batch's times as ISO
                        # text, so such a time is rejected by row like any out of the years allowed.
                        frame = batch.to_pandas(timestamp_as_object=True)
                        for name in frame.columns:
                            if pa.types.is_timestamp(batch.schema.field(name).type):
                                frame[name] = frame[name].map(_iso_or_text)
                    yield first, frame
                    first += len(frame)
            except (pa.ArrowException, OSError) as exc:
                raise ScadaImportError(f"{path.name}: unreadable from row {first} ({exc.__class__.__name__})") from None

        return header, parquet(), "row"
    chunks = line_chunks(path)
    try:
        first_chunk = next(chunks, None)
    except HostileInput as exc:
        raise ScadaImportError(str(exc)) from None
    if first_chunk is None:
        raise ScadaImportError(f"{path.name} is empty: a SCADA file starts with a header line")
    _, data = first_chunk
    head_end = data.index(b"\n") + 1
    try:
        header_line = data[:head_end].decode("utf-8")
    except UnicodeDecodeError:
        raise ScadaImportError(f"{path.name}: line 1 is not UTF-8 text") from None
    header = [c.strip() for c in next(csv_module.reader([header_line.rstrip("\r\n")]), [])]
    max_columns = int(settings.TJWATER_IMPORT_MAX_COLUMNS)
    if len(header) > max_columns:
        raise ScadaImportError(
            f"{path.name}: line 1 has {len(header)} columns, more than {max_columns} "
            "(TJWATER_IMPORT_MAX_COLUMNS): split the file"
        )
    twice = sorted({c for c in header if header.count(c) > 1})
    if twice:
        raise ScadaImportError(f"{path.name}: line 1 names {', '.join(repr(c) for c in twice[:5])} more than once")
    text_columns = [c for c in header if c in ("device_id", "time", "quality")]

    def csv() -> Iterator[tuple[int, pd.DataFrame]]:
        pieces: Iterator[tuple[int, bytes]] = itertools.chain([(2, data[head_end:])], chunks)
        try:
            for first, whole in pieces:
                if not whole:
                    continue
                try:
                    frame = pd.read_csv(
                        io.BytesIO(whole),
                        header=None,
                        names=header,
                        dtype=dict.fromkeys(text_columns, str),
                        keep_default_na=False,
                        na_values=[""],
                        encoding="utf-8",
                        skip_blank_lines=False,
                    )
                except (pd.errors.ParserError, UnicodeDecodeError, ValueError) as exc:
                    raise ScadaImportError(_unreadable(path.name, first, whole, exc)) from None
                yield first, frame
        except HostileInput as exc:
            raise ScadaImportError(str(exc)) from None

    return header, csv(), "line"


_FIELDS = re.compile(r"Expected (\d+) fields in line (\d+), saw (\d+)")


def _iso_or_text(value: object) -> object:
    """A Parquet time as ISO text (its offset kept when it has one), so every time goes the text path."""
    return value.isoformat() if isinstance(value, datetime) else value


def _check_parquet(path: Path, pf: Any, header: list[str]) -> None:
    """Refuse a Parquet file past the bounds before any row is read: columns, and its unpacked size
    (the row groups' uncompressed bytes) against the size and ratio bounds."""
    max_columns = int(settings.TJWATER_IMPORT_MAX_COLUMNS)
    if len(header) > max_columns:
        raise ScadaImportError(
            f"{path.name}: {len(header)} columns, more than {max_columns} (TJWATER_IMPORT_MAX_COLUMNS): split the file"
        )
    meta = pf.metadata
    unpacked = sum(meta.row_group(i).total_byte_size for i in range(meta.num_row_groups))
    limit, ratio = int(settings.TJWATER_IMPORT_MAX_UNPACKED_BYTES), int(settings.TJWATER_IMPORT_MAX_RATIO)
    if unpacked > limit or (unpacked > RATIO_AFTER_BYTES and unpacked > ratio * max(1, path.stat().st_size)):
        raise ScadaImportError(
            f"{path.name}: its row groups unpack to {unpacked} bytes, past TJWATER_IMPORT_MAX_UNPACKED_BYTES or "
            f"{ratio} times the file (TJWATER_IMPORT_MAX_RATIO): refused as a decompression bomb"
        )
    for i in range(meta.num_row_groups):
        group = meta.row_group(i)
        if group.total_byte_size > CHUNK_BYTES * 16:
            raise ScadaImportError(
                f"{path.name}: row group {i} unpacks to {group.total_byte_size} bytes, more than "
                f"{CHUNK_BYTES * 16}: write it with smaller row groups"
            )


def _unreadable(name: str, first: int, whole: bytes, exc: Exception) -> str:
    """The sentence for a chunk pandas could not read, naming the line (pandas counts from the chunk)."""
    if isinstance(exc, UnicodeDecodeError):
        try:  # pandas' offset is into its own buffer: find the line in ours
            whole.decode("utf-8")
        except UnicodeDecodeError as own:
            newline = b"\n"
            return f"{name}: line {first + whole[: own.start].count(newline)} is not UTF-8 text"
    found = _FIELDS.search(str(exc))
    if found:
        want, line, saw = (int(g) for g in found.groups())
        return f"{name}: line {first + line - 1} has {saw} fields, the header {want}"
    return f"{name}: unreadable from line {first} ({exc.__class__.__name__})"


def _utc_seconds(col: pd.Series, zone: ZoneInfo) -> tuple[np.ndarray, np.ndarray, int]:
    """Epoch seconds (float, NaN when rejected), a reason code per entry (0 ok, 1 empty/unreadable,
    2 nonexistent local time, 3 ambiguous local time) and how many entries carried a UTC offset (the
    others are naive)."""
    n = len(col)
    out = np.full(n, np.nan)
    why = np.zeros(n, dtype=np.int8)
    if pd.api.types.is_datetime64_any_dtype(col.dtype):
        stamps = col.reset_index(drop=True)
        aware = stamps.dt.tz is not None
        if not aware:
            localized = stamps.dt.tz_localize(zone.key, ambiguous="NaT", nonexistent="NaT")
            _local_reasons(stamps, localized, zone, why)
            stamps = localized
        ok = stamps.notna().to_numpy()
        out[ok] = _epoch(stamps[ok])
        why[~ok & (why == 0)] = 1
        _outside_years(None, out, why)
        return out, why, n if aware else 0
    text = col.astype(str).str.strip()
    text.index = range(n)
    has_offset = text.str.contains(_OFFSET).to_numpy()
    if has_offset.any():
        aware = pd.to_datetime(text[has_offset], format="ISO8601", utc=True, errors="coerce")
        ok = aware.notna().to_numpy()
        idx = np.flatnonzero(has_offset)
        out[idx[ok]] = _epoch(aware[ok])
        why[idx[~ok]] = 1
    naive_idx = np.flatnonzero(~has_offset)
    if len(naive_idx):
        parsed = pd.to_datetime(text.iloc[naive_idx], format="ISO8601", errors="coerce")
        if getattr(parsed.dt, "tz", None) is not None:  # cannot happen without an offset; be safe
            parsed = parsed.dt.tz_localize(None)
        unreadable = parsed.isna().to_numpy()
        why[naive_idx[unreadable]] = 1
        localized = parsed.dt.tz_localize(zone.key, ambiguous="NaT", nonexistent="NaT")
        sub = np.zeros(len(naive_idx), dtype=np.int8)
        _local_reasons(parsed, localized, zone, sub)
        ok = localized.notna().to_numpy()
        out[naive_idx[ok]] = _epoch(localized[ok])
        why[naive_idx[sub > 0]] = sub[sub > 0]
    _outside_years(text, out, why)
    return out, why, int(has_offset.sum())


_YEAR = re.compile(r"^\s*([+-]?\d{4,})-")


def _year_bounds() -> tuple[int, int, float, float]:
    lo, hi = int(settings.TJWATER_IMPORT_MIN_YEAR), int(settings.TJWATER_IMPORT_MAX_YEAR)
    start = datetime(lo, 1, 1, tzinfo=ZoneInfo("UTC")).timestamp()
    end = datetime(hi + 1, 1, 1, tzinfo=ZoneInfo("UTC")).timestamp() if hi < 9999 else float("inf")
    return lo, hi, start, end


def _outside_years(text: pd.Series | None, out: np.ndarray, why: np.ndarray) -> None:
    """Times outside TJWATER_IMPORT_MIN_YEAR..MAX_YEAR → reason 4 (also those too far out for pandas to
    parse, which it reports as unreadable: their year is read from the text)."""
    _, _, start, end = _year_bounds()
    far = ~np.isnan(out) & ((out < start) | (out >= end))
    out[far] = np.nan
    why[far] = 4
    if text is None:
        return
    unread = np.flatnonzero(why == 1)
    if len(unread):
        years = text.iloc[unread].str.extract(_YEAR, expand=False)
        lo, hi, _, _ = _year_bounds()
        number = pd.to_numeric(years, errors="coerce").to_numpy(dtype=float, na_value=np.nan)
        why[unread[(number < lo) | (number > hi)]] = 4


def _epoch(stamps: pd.Series) -> np.ndarray:
    utc = stamps.dt.tz_convert("UTC").dt.tz_localize(None)
    seconds: np.ndarray = utc.to_numpy(dtype="datetime64[us]").astype(np.int64) / 1e6
    return seconds


def _local_reasons(parsed: pd.Series, localized: pd.Series, zone: ZoneInfo, why: np.ndarray) -> None:
    """Mark the parsed naive times that localizing dropped: 2 nonexistent, 3 ambiguous."""
    dropped = (parsed.notna() & localized.isna()).to_numpy()
    if not dropped.any():
        return
    shifted = parsed[dropped].dt.tz_localize(zone.key, ambiguous="NaT", nonexistent="shift_forward")
    why[np.flatnonzero(dropped)] = np.where(shifted.notna().to_numpy(), 2, 3)


_TIME_REASON = {
    1: "time: {} is not an ISO 8601 time",
    2: "time: {} does not exist in {} (clocks moved forward); give it an offset",
    3: "time: {} is ambiguous in {} (clocks moved back); give it an offset",
    4: "time: {} is outside the years {years} (TJWATER_IMPORT_MIN_YEAR, TJWATER_IMPORT_MAX_YEAR)",
}


class _Rejects:
    def __init__(self, summary: ReadingImportSummary, where: str) -> None:
        self.summary, self.where = summary, where

    def add(self, lines: np.ndarray, messages: list[str] | Callable[[int], str]) -> None:
        count = len(lines)
        if not count:
            return
        room = MAX_LISTED - len(self.summary.reject_lines)
        for i in range(min(room, count)):
            text = messages[i] if isinstance(messages, list) else messages(i)
            self.summary.reject_lines.append(f"{self.where} {int(lines[i])}: {text}")
        self.summary.rejects += count


def _values(raw: pd.Series, state: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``(values, empty, bad)``: numbers (NaN for empty/bad), the empty cells, the unreadable ones."""
    if pd.api.types.is_numeric_dtype(raw.dtype):
        v = np.array(raw.to_numpy(dtype=float, na_value=np.nan), dtype=float)  # a writable copy
        empty = np.isnan(v)
        return v, empty, np.isinf(v)
    text = raw.astype(str).str.strip()
    empty = (text == "").to_numpy() | raw.isna().to_numpy()
    v = np.array(pd.to_numeric(text, errors="coerce").to_numpy(dtype=float, na_value=np.nan), dtype=float)
    if state:
        words = text.str.lower().map(STATE_WORDS).to_numpy(dtype=float, na_value=np.nan)
        v = np.where(np.isnan(v), words, v)
    bad = (np.isnan(v) | np.isinf(v)) & ~empty
    v[bad] = np.nan
    return v, empty, bad


# --- the import -------------------------------------------------------------------------------------


def _devices(project: Project) -> dict[str, _Device]:
    out: dict[str, _Device] = {}
    for d in ScadaDevice.objects.filter(project_id=project.pk).only(
        "pk", "device_id", "quantity", "native_unit", "unit", "sample_interval_s", "accuracy"
    ):
        conv = conversion(d.quantity, d.native_unit or d.unit)
        spec = QUANTITIES[d.quantity]
        out[d.device_id] = _Device(
            d.pk, d.device_id, d.quantity, d.sample_interval_s, conv.scale, conv.offset, spec.kind == "state",
            d.accuracy or 0.0,
        )  # fmt: skip
    return out


def _layout(header: list[str], fmt: str | None, name: str) -> str:
    if fmt is not None:
        if fmt not in ("long", "wide"):
            raise ScadaImportError("--format must be long or wide")
        need = ["device_id", "time", "value"] if fmt == "long" else ["time"]
        if fmt == "long" and not set(need) <= set(header):
            raise ScadaImportError(f"{name}: line 1: a long file needs the columns device_id,time,value")
        if fmt == "wide" and (not header or header[0] != "time" or len(header) < 2):
            raise ScadaImportError(f"{name}: line 1: a wide file starts with time, then one column per device")
        return fmt
    if header[:3] == ["device_id", "time", "value"] and set(header) <= {"device_id", "time", "value", "quality"}:
        return "long"
    if header and header[0] == "time" and len(header) >= 2:
        return "wide"
    raise ScadaImportError(
        f"{name}: line 1: not a SCADA layout (long: device_id,time,value[,quality]; wide: time,<device_id>,…)"
    )


def _stage_batch(
    frame: pd.DataFrame,
    first: int,
    layout: str,
    devices: dict[str, _Device],
    zone: ZoneInfo,
    rejects: _Rejects,
) -> pd.DataFrame:
    """One batch as staging rows ``(device pk, epoch seconds, stored value, line)``; rejects recorded."""
    n = len(frame)
    lines = np.arange(first, first + n, dtype=np.int64)
    seconds, why, with_offset = _utc_seconds(frame["time"], zone)
    rejects.summary.offset_times += with_offset
    rejects.summary.naive_times += n - with_offset
    if layout == "wide":
        blank = np.ones(n, dtype=bool)
        parts = []
        per_col = []
        for column in frame.columns[1:]:
            d = devices[column]
            v, empty, bad = _values(frame[column], d.state)
            blank &= empty
            per_col.append((column, d, v, empty, bad))
        time_bad = (why > 0) & ~blank
        _reject_times(rejects, frame["time"], lines, why, time_bad, zone)
        for column, d, v, empty, bad in per_col:
            bad_here = bad & (why == 0)

            def why_bad(i: int, c: str = column, b: np.ndarray = bad_here) -> str:
                return _bad_value(c, frame[c].to_numpy()[b][i])

            rejects.add(lines[bad_here], why_bad)
            keep = ~empty & ~bad & (why == 0)
            t = seconds[keep]
            slot = (np.floor(t / d.step) * d.step).astype(np.int64)
            parts.append(
                pd.DataFrame({"d": d.pk, "s": slot, "t": t, "v": v[keep] * d.scale + d.offset, "l": lines[keep]})
            )
        if not parts:
            return pd.DataFrame({"d": np.empty(0, np.int64), "s": np.empty(0, np.int64), "t": [], "v": [], "l": []})
        return pd.concat(parts, ignore_index=True)
    ids = frame["device_id"].astype(str).str.strip()
    blank = (ids == "").to_numpy() & (frame["time"].astype(str).str.strip() == "").to_numpy()
    pk = ids.map({k: d.pk for k, d in devices.items()}).to_numpy(dtype=float, na_value=np.nan)
    step = ids.map({k: d.step for k, d in devices.items()}).to_numpy(dtype=float, na_value=np.nan)
    scale = ids.map({k: d.scale for k, d in devices.items()}).to_numpy(dtype=float, na_value=np.nan)
    offset = ids.map({k: d.offset for k, d in devices.items()}).to_numpy(dtype=float, na_value=np.nan)
    state_ids = {k for k, d in devices.items() if d.state}
    is_state = ids.isin(state_ids).to_numpy()
    v, empty, bad = _values(frame["value"], False)
    if is_state.any():
        vs, _, bs = _values(frame["value"][is_state], True)
        v[is_state], bad[is_state] = vs, bs
    if "quality" in frame.columns:
        flagged = frame["quality"].astype(str).str.strip().str.lower().isin(BAD_FLAGS).to_numpy()
        empty |= flagged
        bad &= ~flagged
    unknown = np.isnan(pk) & ~blank
    ids_arr = ids.to_numpy()
    rejects.add(lines[unknown], lambda i: f"device_id: no device {ids_arr[unknown][i]!r} in this project")
    time_bad = (why > 0) & ~unknown & ~blank
    _reject_times(rejects, frame["time"], lines, why, time_bad, zone)
    value_bad = bad & ~unknown & ~time_bad & ~blank
    raw = frame["value"].to_numpy()
    rejects.add(lines[value_bad], lambda i: _bad_value("value", raw[value_bad][i]))
    keep = ~unknown & (why == 0) & ~empty & ~bad & ~blank
    return pd.DataFrame(
        {
            "d": pk[keep].astype(np.int64),
            "s": (np.floor(seconds[keep] / step[keep]) * step[keep]).astype(np.int64),
            "t": seconds[keep],
            "v": v[keep] * scale[keep] + offset[keep],
            "l": lines[keep],
        }
    )


def _bad_value(column: str, raw: object) -> str:
    return f"{'value' if column == 'value' else 'field ' + column}: {str(raw)[:40]!r} is not a number"


def _reject_times(
    rejects: _Rejects, col: pd.Series, lines: np.ndarray, why: np.ndarray, mask: np.ndarray, zone: ZoneInfo
) -> None:
    raw = col.to_numpy()[mask]
    codes = why[mask]
    lo, hi, _, _ = _year_bounds()
    years = f"{lo}–{hi}"
    rejects.add(lines[mask], lambda i: _TIME_REASON[int(codes[i])].format(str(raw[i])[:40], zone.key, years=years))


def _exec(sql: str, params: list[Any] | tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall() if cursor.description else []


_COPY_HEADER = b"PGCOPY\n\xff\r\n\x00" + bytes(8)  # signature, flags 0, no header extension
_COPY_TRAILER = b"\xff\xff"


def _copy_binary(table: str, columns: list[tuple[str, str, np.ndarray]]) -> None:
    """COPY fixed-width columns ``(name, big-endian NumPy type, values)`` into ``table`` in PostgreSQL's
    binary format, built by NumPy in one pass (no per-row Python: millions of rows per second)."""
    n = len(columns[0][2])
    if not n:
        return
    layout: list[tuple[str, str]] = [("count", ">i2")]
    for name, code, _ in columns:
        layout += [(f"{name}_size", ">i4"), (name, code)]
    rows = np.empty(n, dtype=layout)
    rows["count"] = len(columns)
    for name, code, values in columns:
        rows[f"{name}_size"] = np.dtype(code).itemsize
        rows[name] = values
    names = ", ".join(name for name, _, _ in columns)
    with connection.cursor() as cursor, cursor.cursor.copy(f"COPY {table} ({names}) FROM STDIN (FORMAT binary)") as cp:
        cp.write(_COPY_HEADER)
        cp.write(rows.tobytes())
        cp.write(_COPY_TRAILER)


class _Staged:
    """Rows of one temp table gathered across blocks and sent by one binary COPY per ``FLUSH_ROWS`` (a
    block of a sparse file holds a handful of rows: a COPY per block was a round trip per block)."""

    FLUSH_ROWS = 200_000

    def __init__(self, table: str, layout: list[tuple[str, str]]) -> None:
        self.table, self.layout = table, layout
        self.parts: list[list[np.ndarray]] = []
        self.rows = 0

    def add(self, *values: np.ndarray) -> None:
        if len(values[0]):
            self.parts.append(list(values))
            self.rows += len(values[0])
            if self.rows >= self.FLUSH_ROWS:
                self.flush()

    def flush(self) -> None:
        if self.parts:
            columns = [np.concatenate([part[i] for part in self.parts]) for i in range(len(self.layout))]
            _copy_binary(
                self.table, [(name, code, col) for (name, code), col in zip(self.layout, columns, strict=True)]
            )
        self.parts, self.rows = [], 0


class _Spans:
    """Per device: the first and last slot staged, and whether every device's slots came strictly
    increasing through the file (then each slot holds one sample and the slot aggregation is skipped —
    a historian export in time order, the common case)."""

    def __init__(self) -> None:
        self.lo: dict[int, int] = {}
        self.hi: dict[int, int] = {}
        self.last: dict[int, int] = {}
        self.ordered = True

    def add(self, device: np.ndarray, slot: np.ndarray) -> None:
        if not len(device):
            return
        order = np.argsort(device, kind="stable")  # stable: file order kept within a device
        ds, ss = device[order], slot[order]
        starts = np.flatnonzero(np.r_[True, ds[1:] != ds[:-1]])
        ends = np.r_[starts[1:], len(ds)] - 1
        if self.ordered and bool(np.any((ds[1:] == ds[:-1]) & (ss[1:] <= ss[:-1]))):
            self.ordered = False
        lows, highs = np.minimum.reduceat(ss, starts), np.maximum.reduceat(ss, starts)
        for k, pk in enumerate(ds[starts].tolist()):
            first, last = int(ss[starts[k]]), int(ss[ends[k]])
            prev = self.last.get(pk)
            if prev is not None and first <= prev:
                self.ordered = False
            self.last[pk] = last
            self.lo[pk] = min(self.lo.get(pk, first), int(lows[k]))
            self.hi[pk] = max(self.hi.get(pk, last), int(highs[k]))


def import_scada(
    *,
    project: Project,
    path: Path,
    timezone: str | None = None,
    fmt: str | None = None,
    dry_run: bool = False,
    max_rejects: int = 0,
    progress: Progress | None = None,
) -> ReadingImportSummary:
    """Import the readings in ``path`` into ``project`` (see the module docstring); ``RejectedFile``
    when more than ``max_rejects`` samples were rejected (nothing written); ``dry_run`` does it all and
    rolls back, reporting what would have been written."""
    t0 = _time.monotonic()
    if not path.is_file():
        raise ScadaImportError(f"readings file not found: {path}")
    try:
        zone = ZoneInfo(timezone) if timezone else project_zone(project)
    except (ZoneInfoNotFoundError, ValueError) as exc:
        raise ScadaImportError(f"--timezone {timezone!r} is not an IANA time zone (e.g. America/New_York)") from exc
    header, batches, where = _batches(path)
    layout = _layout(header, fmt, path.name)
    devices = _devices(project)
    if layout == "wide":
        unknown = [c for c in header[1:] if c not in devices]
        if unknown:
            raise ScadaImportError(
                f"{path.name}: line 1: no device {', '.join(repr(u) for u in unknown[:5])} in this project "
                "(import_scada_devices first)"
            )
    summary = ReadingImportSummary(file=path.name, layout=layout, timezone=zone.key, dry_run=dry_run)
    rejects = _Rejects(summary, where)
    spans = _Spans()
    with transaction.atomic():
        _exec("SELECT pg_advisory_xact_lock(%s, %s)", [_LOCK_NS, project.pk])
        # The project's devices cannot be deleted until this import commits (the readings' device key
        # is not a foreign key: see queries/models/scada.py).
        _exec(
            f"SELECT 1 FROM {ScadaDevice._meta.db_table} WHERE project_id = %s FOR KEY SHARE",  # noqa: S608
            [project.pk],
        )
        # ON COMMIT DROP does not fire when the import runs inside a caller's transaction (a savepoint):
        # drop leftovers of an earlier import in the same transaction first.
        _exec("CLOSE ALL")
        _exec(
            "DROP TABLE IF EXISTS pg_temp.tjw_stage, pg_temp.tjw_dev, pg_temp.tjw_final, pg_temp.tjw_gone, "
            "pg_temp.tjw_blk"
        )
        # No index, no constraint: the staged rows are written once and read once, by one sort.
        _exec(
            "CREATE TEMP TABLE tjw_stage (device_id integer, slot bigint, t double precision, "
            "value double precision, line bigint) ON COMMIT DROP"
        )
        # The sort of the staged rows stays (mostly) in memory rather than spill (this transaction only).
        _exec("SET LOCAL work_mem = '256MB'")
        for first, frame in batches:
            staged = _stage_batch(frame, first, layout, devices, zone, rejects)
            summary.samples += len(staged)
            if summary.rejects <= max_rejects:
                device, slot = staged["d"].to_numpy(), staged["s"].to_numpy()
                spans.add(device, slot)
                _copy_binary(
                    "tjw_stage",
                    [
                        ("device_id", ">i4", device),
                        ("slot", ">i8", slot),
                        ("t", ">f8", staged["t"].to_numpy()),
                        ("value", ">f8", staged["v"].to_numpy()),
                        ("line", ">i8", staged["l"].to_numpy()),
                    ],
                )
            if progress is not None:
                progress(summary.samples, summary.rejects)
            if summary.rejects > max_rejects:
                summary.stopped_at = f"{where} {first + len(frame) - 1}"
                break
        if summary.rejects > max_rejects:
            summary.seconds = _time.monotonic() - t0
            raise RejectedFile(summary, max_rejects)
        summary.phases["read_and_stage_s"] = round(_time.monotonic() - t0, 1)
        _merge(devices, spans, summary)
        if dry_run:
            transaction.set_rollback(True)
    if not dry_run:
        summarize_reading_brin()
    summary.seconds = round(_time.monotonic() - t0, 3)
    return summary


def _merge(devices: dict[str, _Device], spans: _Spans, summary: ReadingImportSummary) -> None:
    """Staged samples → slots (one sort, streamed a device block at a time) → cleaned rows, compared
    with the stored ones → only the rows that differ written, in one set-based statement."""
    t0 = _time.monotonic()
    by_pk = {d.pk: d for d in devices.values()}
    _exec(
        "CREATE TEMP TABLE tjw_dev (device_id integer PRIMARY KEY, step integer, state boolean, lo bigint, "
        "hi bigint) "
        "ON COMMIT DROP"
    )
    with connection.cursor() as cursor, cursor.cursor.copy("COPY tjw_dev FROM STDIN") as copy:
        for pk, lo in spans.lo.items():
            copy.write_row((pk, by_pk[pk].step, by_pk[pk].state, lo, spans.hi[pk]))
    if spans.ordered:  # one sample per slot: the staged rows are the slots
        source = "SELECT device_id, slot, value FROM tjw_stage"
    else:  # the placement rule: mean for analog quantities, last sample (time, then line) for states
        source = """
            SELECT s.device_id, s.slot, avg(s.value) AS value
            FROM tjw_stage s JOIN tjw_dev d USING (device_id) WHERE NOT d.state GROUP BY 1, 2
            UNION ALL
            (SELECT DISTINCT ON (s.device_id, s.slot) s.device_id, s.slot, s.value
             FROM tjw_stage s JOIN tjw_dev d USING (device_id) WHERE d.state
             ORDER BY s.device_id, s.slot, s.t DESC, s.line DESC)
        """
    # One row per (device, block of BLOCK_SLOTS slots) in device then block order, fetched as it is
    # needed: the slots come out of one sort, with no index on the staged rows and no second copy of them.
    _exec(
        "DECLARE tjw_blocks NO SCROLL CURSOR FOR "
        f"SELECT s.device_id, (s.slot - d.lo) / ({BLOCK_SLOTS}::bigint * d.step) AS block, "
        f"array_agg(s.slot), array_agg(s.value) FROM ({source}) s JOIN tjw_dev d USING (device_id) "
        "GROUP BY 1, 2 ORDER BY 1, 2"
    )
    _exec(
        # NaN stands for NULL and ``code`` indexes QUALITY_NAMES: fixed-width rows for the binary COPY.
        "CREATE TEMP TABLE tjw_final (device_id integer, time timestamptz, monitored double precision, "
        "cleaned double precision, code smallint) ON COMMIT DROP"
    )
    _exec("CREATE TEMP TABLE tjw_gone (device_id integer, time timestamptz) ON COMMIT DROP")
    summary.phases["slots_s"] = round(_time.monotonic() - t0, 1)
    _exec("CREATE TEMP TABLE tjw_blk (device_id integer, lo bigint, hi bigint) ON COMMIT DROP")
    for pk in sorted(spans.lo):
        d, lo, hi = by_pk[pk], spans.lo[pk], spans.hi[pk]
        summary.devices += 1
        summary.windows[d.device_id] = [_iso(lo), _iso(hi + d.step)]
    # Only the blocks that hold a sample are cleaned and written (the work follows the rows, not the
    # span); the neighbours' first and last sample decide whether a missing stretch at a block's edge is
    # short (gap rows) or long (no rows).
    written: list[tuple[int, int, int]] = []
    prev_pk, prev_last = -1, None
    with_stored = _blocks_with_stored_rows(by_pk)
    final = _Staged("tjw_final", [("device_id", ">i4"), ("time", ">i8"), ("monitored", ">f8"), ("cleaned", ">f8"),
                                  ("code", ">i2")])  # fmt: skip
    gone = _Staged("tjw_gone", [("device_id", ">i4"), ("time", ">i8")])
    blocks = _fetch_blocks()
    row = next(blocks, None)
    while row is not None:
        pk, k, slot_raw, value_raw = row
        row = next(blocks, None)
        d, lo, hi = by_pk[pk], spans.lo[pk], spans.hi[pk]
        width = BLOCK_SLOTS * d.step
        b_lo = lo + int(k) * width
        b_hi = min(hi, b_lo + width - d.step)
        slots, values = np.array(slot_raw, dtype=np.int64), np.array(value_raw, dtype=float)
        if pk != prev_pk:
            prev_pk, prev_last = pk, None
        next_first = int(min(row[2])) if row is not None and row[0] == pk else None
        _clean_block(d, lo, hi, b_lo, b_hi, slots, values, summary, prev_last, next_first,
                     final, gone, (pk, int(k)) in with_stored)  # fmt: skip
        written.append((pk, b_lo, b_hi))
        prev_last = int(slots.max())
    final.flush()
    gone.flush()
    with connection.cursor() as cursor, cursor.cursor.copy("COPY tjw_blk FROM STDIN") as copy:
        for item in written:
            copy.write_row(item)
    _exec("CLOSE tjw_blocks")
    _blank_unsampled_blocks(summary)
    summary.phases["clean_s"] = round(_time.monotonic() - t0 - summary.phases["slots_s"], 1)
    t1 = _time.monotonic()
    reading = ScadaReading._meta.db_table
    # Rows in a span that are off the slot grid (an earlier interval) are replaced by the grid's rows.
    _exec(
        f"DELETE FROM {reading} r USING tjw_gone g WHERE r.device_id = g.device_id AND r.time = g.time"  # noqa: S608
    )
    _exec(
        f"""
        INSERT INTO {reading} (device_id, time, monitored_value, cleaned_value, quality)
        SELECT device_id, time, NULLIF(monitored, 'NaN'), NULLIF(cleaned, 'NaN'), (%s::varchar[])[code + 1]
        FROM tjw_final
        ON CONFLICT (device_id, time) DO UPDATE
           SET monitored_value = EXCLUDED.monitored_value, cleaned_value = EXCLUDED.cleaned_value,
               quality = EXCLUDED.quality
         WHERE ({reading}.monitored_value, {reading}.cleaned_value, {reading}.quality)
               IS DISTINCT FROM (EXCLUDED.monitored_value, EXCLUDED.cleaned_value, EXCLUDED.quality)
        """,  # noqa: S608 - our table name
        [list(QUALITY_NAMES)],
    )
    summary.phases["merge_s"] = round(_time.monotonic() - t1, 1)


def _blocks_with_stored_rows(by_pk: dict[int, _Device]) -> set[tuple[int, int]]:
    """``(device, block)`` whose slots and context may hold stored rows: one statement over the staged
    devices' spans (the block of each stored row, and its neighbours, whose context reaches into it), so a
    block with none is cleaned without reading the table — a sparse file's blocks mostly have none."""
    rows = _exec(
        f"SELECT DISTINCT r.device_id, floor((extract(epoch FROM r.time) - d.lo) / ({BLOCK_SLOTS}::bigint * d.step)) "
        f"FROM {ScadaReading._meta.db_table} r JOIN tjw_dev d USING (device_id) "  # noqa: S608 - our table
        f"WHERE r.time BETWEEN to_timestamp(d.lo - {CONTEXT_SLOTS} * d.step) "
        f"AND to_timestamp(d.hi + {CONTEXT_SLOTS + 1} * d.step)"
    )
    found: set[tuple[int, int]] = set()
    for pk, k in rows:
        if pk in by_pk:
            found.update({(int(pk), int(k) - 1), (int(pk), int(k)), (int(pk), int(k) + 1)})
    return found


def _blank_unsampled_blocks(summary: ReadingImportSummary) -> None:
    """The span's stretches of whole blocks without a sample: stored rows there become gaps (rows off
    the slot grid are deleted), as the file replaces its span; no row is added (two statements, their
    cost the stored rows of those stretches, never the span's length)."""
    reading = ScadaReading._meta.db_table
    # ``tjw_dev``/``tjw_blk`` are this module's temporary tables; the steps are whole seconds.
    unsampled = (
        "r.device_id = d.device_id AND r.time BETWEEN to_timestamp(d.lo) AND to_timestamp(d.hi) "
        "AND NOT EXISTS (SELECT 1 FROM tjw_blk b WHERE b.device_id = r.device_id "
        "AND r.time >= to_timestamp(b.lo) AND r.time < to_timestamp(b.hi + d.step))"
    )
    on_grid = "mod(extract(epoch FROM r.time), d.step) = 0"
    _exec(f"DELETE FROM {reading} r USING tjw_dev d WHERE {unsampled} AND NOT {on_grid}")  # noqa: S608
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {reading} r SET monitored_value = NULL, cleaned_value = NULL, quality = 'gap' "  # noqa: S608
            f"FROM tjw_dev d WHERE {unsampled} AND {on_grid} "
            "AND (r.monitored_value IS NOT NULL OR r.cleaned_value IS NOT NULL OR r.quality <> 'gap')"
        )
        summary.updated += max(0, cursor.rowcount)


def _fetch_blocks() -> Iterator[tuple[int, int, list[int], list[float]]]:
    while True:
        rows = _exec("FETCH 16 FROM tjw_blocks")
        if not rows:
            return
        yield from rows


def _iso(epoch: int) -> str:
    return datetime.fromtimestamp(epoch, tz=ZoneInfo("UTC")).isoformat().replace("+00:00", "Z")


_PG_EPOCH_US = 946_684_800_000_000  # 2000-01-01T00:00Z in Unix microseconds: PostgreSQL's binary timestamps
_US = 1_000_000
_STORED = np.dtype(
    [("n", ">i2"), ("tl", ">i4"), ("t", ">i8"), ("ml", ">i4"), ("m", ">f8"), ("cl", ">i4"), ("c", ">f8"),
     ("ql", ">i4"), ("q", ">i2")]
)  # fmt: skip
_QUALITY_CODE = "CASE quality " + " ".join(f"WHEN '{q}' THEN {i}" for i, q in enumerate(QUALITY_NAMES)) + " END"


def _stored(reading: str, pk: int, lo: int, hi: int) -> np.ndarray:
    """The stored rows of device ``pk`` in ``[lo, hi]`` (epoch seconds) as a NumPy record array: time
    (Unix µs), monitored and cleaned (NaN for NULL), quality code — a binary COPY read in one pass."""
    sql = (
        f"COPY (SELECT time, coalesce(monitored_value, 'NaN'), coalesce(cleaned_value, 'NaN'), "  # noqa: S608
        f"({_QUALITY_CODE})::smallint FROM {reading} WHERE device_id = {int(pk)} "
        f"AND time BETWEEN to_timestamp({int(lo)}) AND to_timestamp({int(hi)})) TO STDOUT (FORMAT binary)"
    )
    with connection.cursor() as cursor, cursor.cursor.copy(sql) as copy:
        data = b"".join(bytes(chunk) for chunk in copy)
    rows = np.frombuffer(data, dtype=_STORED, offset=len(_COPY_HEADER), count=(len(data) - 21) // _STORED.itemsize)
    rows = rows.copy()
    rows["t"] += _PG_EPOCH_US
    return rows


def _same(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    same: np.ndarray = (a == b) | (np.isnan(a) & np.isnan(b))
    return same


def _clean_block(
    d: _Device,
    lo: int,
    hi: int,
    b_lo: int,
    b_hi: int,
    slot_list: np.ndarray,
    value_list: np.ndarray,
    summary: ReadingImportSummary,
    prev_last: int | None = None,
    next_first: int | None = None,
    final: _Staged | None = None,
    gone_rows: _Staged | None = None,
    has_stored: bool = True,
) -> None:
    """Clean slots ``[b_lo, b_hi]`` of device ``d`` (span ``[lo, hi]``; the file's slots and values in
    ``slot_list``/``value_list``; the device's last sample before the block and first after it in
    ``prev_last``/``next_first``) with ``CONTEXT_SLOTS`` of context on each side, compare with the stored
    rows and stage only what differs: the block's slots with a sample, with a stored row, or in a
    missing stretch of at most ``GAP_SLOTS`` slots (gap rows), plus stored rows just outside the span
    (cleaned again with their new neighbours); stored rows off the slot grid inside the span are staged
    for deletion."""
    step = d.step
    g_lo, g_hi = b_lo - CONTEXT_SLOTS * step, b_hi + CONTEXT_SLOTS * step
    n = (g_hi - g_lo) // step + 1
    slots = g_lo + np.arange(n, dtype=np.int64) * step
    old = _stored(ScadaReading._meta.db_table, d.pk, g_lo, g_hi) if has_stored else np.empty(0, dtype=_STORED)
    on_grid = old["t"] % (step * _US) == 0
    grid = old[on_grid]
    at = (grid["t"] // _US - g_lo) // step
    stored = np.zeros(n, dtype=bool)
    stored[at] = True
    s_mv, s_cv, s_code = np.full(n, np.nan), np.full(n, np.nan), np.full(n, -1, dtype=np.int16)
    s_mv[at], s_cv[at], s_code[at] = grid["m"], grid["c"], grid["q"]
    outside_span = (slots < lo) | (slots > hi)
    # Stored neighbours outside the span (inside it, the file's slots replace them).
    values = np.where(outside_span & stored, s_mv, np.nan)
    values[(slot_list - g_lo) // step] = value_list
    if d.state:
        cleaned, codes = clean_array(values, min_threshold=0.0, analog=False)
    else:
        threshold = THRESHOLDS.get(d.quantity)
        if threshold is None:  # flow: the demo's rule
            present = np.abs(values[~np.isnan(values)])
            threshold = 0.25 * (float(present.mean()) if len(present) else 0.0) + 10 * d.accuracy
        cleaned, codes = clean_array(values, min_threshold=threshold)
    inside = (slots >= b_lo) & (slots <= b_hi)
    sampled = np.zeros(n, dtype=bool)
    sampled[(slot_list - g_lo) // step] = True
    near = np.unique(np.concatenate([slot_list, [x for x in (prev_last, next_first) if x is not None]]))
    before = np.searchsorted(near, slots, side="right") - 1
    after = np.minimum(before + 1, len(near) - 1)
    short = (
        (before >= 0)
        & (before + 1 < len(near))
        & ((near[after] - near[np.maximum(before, 0)]) // step - 1 <= GAP_SLOTS)
    )
    # Context rows outside the span are rewritten only when stored and next to this block's edge.
    outside = stored & outside_span & (((slots < b_lo) & (b_lo == lo)) | ((slots > b_hi) & (b_hi == hi)))
    keep = (inside & (sampled | short | stored)) | outside
    same = _same(values, s_mv) & _same(cleaned, s_cv) & (codes == s_code)
    write = keep & ~(stored & same)
    summary.slots += int((keep & inside).sum())  # the file's span; rewritten neighbours count as changes only
    summary.unchanged += int((keep & inside & stored & same).sum())
    summary.inserted += int((write & ~stored).sum())
    summary.updated += int((write & stored).sum())
    assert final is not None and gone_rows is not None
    final.add(np.full(int(write.sum()), d.pk), slots[write] * _US - _PG_EPOCH_US, values[write], cleaned[write],
              codes[write])  # fmt: skip
    # Off the grid in the span: from this block's first slot up to the next block's (the span's end).
    end = hi * _US if b_hi == hi else (b_hi + step) * _US - 1
    gone = old["t"][~on_grid & (old["t"] >= b_lo * _US) & (old["t"] <= end)]
    gone_rows.add(np.full(len(gone), d.pk), gone - _PG_EPOCH_US)
