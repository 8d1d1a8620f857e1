"""The shapes every query result shares: the R-PAGE-1 page and the R-PAGE-6 envelope."""

from __future__ import annotations

from datetime import datetime
from typing import Any, Generic, Literal, TypeVar

import pydantic_core
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from contexts.errors import LimitExceeded
from queries.units import declared

DEFAULT_LIMIT = 20
MAX_LIMIT = 500
MAX_OFFSET = 10000
#: R-PAGE-2: a time-series call returns at most 10000 points *or* 8 MiB of them, whichever comes first.
SERIES_MAX_BYTES = 8 * 1024 * 1024

ItemT = TypeVar("ItemT")
DataT = TypeVar("DataT")

#: What kind of truth a result is (R-REG "data semantics"): measured and cleaned readings are kept
#: apart, model baselines are labelled as model output, synthetic data says so.
Origin = Literal["model_network", "measured", "cleaned", "model_baseline", "analysis_run", "synthetic", "diagnostic"]


class PageRequest(BaseModel):
    """One page of a collection (R-PAGE-1): ``limit`` rows from ``offset``, both bounded. The bound is
    checked here and the page is applied in SQL by the service."""

    model_config = ConfigDict(frozen=True)

    limit: int = DEFAULT_LIMIT
    offset: int = 0
    max_limit: int = MAX_LIMIT

    def model_post_init(self, _context: Any) -> None:
        if not 1 <= self.limit <= self.max_limit:
            raise LimitExceeded(f"limit must be between 1 and {self.max_limit}.")
        if not 0 <= self.offset <= MAX_OFFSET:
            raise LimitExceeded(f"offset must be between 0 and {MAX_OFFSET}.")


#: What a page's ``total`` means (R-PAGE-1; ``queries.paging``), in every collection's output schema.
TOTAL_DESCRIPTION = (
    "Rows in the whole collection; null when there is no stable total or when the collection is larger "
    "than the server's exact-count threshold (TJWATER_EXACT_TOTAL_MAX, 10000 by default) — never an "
    "estimate. has_more is exact either way."
)


class PageInfo(BaseModel):
    """Where a page sits in its collection. ``total`` is null when there is no stable total, or above the
    exact-count threshold (``queries.paging``)."""

    total: int | None = Field(json_schema_extra=declared("count"), description=TOTAL_DESCRIPTION)
    limit: int = Field(json_schema_extra=declared("count"))
    offset: int = Field(json_schema_extra=declared("index"))
    has_more: bool


class Page(BaseModel, Generic[ItemT]):
    """A page of a collection (R-PAGE-1): ``items, total, limit, offset, has_more``."""

    items: list[ItemT]
    total: int | None = Field(json_schema_extra=declared("count"), description=TOTAL_DESCRIPTION)
    limit: int = Field(json_schema_extra=declared("count"))
    offset: int = Field(json_schema_extra=declared("index"))
    has_more: bool

    def info(self) -> PageInfo:
        return PageInfo(total=self.total, limit=self.limit, offset=self.offset, has_more=self.has_more)


class TimeWindow(BaseModel):
    """The time range a result covers (timezone-aware; UTC on the wire). ``timezone``: the project's IANA
    zone when the window is read in its local time (series, history, rankings: the 24 h cap counts its
    local hours, ``queries.services.windows``); ``None`` for results whose window is not local, and then
    left out of the answer so those results stay as they were."""

    start: datetime
    end: datetime
    timezone: str | None = Field(default=None, exclude_if=lambda value: value is None)


class DataGap(BaseModel):
    """A known hole in the data the result covers (so "no value" never reads as "no anomaly")."""

    start: datetime | None = None
    end: datetime | None = None
    reason: str


class ResultEnvelope(BaseModel, Generic[DataT]):
    """The envelope of every query result (R-PAGE-6).

    ``source`` names the registry source, ``source_ref`` the exact thing read (project and key),
    ``origin`` its data semantics. ``page`` repeats the paging summary of a collection at a fixed place.
    ``truncated=true`` means the result is not the whole answer — never "nothing more to see";
    ``continue_with`` then gives the arguments that fetch the rest (R-PAGE-5).
    """

    source: str
    source_ref: str
    queried_at: datetime
    origin: Origin
    data: DataT
    window: TimeWindow | None = None
    units: dict[str, str] = Field(default_factory=dict)
    page: PageInfo | None = None
    truncated: bool = False
    continue_with: dict[str, Any] | None = None
    data_gaps: list[DataGap] = Field(default_factory=list)
    evidence_id: str | None = None
    #: SCADA results: device id → its SCADA quantity, for ``queries.units.present`` (not serialised).
    _device_quantities: dict[str, str] = PrivateAttr(default_factory=dict)


def check_series_bytes(points: Any) -> int:
    """R-PAGE-2's byte limit: the JSON of a call's points, measured before the result is built and
    serialised (one serialisation of the points — what every edge does to them anyway); more than
    ``SERIES_MAX_BYTES`` → ``LIMIT_EXCEEDED`` (narrow the targets or the window, or page), never a
    silently cut series. Returns the size."""
    size = len(pydantic_core.to_json(points))
    if size > SERIES_MAX_BYTES:
        raise LimitExceeded(
            f"These points are {size} bytes, over the {SERIES_MAX_BYTES}-byte limit of one time-series call; "
            "ask for fewer targets, a shorter window or a smaller page.",
            details={"series_bytes": size, "max_bytes": SERIES_MAX_BYTES},
        )
    return size
