# JobEvent is now teams.AuditEvent (teams/migrations/0004), which keeps this table: only the
# model's record here goes, the table and its rows stay.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0017_node_from_agents'),
        ('teams', '0004_audit_event'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='JobEvent')],
            database_operations=[],
        ),
    ]
