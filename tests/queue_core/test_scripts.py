"""The script loader (queue_core/scripts.py): the return codes every script answers with come from
the Python error map through the generated header, so a code cannot mean one thing in Lua and
another in Python."""

import re
from pathlib import Path

import redis

from queue_core.errors import Code
from queue_core.scripts import header

LUA_DIR = Path(__file__).resolve().parents[2] / "queue_core" / "lua"
LUA_FILES = sorted(LUA_DIR.rglob("*.lua"))
_COMMENTS = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)
# The shapes a refusal code takes in the scripts: returned, first in a reply table, stored in an
# answer list, chosen by and/or, assigned, or a further return value. Arguments of redis.call
# (HINCRBY ... -1, LTRIM ... -1) are not codes and have none of these shapes.
_LITERAL_CODE = re.compile(r"\breturn\s+-\s*\d|\{\s*-\s*\d|\]\s*=\s*-\s*\d|\b(?:and|or)\s+-\s*\d"
                           r"|(?<![=<>~])=\s*-\s*\d|\breturn\b[^\n]*,\s*-\s*\d")


def literal_codes(lua: str) -> list[str]:
    code = _COMMENTS.sub("", lua)
    return [line.strip() for line in code.splitlines() if _LITERAL_CODE.search(line)]


def test_the_header_carries_every_code_of_the_error_map(engine_url):
    """Read back through a real server: the header is valid Lua and CODE.<name> is the enum's value."""
    names = [c.name for c in Code]
    client = redis.Redis.from_url(engine_url)
    try:
        values = client.eval(header() + "local out = {}\nfor i, n in ipairs(ARGV) do out[i] = CODE[n] end\n"
                             "return out", 0, *names)
    finally:
        client.close()
    assert dict(zip(names, values, strict=True)) == {c.name: c.value for c in Code}


def test_scripts_name_their_codes_instead_of_writing_literals():
    found = {path.relative_to(LUA_DIR).as_posix(): literal_codes(path.read_text()) for path in LUA_FILES}
    assert {name: lines for name, lines in found.items() if lines} == {}
    used = {m for path in LUA_FILES for m in re.findall(r"\bCODE\.([A-Za-z_]+)", _COMMENTS.sub("", path.read_text()))}
    assert used and used <= {c.name for c in Code}, used - {c.name for c in Code}


def test_the_literal_code_check_sees_every_shape_the_scripts_used():
    """The shapes the scripts wrote before the codes had names; each must be caught."""
    for line in ("out[j] = -3", "out[#out + 1] = -4", "return {-7, layout}", "return -5",
                 "return {redis.call('HEXISTS', P.msgs, id) == 1 and -5 or -4}", "local code = -3",
                 "return 'dead', -1", "out[#out + 1] = -3; out[#out + 1] = -1"):
        assert literal_codes(line), line
    for line in ("redis.call('HINCRBY', P.refs, id, -1)", "redis.call('LTRIM', gk.signal, -SIGNAL_MAX, -1)",
                 "if redis.call('HINCRBY', gk.fp_count, fp, -1) <= 0 then", "out[j] = CODE.LEASE_LOST",
                 "-- Returns -3 when the lease is lost"):
        assert not literal_codes(line), line

