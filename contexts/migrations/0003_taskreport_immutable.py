"""TaskReport revisions are immutable once written (SPEC §1): the database itself refuses an UPDATE that
changes a revision's task, number, sections or creation time, whatever code path tries it (ORM, admin,
raw SQL). A change to a report is a new revision row."""

from django.db import migrations

CREATE = """
CREATE OR REPLACE FUNCTION contexts_taskreport_refuse_update() RETURNS trigger AS $$
BEGIN
    IF NEW.task_id IS DISTINCT FROM OLD.task_id
       OR NEW.revision IS DISTINCT FROM OLD.revision
       OR NEW.sections IS DISTINCT FROM OLD.sections
       OR NEW.created_at IS DISTINCT FROM OLD.created_at THEN
        RAISE EXCEPTION 'task report revisions are immutable; write a new revision'
            USING ERRCODE = 'integrity_constraint_violation';
    END IF;
    RETURN NEW;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER contexts_taskreport_immutable
    BEFORE UPDATE ON contexts_taskreport
    FOR EACH ROW EXECUTE FUNCTION contexts_taskreport_refuse_update();
"""

DROP = """
DROP TRIGGER IF EXISTS contexts_taskreport_immutable ON contexts_taskreport;
DROP FUNCTION IF EXISTS contexts_taskreport_refuse_update();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("contexts", "0002_query_context"),
    ]

    operations = [migrations.RunSQL(CREATE, DROP)]
