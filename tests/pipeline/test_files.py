"""Which archive files the job de-duplicates: read off the names the archiver gives them."""

import pytest

from delayq_analytics.archiver import entry_of, event_id
from delayq_analytics.files import (
    entry_range,
    file_name,
    folder_partition,
    overlapping,
    overlapping_by_partition,
)

ROOT = "file:///var/archive"
ORDERS = f"{ROOT}/date=2026-11-16/topic=orders"


def part(folder, partition, first, last):
    return f"{folder}/{file_name(partition, first, last)}"


def test_names_carry_partition_and_entry_range():
    name = file_name(3, "1794787200000-0", "1794787260000-12")
    assert name == "part-p3-1794787200000-0_1794787260000-12.parquet"
    assert entry_range(name) == (3, (1794787200000, 0), (1794787260000, 12))
    # An older archiver's name (first entry only) and a hand-made copy say no range.
    assert entry_range("part-p0-1794787200000-0.parquet") is None
    assert entry_range("part-copy-of-a-batch.parquet") is None
    # An archived event's id names its entry, which file names are made of.
    assert entry_of(event_id(3, "1794787200000-12", 7)) == "1794787200000-12"


def test_consecutive_batches_do_not_overlap():
    files = [part(ORDERS, 0, "100-0", "100-9"), part(ORDERS, 0, "100-10", "250-3"), part(ORDERS, 0, "251-0", "900-0")]
    assert overlapping(files) == set()


def test_entry_ids_compare_as_numbers_not_text():
    # As text "100-10" < "100-9"; as entry ids 100-9 comes first, so these two do not overlap.
    assert overlapping([part(ORDERS, 0, "100-0", "100-9"), part(ORDERS, 0, "100-10", "100-20")]) == set()


@pytest.mark.parametrize("other", [("100-0", "100-4"), ("100-5", "300-0"), ("200-0", "200-0"), ("50-0", "100-0")])
def test_a_batch_written_again_differently_overlaps_the_first_file(other):
    first, again = part(ORDERS, 0, "100-0", "200-0"), part(ORDERS, 0, *other)
    clean = part(ORDERS, 0, "300-1", "400-0")
    assert overlapping([first, clean, again]) == {first, again}


def test_a_long_file_overlapping_later_ones_marks_them_all():
    wide, inside_1, inside_2 = part(ORDERS, 0, "1-0", "100-0"), part(ORDERS, 0, "10-0", "20-0"), part(ORDERS, 0, "50-0", "60-0")
    assert overlapping([inside_2, wide, inside_1, part(ORDERS, 0, "101-0", "102-0")]) == {wide, inside_1, inside_2}


def test_ranges_are_compared_within_one_partition_and_one_folder():
    other_day = f"{ROOT}/date=2026-11-17/topic=orders"
    other_topic = f"{ROOT}/date=2026-11-16/topic=emails"
    files = [part(ORDERS, 0, "1-0", "100-0"), part(ORDERS, 1, "1-0", "100-0"),
             part(other_day, 0, "1-0", "100-0"), part(other_topic, 0, "1-0", "100-0")]
    assert overlapping(files) == set()


def test_a_name_without_a_range_makes_its_whole_folder_suspect():
    copy, batch = f"{ORDERS}/part-copy-of-a-batch.parquet", part(ORDERS, 0, "1-0", "100-0")
    elsewhere = part(f"{ROOT}/date=2026-11-17/topic=orders", 0, "1-0", "100-0")
    assert overlapping([copy, batch, elsewhere]) == {copy, batch}
    assert overlapping([copy]) == set()          # alone in its folder: nothing to repeat


def test_partition_values_come_from_spark_listing_escaped_twice():
    # Hive escapes ':' as %3A in the folder name; Spark lists that '%' escaped again as %25.
    assert folder_partition(f"{ROOT}/date=2026-11-16/topic=emails%253Aeu") == ("2026-11-16", "emails:eu")
    assert folder_partition("file:///elsewhere/orders") is None
    mails = f"{ROOT}/date=2026-11-16/topic=emails%253Aeu"
    a, b = part(mails, 0, "1-0", "9-0"), part(mails, 0, "5-0", "6-0")
    assert overlapping_by_partition([a, b]) == {("2026-11-16", "emails:eu"): {a.rpartition("/")[2],
                                                                            b.rpartition("/")[2]}}
    # Overlapping files outside the date/topic layout cannot be told apart by partition: None,
    # and the job then de-duplicates every event.
    assert overlapping_by_partition(["file:///x/part-a.parquet", "file:///x/part-b.parquet"]) is None
    assert overlapping_by_partition([a, part(mails, 0, "10-0", "11-0")]) == {}


def test_the_job_deduplicates_everything_or_nothing_when_names_say_so():
    from delayq_analytics.run import repeat_filter

    assert repeat_filter([part(ORDERS, 0, "1-0", "9-0"), part(ORDERS, 0, "10-0", "20-0")]) is False
    assert repeat_filter(["file:///x/part-a.parquet", "file:///x/part-b.parquet"]) is True
