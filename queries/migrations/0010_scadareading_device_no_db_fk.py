"""The readings' device key stops being a database foreign key (its per-row check cost the SCADA bulk
import as much as writing the rows; queries/models/scada.py); a statement-level trigger deletes the
readings of devices deleted in SQL, so no reading outlives its device."""

import django.db.models.deletion
from django.db import migrations, models

TRIGGER = """
CREATE FUNCTION queries_scadadevice_drop_readings() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM queries_scadareading r USING gone WHERE r.device_id = gone.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER scadadevice_drop_readings AFTER DELETE ON queries_scadadevice
    REFERENCING OLD TABLE AS gone FOR EACH STATEMENT EXECUTE FUNCTION queries_scadadevice_drop_readings();
"""
DROP_TRIGGER = """
DROP TRIGGER IF EXISTS scadadevice_drop_readings ON queries_scadadevice;
DROP FUNCTION IF EXISTS queries_scadadevice_drop_readings();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("queries", "0009_network_source_for_baseline"),
    ]

    operations = [
        migrations.AlterField(
            model_name="scadareading",
            name="device",
            field=models.ForeignKey(
                db_constraint=False,
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="+",
                to="queries.scadadevice",
            ),
        ),
        migrations.RunSQL(TRIGGER, DROP_TRIGGER),
    ]
