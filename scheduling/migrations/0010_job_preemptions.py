from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0009_leader_event'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='preemptions',
            field=models.PositiveIntegerField(default=0),
        ),
    ]
