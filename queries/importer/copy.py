"""Bulk loading with PostgreSQL ``COPY`` (psycopg 3): far faster than ``bulk_create`` for the large
tables (baseline series, readings) and used for elements too so a 10×10 tiled network loads quickly."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from django.db import connection


def copy_rows(table: str, columns: Sequence[str], rows: Iterable[Sequence[object]]) -> int:
    """COPY ``rows`` into ``table(columns)`` on Django's connection (inside the caller's transaction).

    Geometry values are EWKT strings (``SRID=4326;POINT(…)``); PostGIS parses them on input. Returns
    the number of rows written.
    """
    count = 0
    cols = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor:
        raw = cursor.cursor  # the psycopg 3 cursor under Django's wrapper
        with raw.copy(f'COPY "{table}" ({cols}) FROM STDIN') as copy:  # noqa: S608 - table/columns are ours
            for row in rows:
                copy.write_row(row)
                count += 1
    return count


def point_ewkt(lon: float, lat: float) -> str:
    return f"SRID=4326;POINT({float(lon)!r} {float(lat)!r})"


def linestring_ewkt(coords: Sequence[Sequence[float]]) -> str:
    return "SRID=4326;LINESTRING(" + ",".join(f"{float(x)!r} {float(y)!r}" for x, y in coords) + ")"


def copy_text(value: object) -> str:
    """One value in COPY text format (``\\N`` for NULL; backslash, tab and newlines escaped)."""
    if value is None:
        return r"\N"
    text = str(value)
    if "\\" in text or "\t" in text or "\n" in text or "\r" in text:
        text = text.replace("\\", "\\\\").replace("\t", "\\t").replace("\n", "\\n").replace("\r", "\\r")
    return text


def copy_lines(table: str, columns: Sequence[str], lines: Iterable[str], *, chunk: int = 1 << 20) -> int:
    """COPY pre-formatted text ``lines`` (each ending in a newline) into ``table(columns)``, sent in
    chunks of about ``chunk`` bytes. Returns the number of lines."""
    count = 0
    cols = ", ".join(f'"{c}"' for c in columns)
    with connection.cursor() as cursor:
        with cursor.cursor.copy(f'COPY "{table}" ({cols}) FROM STDIN') as copy:  # noqa: S608 - our names
            buf: list[str] = []
            size = 0
            for line in lines:
                buf.append(line)
                size += len(line)
                count += 1
                if size >= chunk:
                    copy.write("".join(buf))
                    buf, size = [], 0
            if buf:
                copy.write("".join(buf))
    return count


def summarize_reading_brin() -> None:
    """Summarize the readings' BRIN page ranges written since the last summary, so time-window scans
    skip them at once instead of after the next autovacuum."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT brin_summarize_new_values(%s::regclass)", ["scadareading_time_brin"])
