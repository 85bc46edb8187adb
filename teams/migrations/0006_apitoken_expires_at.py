# Self-service API tokens may expire (issue 15): empty for every token made so far, which never does.
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("teams", "0005_reported_gpu_types"),
    ]

    operations = [
        migrations.AddField(
            model_name="apitoken",
            name="expires_at",
            field=models.DateTimeField(blank=True, help_text="refused from then on; empty: never", null=True),
        ),
    ]
