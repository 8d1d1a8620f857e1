"""Unit spellings users write (issue 40 item 2): accepted whatever their case and spacing, converted exactly
as the canonical spelling, and any other spelling refused naming the accepted list."""

from __future__ import annotations

import pytest

from queries.scada_units import ACCEPTED_UNITS, QUANTITIES, UnitError, conversion


@pytest.mark.parametrize(
    ("quantity", "written", "canonical"),
    [
        ("pressure", "PSI", "psi"),
        ("pressure", "psig", "psi"),
        ("pressure", "ft H2O", "foot_H2O"),
        ("pressure", "FT  h2o", "foot_H2O"),
        ("pressure", "kPa", "kilopascal"),
        ("pressure", "KPA", "kilopascal"),
        ("flow", "GPM", "gallon/minute"),
        ("flow", "mgd", "MGD"),
        ("flow", "LPS", "L/s"),
    ],
)
def test_spellings_convert_as_the_unit_they_name(quantity: str, written: str, canonical: str) -> None:
    got = conversion(quantity, written)
    want = conversion(quantity, canonical)
    assert got.scale == pytest.approx(want.scale, rel=1e-12)
    assert got.offset == want.offset == 0.0


def test_psi_is_metres_of_water_head() -> None:
    # 1 psi = 6894.757 Pa = 0.70307 m of water (9806.65 Pa per m): 50.6 psi read back is 35.5753 m.
    assert conversion("pressure", "PSI").apply(50.6) == pytest.approx(35.57535, rel=1e-5)


def test_mgd_and_gpm_are_us_gallons() -> None:
    # 1 US gallon = 3.785411784 L (exact): 1 MGD = 0.0438126364 m³/s, 3000 gpm = 0.1892705892 m³/s.
    assert conversion("flow", "MGD").apply(1.0) == pytest.approx(0.0438126364, rel=1e-9)
    assert conversion("flow", "GPM").apply(3000.0) == pytest.approx(0.1892705892, rel=1e-9)


def test_an_unknown_spelling_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(UnitError) as refused:
        conversion("pressure", "pounds")
    message = str(refused.value)
    assert "'pounds'" in message
    assert "accepted: m, ft, psi, psig, kPa, bar, Pa, m H2O, ft H2O" in message


def test_a_unit_of_another_quantity_is_refused_naming_the_accepted_ones() -> None:
    with pytest.raises(UnitError) as refused:
        conversion("flow", "psi")
    assert "accepted: m3/s, L/s, m3/h, gpm, MGD, cfs" in str(refused.value)


def test_every_quantity_lists_its_accepted_units() -> None:
    assert set(ACCEPTED_UNITS) == set(QUANTITIES)
    for quantity, spellings in ACCEPTED_UNITS.items():
        for spelling in spellings:
            conversion(quantity, spelling)  # each listed spelling converts
