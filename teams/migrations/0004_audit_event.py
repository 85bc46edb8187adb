# The event log moves here from the scheduling app as AuditEvent (it was JobEvent, and it also
# recorded quota, node and token changes). The lowest app holds it so every app can write it
# without importing one above. Its table, scheduling_jobevent, stays as it is: only Django's
# record of the model changes (scheduling/migrations/0018 removes it there).
import django.db.models.deletion
import django.utils.timezone
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
        ('scheduling', '0017_node_from_agents'),
        ('teams', '0003_quota_class_follows_the_cluster'),
    ]

    state_operations = [
        migrations.CreateModel(
            name='AuditEvent',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('job', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='scheduling.job')),
                ('team', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='teams.team')),
                ('node', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='scheduling.node')),
                ('kind', models.CharField(choices=[('SUBMITTED', 'Submitted'), ('TRANSITION', 'Transition'), ('CANCEL_REQUESTED', 'Cancel Requested'), ('STOP_REQUESTED', 'Stop Requested'), ('RETRY', 'Retry'), ('QUOTA_CHANGED', 'Quota Changed'), ('NODE_STATE', 'Node State'), ('SECURITY', 'Security'), ('LEADER', 'Leader'), ('CHECKPOINT', 'Checkpoint')], max_length=20)),
                ('actor', models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, to=settings.AUTH_USER_MODEL)),
                ('actor_name', models.CharField(help_text="user name, 'scheduler' or 'agent:<node>'", max_length=150)),
                ('from_state', models.CharField(blank=True, max_length=40)),
                ('to_state', models.CharField(blank=True, max_length=10)),
                ('reason', models.CharField(blank=True, max_length=40)),
                ('message', models.TextField(blank=True)),
                ('data', models.JSONField(blank=True, default=dict)),
                ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'db_table': 'scheduling_jobevent',
                'ordering': ['created_at', 'id'],
                'indexes': [models.Index(fields=['job', 'created_at'], name='event_job_time_idx'), models.Index(fields=['team', 'created_at'], name='event_team_time_idx'), models.Index(fields=['node', 'created_at'], name='event_node_time_idx'), models.Index(fields=['kind', '-created_at'], name='event_kind_time_idx')],
            },
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations, database_operations=[]),
    ]
