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
