"""A device's readings against the model baseline as a server-rendered SVG chart (admin device page).

No script and no style attribute: the admin's Content-Security-Policy forbids inline scripts and
styles, and SVG presentation attributes (``stroke``, ``fill``) are neither. No CDN, no JavaScript
library — the page stays readable where the admin runs.

The window is the last 24 h of the device's readings (or nothing, said in words), its times on the
project's clock and its values in the project's unit system (``queries.units.scada_shown``: the same
conversion as every tool's answer). Series: measured
(grey), cleaned (blue), model baseline of the device's element (orange, the field the device's quantity
compares with, ``queries.scada_units``); a gap breaks a line, it is never drawn across.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta
from html import escape

from queries.models import NODE_TYPES, LinkBaseline, NodeBaseline, ScadaDevice, ScadaReading
from queries.scada_units import QUANTITIES
from queries.timezones import project_zone
from queries.units import Shown, scada_shown

WIDTH, HEIGHT, PAD = 760, 260, 48
WINDOW = timedelta(hours=24)
MAX_POINTS = 3000


def polylines(
    points: list[tuple[datetime, float | None]], x: Callable[[datetime], float], y: Callable[[float], float]
) -> list[str]:
    """SVG polyline point strings, one per unbroken run (a None breaks the line); also the run chart's
    (``queries.admin_run_chart``)."""
    runs: list[str] = []
    current: list[str] = []
    for t, v in points:
        if v is None:
            if current:
                runs.append(" ".join(current))
            current = []
            continue
        current.append(f"{x(t):.1f},{y(v):.1f}")
    if current:
        runs.append(" ".join(current))
    return runs


def _shown(how: Shown, value: float | None) -> float | None:
    return None if value is None else how(value)


def device_chart_svg(device: ScadaDevice) -> str:
    """The chart of ``device`` (see the module docstring); three bounded queries."""
    last = ScadaReading.objects.filter(device=device).order_by("-time").values_list("time", flat=True)[:1]
    if not last:
        return "<p>No readings stored for this device yet.</p>"
    end = last[0] + timedelta(seconds=device.sample_interval_s)
    start = end - WINDOW
    rows = list(
        ScadaReading.objects.filter(device=device, time__gte=start, time__lt=end)
        .order_by("time")
        .values_list("time", "monitored_value", "cleaned_value")[:MAX_POINTS]
    )
    field = QUANTITIES[device.quantity].model_field
    model: list[tuple[datetime, float | None]] = []
    if field is not None:
        base = NodeBaseline if device.element_type in NODE_TYPES else LinkBaseline
        if hasattr(base, field):
            model = list(
                base.objects.filter(
                    project_id=device.project_id,
                    element_type=device.element_type,
                    element_id=device.element_id,
                    time__gte=start,
                    time__lt=end,
                )
                .order_by("time")
                .values_list("time", field)[:MAX_POINTS]
            )
    project = device.project
    how = scada_shown(device.quantity, project.unit_system)
    unit_label = device.unit
    if how is not None:
        unit_label = how[0].label
        rows = [(t, _shown(how[0], m), _shown(how[0], c)) for t, m, c in rows]
        model = [(t, _shown(how[0], v)) for t, v in model]
    zone = project_zone(project)
    measured = [(t, m) for t, m, _ in rows]
    cleaned = [(t, c) for t, _, c in rows]
    values = [v for _, v in measured + cleaned + model if v is not None]
    if not values:
        return "<p>The last 24 h of this device hold no values (only gaps).</p>"
    lo, hi = min(values), max(values)
    if hi - lo < 1e-9:
        lo, hi = lo - 1, hi + 1
    span = (end - start).total_seconds()

    def x(t: datetime) -> float:
        return PAD + (t - start).total_seconds() / span * (WIDTH - 2 * PAD)

    def y(v: float) -> float:
        return HEIGHT - PAD - (v - lo) / (hi - lo) * (HEIGHT - 2 * PAD)

    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" class="tjw-device-chart" width="{WIDTH}" height="{HEIGHT}" '
        f'viewBox="0 0 {WIDTH} {HEIGHT}" role="img" aria-label="{escape(device.device_id)}: readings against '
        'the model baseline">',
        f'<rect x="{PAD}" y="{PAD}" width="{WIDTH - 2 * PAD}" height="{HEIGHT - 2 * PAD}" fill="#fafafa" '
        'stroke="#ccc"/>',
    ]
    for label, data, colour, dash in (
        ("measured", measured, "#999999", ""),
        ("cleaned", cleaned, "#1f77b4", ""),
        ("model baseline", model, "#ff7f0e", ' stroke-dasharray="6 3"'),
    ):
        for run in polylines(data, x, y):
            parts.append(f'<polyline class="tjw-{label.replace(" ", "-")}" points="{run}" fill="none" '
                         f'stroke="{colour}" stroke-width="1.5"{dash}/>')  # fmt: skip
    unit = escape(unit_label)
    local_start, local_end = start.astimezone(zone), end.astimezone(zone)
    parts += [
        f'<text x="{PAD}" y="{PAD - 8}" font-size="12" fill="#333">{hi:.3g} {unit}</text>',
        f'<text x="{PAD}" y="{HEIGHT - PAD + 16}" font-size="12" fill="#333">{lo:.3g} {unit} · '
        f"{local_start:%Y-%m-%d %H:%M} {escape(local_start.tzname() or '')}</text>",
        f'<text x="{WIDTH - PAD}" y="{HEIGHT - PAD + 16}" font-size="12" fill="#333" text-anchor="end">'
        f"{local_end:%Y-%m-%d %H:%M} {escape(local_end.tzname() or '')} ({escape(zone.key)})</text>",
        f'<text x="{WIDTH - PAD}" y="{PAD - 8}" font-size="12" text-anchor="end"><tspan fill="#999999">measured'
        '</tspan> · <tspan fill="#1f77b4">cleaned</tspan> · <tspan fill="#ff7f0e">model baseline'
        f"{'' if model else ' (none in this window)'}</tspan></text>",
        "</svg>",
    ]
    return "".join(parts)
