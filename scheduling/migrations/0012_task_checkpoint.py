# Confirmed checkpoints per attempt (docs/checkpoints.md): Task.last_checkpoint_at, Task.checkpoint_step,
# and the CHECKPOINT event kind.
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0011_preemption_pending_reason'),
    ]

    operations = [
        migrations.AddField(
            model_name='task',
            name='checkpoint_step',
            field=models.PositiveBigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name='task',
            name='last_checkpoint_at',
            field=models.DateTimeField(blank=True, null=True),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='kind',
            field=models.CharField(choices=[('SUBMITTED', 'Submitted'), ('TRANSITION', 'Transition'), ('CANCEL_REQUESTED', 'Cancel Requested'), ('STOP_REQUESTED', 'Stop Requested'), ('RETRY', 'Retry'), ('RESERVED', 'Reserved'), ('QUOTA_CHANGED', 'Quota Changed'), ('NODE_STATE', 'Node State'), ('SECURITY', 'Security'), ('LEADER', 'Leader'), ('CHECKPOINT', 'Checkpoint')], max_length=20),
        ),
    ]
