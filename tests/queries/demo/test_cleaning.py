"""SCADA cleaning rules: gaps stay gaps, spikes and flat lines are removed, good data passes through."""

from __future__ import annotations

import numpy as np

from queries.demo.cleaning import GAP, GOOD, QUALITY_NAMES, SPIKE, STUCK, clean_array, clean_series


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


def test_the_vectorised_cleaning_gives_the_same_flags_and_values() -> None:
    """``clean_array`` (the importer's) and ``clean_series`` (the demo's) agree on random damaged series."""
    rng = np.random.default_rng(21)
    for _ in range(200):
        n = int(rng.integers(0, 300))
        v = np.round(rng.normal(50, 1, n), 1)
        v[rng.random(n) < 0.05] = np.nan
        v[rng.random(n) < 0.02] += 30
        a = int(rng.integers(0, max(1, n - 10)))
        v[a : a + int(rng.integers(3, 10))] = v[a] if n else 0
        listed = [None if np.isnan(x) else float(x) for x in v]
        cleaned, quality = clean_series(listed, min_threshold=2.0)
        c2, codes = clean_array(v, min_threshold=2.0)
        assert [QUALITY_NAMES[c] for c in codes] == quality
        assert [None if np.isnan(x) else float(x) for x in c2] == cleaned
