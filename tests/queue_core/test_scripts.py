"""The script loader (queue_core/scripts.py). The return codes every script answers with come from
the Python error map through the generated header, so a code cannot mean one thing in Lua and
another in Python; each script is assembled with the includes it names and no others, and a
script that calls into an include it did not name fails when the scripts load."""

import re
import shutil
from pathlib import Path

import pytest
import redis

from queue_core import scripts
from queue_core.errors import Code
from queue_core.scripts import SCRIPT_NAMES, check_includes, header, source

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



def declared(text: str) -> list[str]:
    """The includes a Lua file names on its first line (read here without the loader)."""
    first = text.split("\n", 1)[0]
    assert first.startswith("--@include"), first
    return [n.strip() for n in first.removeprefix("--@include").split(",") if n.strip()]


def include_closure(names: list[str]) -> set[str]:
    seen, todo = set(), list(names)
    while todo:
        name = todo.pop()
        if name not in seen:
            seen.add(name)
            path = LUA_DIR / "includes" / f"{name}.lua"
            first = path.read_text().split("\n", 1)[0]
            todo += declared(first) if first.startswith("--@include") else []
    return seen


def test_each_script_is_assembled_with_only_the_includes_it_declares():
    """Its own includes and theirs, each once and after the ones it needs; no other include's
    functions are in the source Redis gets."""
    functions = {path.stem: re.findall(r"^local function (\w+)\(", path.read_text(), re.M)
                 for path in (LUA_DIR / "includes").glob("*.lua")}
    for name in SCRIPT_NAMES:
        text = (LUA_DIR / f"{name}.lua").read_text()
        assembled = source(name)
        if not text.startswith("--@include"):
            assert assembled == text, name
            continue
        wanted = include_closure(declared(text))
        wraps = re.search(r"^--@wraps (\w+)$", text, re.M)
        if wraps:   # the wrapped script's includes come along (scripts.py)
            wanted |= include_closure(declared((LUA_DIR / f"{wraps.group(1)}.lua").read_text()))
        markers = re.findall(r"^-- includes/(\w+)\.lua$", assembled, re.M)
        assert sorted(markers) == sorted(wanted), name
        for position, inc in enumerate(markers):
            inc_text = (LUA_DIR / "includes" / f"{inc}.lua").read_text()
            deps = declared(inc_text) if inc_text.startswith("--@include") else []
            assert set(deps) <= set(markers[:position]), (name, inc, deps)
        for other in set(functions) - wanted:
            for function in functions[other]:
                assert f"local function {function}(" not in assembled, (name, other, function)
    assert declared((LUA_DIR / "extend.lua").read_text()) == ["base", "cancels", "lease"]


def test_the_header_declares_only_the_constants_a_script_names():
    """A Lua function has at most 200 locals (claim.lua is at it): a constant no part of a script
    names is left out of its header; one it names, SEQ_BASE in ordering.lua's hold(), is in."""
    assert "local SEQ_BASE = " not in header(body="return HELD_BASE")
    assert "local HELD_BASE = " in header(body="return HELD_BASE")
    assert "local SEQ_BASE = 100000000000000\n" in source("claim")   # includes ordering.lua
    assert "local MEMORY_SAMPLES" not in source("claim")
    assert "local SEQ_BASE" not in source("get")
    always = {"CODE", "NO_TIME", "TOPIC_DEFAULTS", "GROUP_DEFAULTS", "P", "STATES"}
    assert set(re.findall(r"^local ([A-Z_]+) = ", header(body=""), re.M)) == always


def test_a_wrapping_script_carries_the_wrapped_body_verbatim():
    """schedule_tick.lua publishes through publish.lua's own body (a function with its own ARGV),
    so a change to publish.lua reaches scheduled ticks without a copy to keep in step."""
    body = (LUA_DIR / "publish.lua").read_text().split("\n", 1)[1]
    assembled = source("schedule_tick")
    assert f"local function publish_script(ARGV)\n{body}\nend\n" in assembled
    assert assembled.index("local function publish_script") < assembled.index("local name, mode = ARGV[1], ARGV[2]")


def test_the_check_refuses_a_call_into_an_include_not_declared():
    with pytest.raises(ValueError, match=r"bad\.lua uses fail from includes it does not declare: add fail"):
        check_includes("bad.lua", "--@include base\nreturn fail(G, 1)")
    with pytest.raises(ValueError, match="uses G from includes it does not declare: add base"):
        check_includes("includes/bad.lua", "local function f() return G.ready end")


def test_the_check_refuses_an_include_declared_and_not_used():
    with pytest.raises(ValueError, match="declares includes it does not use: signal"):
        check_includes("bad.lua", "--@include base, signal\nreturn redis.call('ZCARD', G.ready)")


def test_the_check_refuses_a_code_the_error_map_lacks():
    with pytest.raises(ValueError, match="CODE.LEASE_GONE, which errors.Code does not define"):
        check_includes("bad.lua", "--@include\nreturn {CODE.LEASE_GONE}")


def test_names_in_comments_strings_and_fields_are_not_calls():
    check_includes("good.lua", "--@include base\n-- fail() is not called here\n"
                               "return {G.ready, 'fail', ARGV.signal_workers, now_ms()}")


def test_a_wrong_include_line_fails_when_the_scripts_load(tmp_path, monkeypatch):
    """Not at the first call of the script in production: constructing the queue's Scripts fails."""
    lua = tmp_path / "lua"
    shutil.copytree(LUA_DIR, lua)
    ack = lua / "ack.lua"
    ack.write_text(ack.read_text().replace(", signal\n", "\n", 1))
    monkeypatch.setattr(scripts, "LUA_DIR", lua)
    clear_loader_caches()
    try:
        with pytest.raises(ValueError, match="ack.lua uses signal_workers .* add signal"):
            scripts.Scripts(redis.Redis())
    finally:
        monkeypatch.undo()
        clear_loader_caches()
    assert scripts.source("ack").count("-- includes/signal.lua\n") == 1


def clear_loader_caches() -> None:
    for value in vars(scripts).values():
        if callable(getattr(value, "cache_clear", None)):
            value.cache_clear()


def test_a_script_is_registered_at_its_first_use_and_kept():
    """A process registers only the scripts it calls (a command line call uses a few of them);
    a name that is no script is an AttributeError, as on any object."""
    made = scripts.Scripts(redis.Redis())
    assert not set(vars(made)) & set(SCRIPT_NAMES)
    claim = made.claim
    assert claim.name == "claim" and made.claim is claim and set(vars(made)) & set(SCRIPT_NAMES) == {"claim"}
    with pytest.raises(AttributeError, match="no attribute 'claimm'"):
        getattr(made, "claimm")  # noqa: B009 - the attribute lookup is the point
