# TaskLog moves here from the agents app, next to what reads it (the job's logs). Its table,
# agents_tasklog, stays as it is: only Django's record of which app owns the model changes
# (agents/migrations/0005 removes it there).
import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('agents', '0004_node_last_heartbeat'),
        ('scheduling', '0013_job_nominated_nodes'),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name='TaskLog',
                    fields=[
                        ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                        ('rank', models.PositiveIntegerField()),
                        ('attempt', models.PositiveIntegerField()),
                        ('stream', models.CharField(choices=[('stdout', 'stdout'), ('stderr', 'stderr')], max_length=6)),
                        ('offset', models.PositiveBigIntegerField(help_text='character offset of this chunk in the stream')),
                        ('text', models.TextField()),
                        ('created_at', models.DateTimeField(default=django.utils.timezone.now)),
                        ('job', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='logs', to='scheduling.job')),
                    ],
                    options={
                        'db_table': 'agents_tasklog',
                        'ordering': ['job_id', 'rank', 'attempt', 'stream', 'offset'],
                        'constraints': [models.UniqueConstraint(fields=('job', 'rank', 'attempt', 'stream', 'offset'), name='tasklog_chunk_unique')],
                    },
                ),
            ],
            database_operations=[],
        ),
    ]
