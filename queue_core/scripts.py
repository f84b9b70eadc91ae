"""Loads the Lua scripts in lua/ and registers them with a Redis client (EVALSHA, reloaded on
NOSCRIPT by redis-py). ``--@include common`` pulls in a generated header and
lua/includes/common.lua.

The generated header is the one codec between Python and Lua: the configuration defaults, the
KEYS order (keys.py), the state names (states.py) and the held-message score base are written
into every script from their Python definitions, so neither side keeps a hand-made copy.
"""

from functools import cache
from pathlib import Path

from .config import GroupConfig, TopicConfig
from .keys import GROUP_KEY_NAMES, HASHTABLE_FIELD, HASHTABLE_VALUE, HELD_BASE, PARTITION_KEY_NAMES
from .states import ALL_STATES

LUA_DIR = Path(__file__).with_name("lua")
SCRIPT_NAMES = ("publish", "claim", "ack", "nack", "extend", "deliver_now", "remove", "replay",
                "replay_dead", "replay_edited", "purge", "counts", "get", "peek", "layout", "delete_group",
                "release")


def _lua_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _table(fields: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k} = {_lua_literal(v)}" for k, v in sorted(fields.items())) + "}"


def _list(names) -> str:
    return "{" + ", ".join(_lua_literal(n) for n in names) + "}"


def header() -> str:
    return (f"local TOPIC_DEFAULTS = {_table(TopicConfig().topic_fields())}\n"
            f"local GROUP_DEFAULTS = {_table(GroupConfig().to_fields())}\n"
            f"local PK_NAMES = {_list(PARTITION_KEY_NAMES)}\n"
            f"local GK_NAMES = {_list(GROUP_KEY_NAMES)}\n"
            f"local STATES = {_list(s.value for s in ALL_STATES)}\n"
            f"local HELD_BASE = {HELD_BASE}\n"
            f"local HASHTABLE_FIELD, HASHTABLE_VALUE = {_lua_literal(HASHTABLE_FIELD)}, {_lua_literal(HASHTABLE_VALUE)}\n")


@cache
def source(name: str) -> str:
    text = (LUA_DIR / f"{name}.lua").read_text()
    if text.startswith("--@include common"):
        text = header() + (LUA_DIR / "includes" / "common.lua").read_text() + text
    return text


class Scripts:
    """One registered redis-py Script per operation, named after its Lua file."""

    def __init__(self, client):
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(source(name)))


def is_cluster(client) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)
