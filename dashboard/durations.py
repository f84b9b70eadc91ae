"""Durations in words wherever the console shows them ("14 d", not "1209600.0"): the template
filter ``duration`` (templatetags/delayq.py) and the admin's seconds fields, which keep a number
input (the value stored) and say it in words beside it."""

from django import forms
from django.utils.html import format_html

from .services.contracts import format_seconds

# Model fields that hold seconds (topics, consumer groups, retry policies).
SECONDS_FIELDS = frozenset({"visibility_timeout", "dead_max_age", "ttl", "base_delay", "max_delay"})


def in_words(seconds, zero: str = "0 s") -> str:
    """'14 d', '1 h 30 min', '500 ms'; ``zero`` for 0 (e.g. "forever" where 0 means no limit);
    '—' for no value; a value that is not a number is shown as it is."""
    if seconds in (None, ""):
        return "—"
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return str(seconds)
    if value != value or value in (float("inf"), float("-inf")) or value < 0:
        return str(seconds)
    return zero if value == 0 else format_seconds(value)


class SecondsInput(forms.NumberInput):
    """A number of seconds, written without a trailing ".0", followed by the saved value in words."""

    def __init__(self, attrs=None):
        super().__init__({"step": "any", **(attrs or {})})

    def format_value(self, value):
        if isinstance(value, float) and value.is_integer():
            value = int(value)
        return super().format_value(value)

    def render(self, name, value, attrs=None, renderer=None):
        html = super().render(name, value, attrs, renderer)
        if value in (None, ""):
            return html
        return format_html('{} <span class="help seconds-in-words" data-testid="in-words">{}</span>', html,
                           in_words(value, zero="0 (none)"))
