"""{% load delayq_durations %}: durations in words on the console's pages (durations.py)."""

from django import template

from ..durations import in_words

register = template.Library()


@register.filter
def duration(seconds, zero: str = "0 s") -> str:
    """Seconds in words: 1209600.0 -> '14 d'; ``zero`` says what 0 means (|duration:"forever")."""
    return in_words(seconds, zero)


@register.filter
def age(seconds) -> str:
    """How old something is, in words to the whole second (ages change every refresh: fractions
    are noise): 1.37 -> '1 s', 93784 -> '1 d 2 h'."""
    try:
        return in_words(round(float(seconds)))
    except (TypeError, ValueError, OverflowError):
        return in_words(seconds)
