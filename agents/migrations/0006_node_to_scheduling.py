# Node now belongs to the scheduling app (scheduling/migrations/0017), which keeps its table:
# only the model's record here goes, the table and its rows stay.
from django.db import migrations


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0005_tasklog_to_scheduling'),
        ('scheduling', '0017_node_from_agents'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name='Node')],
            database_operations=[],
        ),
    ]
