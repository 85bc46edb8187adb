from django.db import migrations
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
        ("scheduling", "0043_job_held_with_group"),
    ]

    # Its own migration, so its own transaction: with the column's, the ALTER TABLE's lock on
    # every job was held while this scanned them (a review: 1.3 s a million jobs).
    operations = [
        migrations.RunPython(mark_children_held_by_their_group, migrations.RunPython.noop),
    ]
