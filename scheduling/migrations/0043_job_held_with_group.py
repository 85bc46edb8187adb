from django.db import migrations, models


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
    ]
