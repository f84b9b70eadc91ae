import re


def state_counts(html: str, topic: str | None = None) -> dict[str, int]:
    """Counts per state as rendered (overview rows or the topic page's cards)."""
    if topic is not None:
        row = re.search(rf'<tr data-topic="{re.escape(topic)}">(.*?)</tr>', html, re.S)
        assert row, f"no row for topic {topic}"
        html = row.group(1)
    found = re.findall(r'data-state="(\w+)"[^>]*>\s*(?:<a [^>]*>)?(?:<span class="n">)?(\d+)', html)
    return {state: int(n) for state, n in found}
