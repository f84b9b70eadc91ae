import re


def state_counts(html: str, topic: str | None = None, group: str | None = None) -> dict[str, int]:
    """Counts per state as rendered: an overview row (a topic's totals, or with ``group`` its
    group's row) or the topic page's cards."""
    if topic is not None:
        t = re.escape(topic)
        pattern = (rf'<tr class="group-row" data-topic="{t}" data-group="{re.escape(group)}">(.*?)</tr>' if group
                   else rf'<tr data-topic="{t}" class="topic-row">(.*?)</tr>')
        row = re.search(pattern, html, re.S)
        assert row, f"no row for topic {topic}" + (f" group {group}" if group else "")
        html = row.group(1)
    found = re.findall(r'data-state="(\w+)"[^>]*>\s*(?:<a [^>]*>)?(?:<span class="n">)?(\d+)', html)
    return {state: int(n) for state, n in found}
