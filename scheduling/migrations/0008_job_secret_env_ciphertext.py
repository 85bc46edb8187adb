from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0007_task_last_node_security_events'),
    ]

    operations = [
        migrations.AddField(
            model_name='job',
            name='secret_env_ciphertext',
            field=models.TextField(blank=True, default='', editable=False),
        ),
    ]
