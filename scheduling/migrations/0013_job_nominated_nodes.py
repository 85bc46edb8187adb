# Job.nominated_nodes: the nodes a preemptor was nominated to when it evicted, held for it until
# the first pass after its victims have stopped (core.PendingJob.nominated).
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0012_task_checkpoint'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='nominated_nodes',
            field=models.JSONField(blank=True, default=list),
        ),
    ]
