"""delete_group (lua/delete_group.lua): a group leaves the layout and its messages are released in batches."""

import pytest

from queue_core import InvalidArgument

from .helpers import data_keys_empty, entries

pytestmark = pytest.mark.own_layout  # builds its own partitions and groups


def test_delete_group_releases_its_messages(dq):
    dq.configure_group("t", "billing")
    dq.publish_many("t", [str(i) for i in range(5)])
    dq.ack_many(dq.claim("t", 5))                  # default is done; billing holds all five
    assert entries(dq, dq.keys("t").msgs) == 5
    assert dq.delete_group("t", "billing") == 5
    assert dq.groups("t") == ["default"]
    assert data_keys_empty(dq, "t") and dq.undocumented_keys() == []
    with pytest.raises(InvalidArgument, match="no group 'billing'"):
        dq.delete_group("t", "billing")
