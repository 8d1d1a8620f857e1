"""SCADA cleaning: flat-line (stuck sensor) detection, despiking, and gap marking.

The rules (also enforced by a CHECK constraint on ``ScadaReading``):

* a slot with no monitored value is a *gap*; its cleaned value is NULL — cleaning never invents data;
* a run of ``stuck_run`` or more identical consecutive monitored values is *stuck*: cleaned NULL;
* a value further than ``max(k · 1.4826 · MAD, min_threshold)`` from the median of its neighbours
  (Hampel filter over ``±half_window`` present, non-stuck values) is a *spike*: cleaned NULL;
* everything else is *good* and its cleaned value equals the monitored value.
"""

from __future__ import annotations

from collections.abc import Sequence
from statistics import median

import numpy as np

GOOD, SPIKE, STUCK, GAP = "good", "spike", "stuck", "gap"


def clean_series(
    values: Sequence[float | None],
    *,
    min_threshold: float,
    k: float = 5.0,
    half_window: int = 3,
    stuck_run: int = 6,
) -> tuple[list[float | None], list[str]]:
    """Return ``(cleaned, quality)`` for a regularly sampled series (``None`` = nothing received)."""
    n = len(values)
    quality = [GAP if v is None else GOOD for v in values]

    i = 0
    while i < n:
        if values[i] is None:
            i += 1
            continue
        j = i
        while j + 1 < n and values[j + 1] is not None and values[j + 1] == values[i]:
            j += 1
        if j - i + 1 >= stuck_run:
            for m in range(i, j + 1):
                quality[m] = STUCK
        i = j + 1

    usable = [m for m in range(n) if quality[m] == GOOD]
    for pos, m in enumerate(usable):
        lo, hi = max(0, pos - half_window), min(len(usable), pos + half_window + 1)
        window = [values[usable[q]] for q in range(lo, hi)]
        med = median(window)  # type: ignore[type-var]  # window holds floats only (gaps excluded)
        mad = median(abs(w - med) for w in window)  # type: ignore[operator]
        if abs(values[m] - med) > max(k * 1.4826 * mad, min_threshold):  # type: ignore[operator]
            quality[m] = SPIKE

    cleaned = [values[m] if quality[m] == GOOD else None for m in range(n)]
    return cleaned, quality


QUALITY_NAMES = (GOOD, SPIKE, STUCK, GAP)
_GOOD, _SPIKE, _STUCK, _GAP = range(4)


def clean_array(
    values: np.ndarray,
    *,
    min_threshold: float,
    k: float = 5.0,
    half_window: int = 3,
    stuck_run: int = 6,
    analog: bool = True,
) -> tuple[np.ndarray, np.ndarray]:
    """``clean_series`` on a NumPy array (NaN = nothing received), for the SCADA importer's millions of
    slots: the same rules and the same arithmetic, so both give identical results (a test compares them
    on random series). Returns ``(cleaned, codes)``, ``codes`` indexing ``QUALITY_NAMES``.

    ``analog=False`` (states: pump status, speed, valve position) only marks gaps — a pump that stays on
    for hours is not stuck, and a switch is not a spike."""
    v = np.asarray(values, dtype=float)
    n = len(v)
    present = ~np.isnan(v)
    codes = np.where(present, _GOOD, _GAP).astype(np.int8)
    if analog and n:
        same = np.zeros(n, dtype=bool)
        same[1:] = present[1:] & present[:-1] & (v[1:] == v[:-1])
        run = np.cumsum(~same) - 1
        lengths = np.bincount(run)
        codes[present & (lengths[run] >= stuck_run)] = _STUCK
        usable = np.flatnonzero(codes == _GOOD)
        u = v[usable]
        m = len(u)
        if m:
            med = np.empty(m)
            mad = np.empty(m)
            width = 2 * half_window + 1
            if m >= width:
                win = np.lib.stride_tricks.sliding_window_view(u, width)
                wmed = np.median(win, axis=1)
                med[half_window : m - half_window] = wmed
                mad[half_window : m - half_window] = np.median(np.abs(win - wmed[:, None]), axis=1)
            edges = range(m) if m < width else [*range(half_window), *range(m - half_window, m)]
            for pos in edges:
                w = u[max(0, pos - half_window) : min(m, pos + half_window + 1)]
                med[pos] = np.median(w)
                mad[pos] = np.median(np.abs(w - med[pos]))
            spike = np.abs(u - med) > np.maximum(k * 1.4826 * mad, min_threshold)
            codes[usable[spike]] = _SPIKE
    cleaned = np.where(codes == _GOOD, v, np.nan)
    return cleaned, codes
