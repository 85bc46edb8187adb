# Job.pending_histogram: the node histogram and fit count the pass computed for a pending job's
# shape, written with its pending reason (the job page reads it instead of the live cluster).
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0015_event_kind_reserved_removed'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='pending_histogram',
            field=models.JSONField(blank=True, default=dict),
        ),
    ]
