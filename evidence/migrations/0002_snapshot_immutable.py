"""Evidence snapshots are immutable (SPEC §8, R-EVID-1): the database refuses every UPDATE of a snapshot,
whatever code path tries it (ORM, admin, raw SQL), as it refuses changes to a ``TaskReport`` revision
(contexts migration 0003). Deleting stays possible only by deleting what the snapshot belongs to (its
project, task or run cascade), so demo re-seeding and project removal keep working."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION evidence_snapshot_refuse_update() RETURNS trigger AS $$
BEGIN
    RAISE EXCEPTION 'evidence snapshots are immutable'
        USING ERRCODE = 'integrity_constraint_violation';
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER evidence_snapshot_immutable
    BEFORE UPDATE ON evidence_evidencesnapshot
    FOR EACH ROW EXECUTE FUNCTION evidence_snapshot_refuse_update();
"""

DROP = """
DROP TRIGGER IF EXISTS evidence_snapshot_immutable ON evidence_evidencesnapshot;
DROP FUNCTION IF EXISTS evidence_snapshot_refuse_update();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("evidence", "0001_initial"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
