"""Issue 20: the stored network schemas of projects imported earlier get the unit labels verified against
WNTR's internal units (pump power in W, not kW; first-order reaction coefficients per second, not per day;
initial quality's unit by the quality type). New imports write them from ``NETWORK_SCHEMAS``."""

from django.db import migrations

FIXES = {
    "pump": {"power": ("kW", "W")},
    "pipe": {"bulk_coeff": ("1/day", "1/s"), "wall_coeff": ("m/day", "m/s")},
    "junction": {"initial_quality": ("mg/L", "")},
    "reservoir": {"initial_quality": ("mg/L", "")},
    "tank": {"initial_quality": ("mg/L", "")},
}


def _apply(apps, forward):
    NetworkSchema = apps.get_model("queries", "NetworkSchema")
    for kind, fixes in FIXES.items():
        for row in NetworkSchema.objects.filter(kind=kind).iterator():
            changed = False
            for prop in row.properties:
                old, new = fixes.get(prop.get("name"), (None, None))
                if old is None:
                    continue
                src, dst = (old, new) if forward else (new, old)
                if prop.get("unit") == src:
                    prop["unit"] = dst
                    changed = True
            if changed:
                row.save(update_fields=["properties"])


def forwards(apps, schema_editor):
    _apply(apps, True)


def backwards(apps, schema_editor):
    _apply(apps, False)


class Migration(migrations.Migration):
    dependencies = [
        ("queries", "0005_baseline_covering_instant_index"),
    ]

    operations = [migrations.RunPython(forwards, backwards)]
