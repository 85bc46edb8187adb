from django.db import migrations


def create_lease(apps, schema_editor):
    apps.get_model("scheduling", "SchedulerLease").objects.get_or_create(pk=1)


class Migration(migrations.Migration):
    dependencies = [("scheduling", "0001_initial")]
    operations = [migrations.RunPython(create_lease, migrations.RunPython.noop)]
