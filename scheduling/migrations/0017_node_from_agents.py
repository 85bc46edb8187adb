# The node inventory moves here from the agents app: the scheduler owns the cluster it decides
# over, and the agents app (how machines join and talk to the control plane) sits on top of it,
# so no app imports one that imports it back. The table, agents_node, stays as it is: only
# Django's record of which app owns the model changes (agents/migrations/0006 removes it there),
# and the foreign keys that point at it now name it here.
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0005_tasklog_to_scheduling'),
        ('scheduling', '0016_job_pending_histogram'),
    ]

    state_operations = [
        migrations.CreateModel(
            name='Node',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=253, unique=True)),
                ('zone', models.CharField(max_length=63)),
                ('rack', models.CharField(max_length=63)),
                ('gpu_type', models.CharField(blank=True, help_text='empty for a CPU node', max_length=20)),
                ('gpu_count', models.PositiveSmallIntegerField(default=0)),
                ('cpu_count', models.PositiveIntegerField()),
                ('memory_gb', models.PositiveIntegerField()),
                ('scratch_disk_gb', models.PositiveIntegerField(default=0)),
                ('labels', models.JSONField(blank=True, default=dict)),
                ('state', models.CharField(choices=[('NEW', 'New'), ('READY', 'Ready'), ('CORDONED', 'Cordoned'), ('DRAINING', 'Draining'), ('SUSPECT', 'Suspect'), ('LOST', 'Lost')], default='NEW', max_length=10)),
                ('state_reason', models.CharField(blank=True, max_length=300)),
                ('health', models.CharField(choices=[('NEW', 'NEW'), ('READY', 'READY'), ('SUSPECT', 'SUSPECT'), ('LOST', 'LOST')], default='NEW', max_length=10)),
                ('admin_state', models.CharField(blank=True, choices=[('', 'schedulable'), ('CORDONED', 'cordoned: no new work'), ('DRAINING', 'draining: no new work, running tasks move elsewhere')], default='', max_length=10)),
                ('admin_reason', models.CharField(blank=True, max_length=300)),
                ('reclaim_deadline', models.DateTimeField(blank=True, help_text='spot reclaim: tasks requeued then', null=True)),
                ('address', models.CharField(blank=True, help_text="where a gang's rank 0 is reached", max_length=253)),
                ('token_digest', models.CharField(blank=True, db_index=True, max_length=64)),
                ('task_isolation', models.CharField(blank=True, choices=[('uid', 'each task runs as a user of its own'), ('none', "tasks run as the agent's own user: they can read each other's environment and files")], max_length=10)),
                ('state_changed_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('registered_at', models.DateTimeField(default=django.utils.timezone.now)),
                ('first_heartbeat_at', models.DateTimeField(blank=True, null=True)),
                ('last_heartbeat_at', models.DateTimeField(blank=True, null=True)),
            ],
            options={
                'db_table': 'agents_node',
                'ordering': ['zone', 'rack', 'name'],
                'indexes': [models.Index(fields=['gpu_type', 'state'], name='node_class_state_idx')],
            },
        ),
        migrations.AlterField(
            model_name='task',
            name='node',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='tasks', to='scheduling.node'),
        ),
        migrations.AlterField(
            model_name='task',
            name='last_node',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.SET_NULL, related_name='+', to='scheduling.node'),
        ),
        migrations.AlterField(
            model_name='jobevent',
            name='node',
            field=models.ForeignKey(blank=True, null=True, on_delete=django.db.models.deletion.CASCADE, related_name='events', to='scheduling.node'),
        ),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(state_operations=state_operations, database_operations=[]),
    ]
