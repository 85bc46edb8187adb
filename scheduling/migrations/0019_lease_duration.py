# SchedulerLease.lease_seconds: the holder's lease duration, written by the leader whenever it
# takes or renews the lease, so that the web judges whether a leader is alive by the duration
# the leader keeps to rather than by a constant of its own. The row that exists already gets the
# 10 s the web assumed until now; the next leader to take or renew the lease writes its own.
from django.db import migrations, models

WEB_LEASE_UNTIL_NOW_S = 10.0


def keep_the_duration_assumed_until_now(apps, schema_editor):
    apps.get_model("scheduling", "SchedulerLease").objects.update(lease_seconds=WEB_LEASE_UNTIL_NOW_S)


class Migration(migrations.Migration):

    dependencies = [
        ('scheduling', '0018_audit_event_to_teams'),
    ]

    operations = [
        migrations.AddField(
            model_name='schedulerlease',
            name='lease_seconds',
            field=models.FloatField(blank=True, null=True),
        ),
        migrations.RunPython(keep_the_duration_assumed_until_now, migrations.RunPython.noop),
    ]
