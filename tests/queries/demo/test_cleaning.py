"""SCADA cleaning rules: gaps stay gaps, spikes and flat lines are removed, good data passes through."""

from __future__ import annotations

import numpy as np

from queries.demo.cleaning import GAP, GOOD, SPIKE, STUCK, clean_series


def _smooth(n: int = 60) -> list[float | None]:
    rng = np.random.default_rng(1)
    return [round(30 + 2 * np.sin(k / 10) + float(rng.normal(0, 0.05)), 4) for k in range(n)]


def test_good_values_pass_through_unchanged() -> None:
    values = _smooth()
    cleaned, quality = clean_series(values, min_threshold=1.0)
    assert quality == [GOOD] * len(values)
    assert cleaned == values


def test_gaps_are_marked_and_never_filled() -> None:
    values = _smooth()
    for k in (0, 10, 11, 12, 59):
        values[k] = None
    cleaned, quality = clean_series(values, min_threshold=1.0)
    assert [k for k, q in enumerate(quality) if q == GAP] == [0, 10, 11, 12, 59]
    assert [cleaned[k] for k in (0, 10, 11, 12, 59)] == [None] * 5


def test_spike_is_removed_not_replaced() -> None:
    values = _smooth()
    values[30] = values[30] + 9.0  # type: ignore[operator]
    cleaned, quality = clean_series(values, min_threshold=1.0)
    assert quality[30] == SPIKE
    assert cleaned[30] is None
    assert quality.count(SPIKE) == 1


def test_flat_line_is_stuck() -> None:
    values = _smooth()
    for k in range(20, 32):
        values[k] = values[19]
    cleaned, quality = clean_series(values, min_threshold=1.0, stuck_run=6)
    assert [k for k, q in enumerate(quality) if q == STUCK] == list(range(19, 32))
    assert all(cleaned[k] is None for k in range(19, 32))


def test_a_short_repeat_is_not_stuck() -> None:
    values = _smooth()
    values[21] = values[20]
    _, quality = clean_series(values, min_threshold=1.0, stuck_run=6)
    assert STUCK not in quality
