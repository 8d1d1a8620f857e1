"""Model versions (issue 42 item 1): NetworkSource becomes a history, one row per import_network."""

import hashlib

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


def fill_sha256(apps, schema_editor):  # type: ignore[no-untyped-def]
    NetworkSource = apps.get_model("queries", "NetworkSource")
    for row in NetworkSource.objects.only("pk", "inp_text").iterator():
        NetworkSource.objects.filter(pk=row.pk).update(sha256=hashlib.sha256(row.inp_text.encode()).hexdigest())


class Migration(migrations.Migration):

    dependencies = [
        ("contexts", "0001_initial"),
        ("queries", "0012_scada_device_accuracy_nullable"),
    ]

    operations = [
        migrations.AlterField(
            model_name="networksource",
            name="project",
            field=models.ForeignKey(
                db_index=False,
                on_delete=django.db.models.deletion.CASCADE,
                related_name="model_versions",
                to="contexts.project",
            ),
        ),
        migrations.AddField(
            model_name="networksource",
            name="version",
            field=models.PositiveIntegerField(default=1),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="networksource",
            name="sha256",
            field=models.CharField(default="", max_length=64),
            preserve_default=False,
        ),
        migrations.AddField(
            model_name="networksource",
            name="imported_by",
            field=models.CharField(blank=True, default="", max_length=150),
        ),
        migrations.AlterField(
            model_name="networksource",
            name="imported_at",
            field=models.DateTimeField(default=django.utils.timezone.now),
        ),
        migrations.AlterModelOptions(
            name="networksource", options={"ordering": ["project_id", "-version"], "verbose_name": "model version"}
        ),
        migrations.RunPython(fill_sha256, migrations.RunPython.noop),
        migrations.AddConstraint(
            model_name="networksource",
            constraint=models.UniqueConstraint(fields=("project", "version"), name="networksource_project_version"),
        ),
    ]
