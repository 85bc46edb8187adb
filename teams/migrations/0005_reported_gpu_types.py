# The GPU types nodes report, recorded in this app (teams/resources.py), so the classes quotas
# may name no longer read the node table of the app above. Filled from the nodes registered so far.
import django.utils.timezone
from django.db import migrations, models


def record_registered_types(apps, schema_editor):
    Node = apps.get_model("scheduling", "Node")
    ReportedGpuType = apps.get_model("teams", "ReportedGpuType")
    types = Node.objects.exclude(gpu_type="").values_list("gpu_type", flat=True).order_by().distinct()
    ReportedGpuType.objects.bulk_create([ReportedGpuType(name=name) for name in types], ignore_conflicts=True)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0017_node_from_agents'),
        ('teams', '0004_audit_event'),
    ]

    operations = [
        migrations.CreateModel(
            name='ReportedGpuType',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('name', models.CharField(max_length=20, unique=True)),
                ('first_reported_at', models.DateTimeField(default=django.utils.timezone.now)),
            ],
            options={
                'ordering': ['name'],
            },
        ),
        migrations.RunPython(record_registered_types, migrations.RunPython.noop),
    ]
