"""Loads the Lua scripts in lua/ and registers them with a Redis client (EVALSHA, reloaded on
NOSCRIPT by redis-py). ``--@include common`` pulls in the generated DEFAULTS and
lua/includes/common.lua."""

from functools import cache
from pathlib import Path

from .config import TopicConfig

LUA_DIR = Path(__file__).with_name("lua")
SCRIPT_NAMES = ("publish", "claim", "ack", "nack", "extend", "deliver_now", "remove", "replay",
                "replay_dead", "replay_edited", "purge", "counts", "get", "peek")


def _lua_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _defaults_table() -> str:
    fields = TopicConfig().to_fields()
    body = ", ".join(f"{k} = {_lua_literal(v)}" for k, v in sorted(fields.items()))
    return f"local DEFAULTS = {{{body}}}\n"


@cache
def source(name: str) -> str:
    text = (LUA_DIR / f"{name}.lua").read_text()
    if text.startswith("--@include common"):
        text = _defaults_table() + (LUA_DIR / "includes" / "common.lua").read_text() + text
    return text


class Scripts:
    """One registered redis-py Script per operation, named after its Lua file."""

    def __init__(self, client):
        for name in SCRIPT_NAMES:
            setattr(self, name, client.register_script(source(name)))


def is_cluster(client) -> bool:
    from redis.cluster import RedisCluster

    return isinstance(client, RedisCluster)
