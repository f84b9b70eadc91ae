"""Small charts drawn in templates (dashboard/charts.py draws them)."""

from django import template

from ..charts import sparkline as draw_sparkline

register = template.Library()


@register.simple_tag
def sparkline(per_minute, topic: str = "", group: str = ""):
    """The overview row's last hour: published, acked and dead per minute, labelled ``topic`` or
    ``topic/group``. A tag in the row, not an {% include %}: 200 includes were ~10 ms a page."""
    return draw_sparkline(per_minute or {}, label=f"{topic}/{group}" if group else topic)
