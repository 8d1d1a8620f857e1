import django.contrib.postgres.fields
import django.db.models.deletion
from django.db import migrations, models

# Snapshots saved before this migration did not record the permissions their tool needed. They are
# immutable (0002's trigger refuses UPDATE), so the column is added with every product permission as the
# default for the existing rows and the default then dropped: an old snapshot stays readable only by a
# principal that holds every permission (refuse by default), and new rows always name their own.
ALL_PERMISSIONS = "{optimization.run,scada.view,simulation.view,webgis.view}"


class Migration(migrations.Migration):
    dependencies = [
        ("contexts", "0005_taskrun_owner"),
        ("evidence", "0002_snapshot_immutable"),
    ]

    operations = [
        migrations.AddField(
            model_name="evidencesnapshot",
            name="principal",
            field=models.ForeignKey(
                blank=True,
                null=True,
                on_delete=django.db.models.deletion.PROTECT,
                related_name="evidence_snapshots",
                to="contexts.principal",
            ),
        ),
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    "ALTER TABLE evidence_evidencesnapshot ADD COLUMN required_permissions varchar(32)[] "
                    f"NOT NULL DEFAULT '{ALL_PERMISSIONS}'; "
                    "ALTER TABLE evidence_evidencesnapshot ALTER COLUMN required_permissions DROP DEFAULT;",
                    "ALTER TABLE evidence_evidencesnapshot DROP COLUMN required_permissions;",
                )
            ],
            state_operations=[
                migrations.AddField(
                    model_name="evidencesnapshot",
                    name="required_permissions",
                    field=django.contrib.postgres.fields.ArrayField(
                        base_field=models.CharField(max_length=32), default=list, size=None
                    ),
                )
            ],
        ),
    ]
