from django.db import migrations, models
from django.db.models import Exists, OuterRef


def mark_children_held_by_their_group(apps, schema_editor):
    """Children held under their held group's name and reason: taken as held by the group (the
    rule the release used before this column)."""
    Job = apps.get_model("scheduling", "Job")
    group = Job.objects.filter(
        pk=OuterRef("parent_id"), held=True, held_by_name=OuterRef("held_by_name"), held_reason=OuterRef("held_reason")
    )
    Job.objects.filter(held=True, parent__isnull=False).filter(Exists(group)).update(held_with_group=True)


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0042_usage_not_started_cause"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="held_with_group",
            field=models.BooleanField(default=False),
        ),
        migrations.RunPython(mark_children_held_by_their_group, migrations.RunPython.noop),
    ]
