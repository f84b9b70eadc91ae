"""Time arguments of the job and of the dashboard's commands; needs neither Spark nor pyarrow."""

import argparse
from datetime import UTC, datetime


def parse_time(text: str) -> datetime:
    """ISO 8601 date or date-time; without an offset it means UTC."""
    try:
        value = datetime.fromisoformat(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an ISO 8601 date or time (e.g. 2026-11-01 or "
                                         f"2026-11-01T12:00:00+00:00)") from None
    return value if value.tzinfo else value.replace(tzinfo=UTC)
