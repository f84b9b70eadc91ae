"""A schedule's backfill runs as a bulk operation (issue 34): the kind, and the cursor a resumed
run continues from."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('delayq', '0012_alert_schedule_missed'),
    ]

    operations = [
        migrations.AddField(
            model_name='bulkoperation',
            name='cursor',
            field=models.CharField(blank=True, help_text="Where a resumed run continues (kinds that keep one: a backfill's last tick).", max_length=64),
        ),
        migrations.AlterField(
            model_name='bulkoperation',
            name='action',
            field=models.CharField(choices=[('replay', 'replay dead letters'), ('purge', 'purge a state'), ('reschedule', 'reschedule a state'), ('kill', 'kill retrying messages'), ('backfill', "backfill a schedule's ticks")], default='replay', max_length=16),
        ),
    ]
