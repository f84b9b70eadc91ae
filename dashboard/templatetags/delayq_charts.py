"""Small charts drawn in templates (dashboard/charts.py draws them)."""

from django import template

from ..charts import sparkline as draw_sparkline

register = template.Library()


@register.simple_tag
def sparkline(per_minute, label: str = ""):
    """The overview row's last hour: published, acked and dead per minute."""
    return draw_sparkline(per_minute or {}, label=label)
