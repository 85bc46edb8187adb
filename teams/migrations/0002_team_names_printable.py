import django.core.validators
import mlqueue.text
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('teams', '0001_initial'),
    ]

    operations = [
        migrations.AlterField(
            model_name='team',
            name='description',
            field=models.CharField(blank=True, max_length=300, validators=[mlqueue.text.validate_printable]),
        ),
        migrations.AlterField(
            model_name='team',
            name='name',
            field=models.CharField(max_length=63, unique=True, validators=[django.core.validators.RegexValidator('^[a-z0-9][a-z0-9-]{0,62}\\Z', 'lowercase letters, digits and dashes, starting with a letter or digit')]),
        ),
    ]
