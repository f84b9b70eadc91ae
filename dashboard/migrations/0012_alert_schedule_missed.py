"""A fifth alert kind: schedule ticks missed in the last hour (issue 34)."""

from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('delayq', '0011_dispatch_limits'),
    ]

    operations = [
        migrations.AlterField(
            model_name='alertrule',
            name='kind',
            field=models.CharField(choices=[('dead_per_hour', 'Dead letters in the last hour above'), ('oldest_ready', 'Oldest ready message waiting longer than (seconds)'), ('no_workers', 'No worker heartbeat for longer than (seconds)'), ('lateness_p99', 'Delivery lateness p99 over the window above (seconds)'), ('schedule_missed', 'Schedule ticks missed in the last hour above')], max_length=16),
        ),
    ]
