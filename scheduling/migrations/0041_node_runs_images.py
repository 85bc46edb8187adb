from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("scheduling", "0040_usage_quota_reclaim_cause"),
    ]

    operations = [
        migrations.AddField(
            model_name="node",
            name="runs_images",
            field=models.BooleanField(
                blank=True,
                help_text="whether its agent runs jobs' images (a container runtime); null: not reported",
                null=True,
            ),
        ),
    ]
