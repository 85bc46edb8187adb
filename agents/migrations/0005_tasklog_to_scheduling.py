# TaskLog now belongs to the scheduling app (scheduling/migrations/0014), which keeps its
# table: only the model's record here goes, the table and its rows stay.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0004_node_last_heartbeat'),
        ('scheduling', '0014_tasklog_from_agents'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='TaskLog')],
            database_operations=[],
        ),
    ]
