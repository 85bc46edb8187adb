from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0042_usage_not_started_cause"),
    ]

    operations = [
        migrations.AddField(
            model_name="job",
            name="held_with_group",
            # With the default in the database too: web processes of the release before this one,
            # still serving while it rolls out, insert jobs without the column (an operator's
            # walkthrough: NOT NULL without it made every submit of theirs a 500).
            field=models.BooleanField(default=False, db_default=False),
        ),
    ]
