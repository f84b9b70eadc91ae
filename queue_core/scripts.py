"""Loads the Lua scripts in lua/ and registers them with a Redis client (EVALSHA, reloaded on
NOSCRIPT by redis-py).

A script whose first line is ``--@include a, b`` is assembled as: a generated header, the include
files lua/includes/a.lua and b.lua with the includes they declare on their own first line (each
include after the ones it needs, in one fixed order: ``include_order()``), then the script. A
script names exactly the includes it calls: ``check_includes()`` refuses, when the scripts load,
a call into an include the file did not declare and a declared include it does not call.

A script may also carry a ``--@wraps <script>`` line: the other script's body (without its
include line) is then placed before it as ``local function <script>_script(ARGV) ... end``, with
that script's includes and keys added. schedule_tick.lua wraps publish.lua this way, so a tick is
published by publish.lua's own code (whatever it becomes) in the same atomic call that decides it.

The generated header is the one codec between Python and Lua: the return codes (errors.Code as
``CODE.<name>``), the configuration defaults, the KEYS order (keys.py), the state names
(states.py) and the held-message score base are written into every script from their Python
definitions, so neither side keeps a hand-made copy.

Each script receives only the keys it touches. ``key_usage()`` reads the script and the helpers of
its includes it calls (transitively) for ``P.<name>``, ``G.<name>`` and ``gk.<name>``; the header
then lists just those names, and the Python side passes just those keys (``_KeyPicker``). Callers
keep passing a partition's keys and one block of group keys per group, in keys.py order.
"""
import re
from functools import cache
from pathlib import Path

from .config import GroupConfig, TopicConfig
from .errors import Code
from .fingerprint import PARENT_GONE_FP
from .keys import (
    GROUP_KEY_NAMES,
    HASHTABLE_FIELD,
    HASHTABLE_VALUE,
    HELD_BASE,
    INDEX_HASH_CHARS,
    INDEX_LANES,
    LATENESS_BOUNDS_MS,
    MAX_CHILDREN,
    MEMORY_SAMPLES,
    PARTITION_KEY_NAMES,
    PRIORITY_STEP_MS,
    RECORD_OVERHEAD_BYTES,
    SEQ_BASE,
    WAITING_SCORE,
)
from .states import ALL_STATES
from .steps import cmd, pipeline

LUA_DIR = Path(__file__).with_name("lua")
SCRIPT_NAMES = ("publish", "claim", "ack", "nack", "extend", "deliver_now", "remove", "replay",
                "replay_dead", "replay_edited", "purge", "counts", "get", "peek", "layout", "delete_group",
                "release", "reschedule", "kill", "schedule_tick", "find", "search", "cancel", "report", "index", "batch",
                "due_forecast", "undo", "sweep_index")
# A time that is not there (no due time, nothing scheduled, no score) where a script answers with
# times; the callers test for a negative value. Not a refusal: those are errors.Code.
NO_TIME = -1


def _lua_literal(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def _table(fields: dict[str, str]) -> str:
    return "{" + ", ".join(f"{k} = {_lua_literal(v)}" for k, v in sorted(fields.items())) + "}"


def _list(names) -> str:
    return "{" + ", ".join(_lua_literal(n) for n in names) + "}"


_FUNCTION = re.compile(r"^local function ([A-Za-z_][A-Za-z0-9_]*)\(", re.M)
_TOP_LOCAL = re.compile(r"^local (?!function\b)([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)\s*=", re.M)
_ANY_LOCAL = re.compile(r"\blocal\s+(?:function\s+)?([A-Za-z_]\w*(?:\s*,\s*[A-Za-z_]\w*)*)")
_KEY_ACCESS = re.compile(r"\b(P|G|gk)\.([a-z_]+)|\((?:gk or G)\)\.([a-z_]+)")
_DYNAMIC_STATE = re.compile(r"\b(?:G|gk)\[")   # G[state]: any state's key
_COMMENTS = re.compile(r"--\[\[.*?\]\]|--[^\n]*", re.S)
_STRINGS = re.compile(r"'(?:\\.|[^'\\\n])*'|\"(?:\\.|[^\"\\\n])*\"")
_NAME = re.compile(r"(\.\.|[.:])?\s*\b([A-Za-z_]\w*)")   # a field (x.name, x:name) is not a name
_INCLUDE_LINE = re.compile(r"\A--@include\b[ \t]*([^\n]*)")
_CODE_NAME = re.compile(r"\bCODE\.([A-Za-z_]\w*)")
_WRAPS_LINE = re.compile(r"^--@wraps[ \t]+([a-z_]+)[ \t]*$", re.M)


def _code(text: str) -> str:
    """Lua without its comments (a word in a comment is not a call)."""
    return _COMMENTS.sub("", text)


class _Lua:
    """One Lua file, read for what the loader needs: the includes it declares (None: no
    ``--@include`` line, the file is sent as it is), the names it defines at top level, the names
    of other files it uses, and its code split into top-level code and functions."""

    def __init__(self, label: str, text: str):
        self.label, self.text = label, text
        line = _INCLUDE_LINE.match(text)
        self.declared = tuple(n.strip() for n in line.group(1).split(",") if n.strip()) if line else None
        wraps = _WRAPS_LINE.search(text)
        self.wraps = wraps.group(1) if wraps else None
        code = _code(text)
        self.top, self.functions = _split_functions(code)
        self.defines = set(self.functions)
        for m in _TOP_LOCAL.finditer(code):
            self.defines.update(n.strip() for n in m.group(1).split(","))
        bare = _STRINGS.sub("''", code)
        mine = {n.strip() for m in _ANY_LOCAL.finditer(bare) for n in m.group(1).split(",")}
        self.names = {m.group(2) for m in _NAME.finditer(bare) if m.group(1) not in (".", ":")} - mine
        self.codes = set(_CODE_NAME.findall(bare))


def _split_functions(text: str) -> tuple[str, dict[str, str]]:
    """Lua code as (the code outside functions, {function name: its text})."""
    starts = [(m.start(), m.group(1)) for m in _FUNCTION.finditer(text)]
    functions, top, last = {}, [], 0
    for i, (start, name) in enumerate(starts):
        top.append(text[last:start])
        chunk = text[start:starts[i + 1][0] if i + 1 < len(starts) else len(text)]
        first_line = chunk.split("\n", 1)[0]
        if first_line.rstrip().endswith(" end"):          # local function f() return x end
            cut = len(first_line)
        else:                                              # ends at the first "end" in column 0
            match = re.search(r"^end\b.*$", chunk, re.M)
            cut = match.end() if match else len(chunk)
        functions[name] = chunk[:cut]
        last = start + cut
    top.append(text[last:])
    return "".join(top), functions


@cache
def _script(name: str) -> _Lua:
    return _Lua(f"{name}.lua", (LUA_DIR / f"{name}.lua").read_text())


@cache
def _include(name: str) -> _Lua:
    path = LUA_DIR / "includes" / f"{name}.lua"
    if not path.is_file():
        raise ValueError(f"no include {name!r}: lua/includes/{name}.lua does not exist; "
                         "check the --@include lines that name it")
    return _Lua(f"includes/{name}.lua", path.read_text())


@cache
def _owners() -> dict[str, str]:
    """{top-level name: the include that defines it}, over every include."""
    owners: dict[str, str] = {}
    for name in sorted(p.stem for p in (LUA_DIR / "includes").glob("*.lua")):
        for defined in _include(name).defines:
            if defined in owners:
                raise ValueError(f"{defined} is defined in both includes/{owners[defined]}.lua and "
                                 f"includes/{name}.lua; keep one")
            owners[defined] = name
    return owners


@cache
def include_order() -> tuple[str, ...]:
    """Every include, each after the includes it declares; ties by name, so the order (and the
    scripts' SHAs) depend on the files only."""
    order: list[str] = []
    visiting: list[str] = []

    def visit(name: str) -> None:
        if name in order:
            return
        if name in visiting:
            raise ValueError(f"includes declare each other in a circle: {' -> '.join([*visiting, name])}")
        visiting.append(name)
        for dep in sorted(_include(name).declared or ()):
            visit(dep)
        visiting.pop()
        order.append(name)

    for name in sorted(_owners().values()):
        visit(name)
    return tuple(order)


def check_includes(label: str, text: str) -> None:
    """Raise ValueError unless the Lua file ``text`` (``label``: ``<script>.lua`` or
    ``includes/<name>.lua``) declares exactly the includes whose names it uses, and every
    ``CODE.<name>`` it uses is an errors.Code."""
    lua = _Lua(label, text)
    owners = _owners()
    own = lua.label.removeprefix("includes/").removesuffix(".lua") if lua.label.startswith("includes/") else None
    needed = {owners[n] for n in lua.names if n in owners and owners[n] != own}
    declared = set(lua.declared or ())
    missing = sorted(needed - declared)
    if missing:
        calls = sorted(n for n in lua.names if owners.get(n) in missing)
        raise ValueError(f"{lua.label} uses {', '.join(calls)} from includes it does not declare: "
                         f"add {', '.join(missing)} to its first line (--@include ...)")
    unused = sorted(declared - needed)
    if unused:
        raise ValueError(f"{lua.label} declares includes it does not use: {', '.join(unused)}; "
                         "drop them from its --@include line")
    unknown = sorted(lua.codes - {c.name for c in Code})
    if unknown:
        raise ValueError(f"{lua.label} uses CODE.{', CODE.'.join(unknown)}, which errors.Code does not define")
    if lua.codes and lua.declared is None:
        raise ValueError(f"{lua.label} uses CODE but has no --@include line, so no header")


@cache
def includes_of(name: str) -> tuple[str, ...]:
    """The includes the script ``name`` is assembled with, in load order: the ones it declares
    and, transitively, theirs."""
    closure: set[str] = set()
    todo = list(_script(name).declared or ())
    if _script(name).wraps:
        todo += includes_of(_script(name).wraps)
    while todo:
        inc = todo.pop()
        if inc not in closure:
            closure.add(inc)
            todo.extend(_include(inc).declared or ())
    return tuple(inc for inc in include_order() if inc in closure)


@cache
def _checked() -> None:
    for name in include_order():
        check_includes(_include(name).label, _include(name).text)
    for name in SCRIPT_NAMES:
        check_includes(_script(name).label, _script(name).text)


@cache
def _reached(name: str) -> tuple[tuple[str, ...], frozenset[str]]:
    """(the code the script ``name`` runs: its own, its includes' top-level code and the texts of
    the include functions it reaches; the names of those functions). Reached = named, directly or
    through another reached function (a local function can only be called by its name)."""
    script = _script(name)
    includes = [_include(inc) for inc in includes_of(name)]
    top = "".join(inc.top for inc in includes)
    functions = {f: text for inc in includes for f, text in inc.functions.items()}
    code = _code(script.text) + (_code(_script(script.wraps).text) if script.wraps else "")
    seen, texts, todo = set(), [code, top], [code, top]
    while todo:
        text = todo.pop()
        for ident in set(re.findall(r"[A-Za-z_][A-Za-z0-9_]*", text)):
            if ident in functions and ident not in seen:
                seen.add(ident)
                texts.append(functions[ident])
                todo.append(functions[ident])
    return tuple(texts), frozenset(seen)


def _prune(text: str, keep: frozenset[str]) -> str:
    """An include's text without its top-level functions that are not in ``keep``. Why: a Lua
    function holds at most 200 locals, and every ``local function`` of every include a script
    pulls in is one of its main function's locals (and is defined again on every call), while a
    script calls only some of an include's helpers."""
    spans = [(m.start(), m.group(1)) for m in _FUNCTION.finditer(text)]
    out, last = [], 0
    for i, (start, fname) in enumerate(spans):
        chunk = text[start:spans[i + 1][0] if i + 1 < len(spans) else len(text)]
        first_line = chunk.split("\n", 1)[0]
        if _code(first_line).rstrip().endswith(" end"):    # local function f() return x end
            cut = len(first_line)
        else:                                              # ends at the first "end" in column 0
            match = re.search(r"^end\b.*$", chunk, re.M)
            cut = match.end() if match else len(chunk)
        if fname not in keep:
            out.append(text[last:start])
            last = start + cut
    out.append(text[last:])
    return "".join(out)


@cache
def key_usage(name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(partition key names, group key names) the script ``name`` touches, in keys.py order."""
    script = _script(name)
    if script.declared is None:
        return PARTITION_KEY_NAMES, GROUP_KEY_NAMES
    texts, _ = _reached(name)
    used_p, used_g = set(), set()
    for text in texts:
        for m in _KEY_ACCESS.finditer(text):
            if m.group(1) == "P":
                used_p.add(m.group(2))
            else:
                used_g.add(m.group(2) or m.group(3))
        if _DYNAMIC_STATE.search(text):
            used_g.update(s.value for s in ALL_STATES)
    unknown = (used_p - set(PARTITION_KEY_NAMES)) | (used_g - set(GROUP_KEY_NAMES))
    if unknown:
        raise ValueError(f"{name}.lua uses keys keys.py does not define: {sorted(unknown)}")
    return (tuple(n for n in PARTITION_KEY_NAMES if n in used_p), tuple(n for n in GROUP_KEY_NAMES if n in used_g))


def _codes() -> str:
    return "{" + ", ".join(f"{c.name} = {c.value}" for c in Code) + "}"


def _keys_by_name(names, base: str) -> str:
    """A table constructor of KEYS by name: ``{msgs = KEYS[base + 1], ...}``. Built by a loop over
    the names, the table grew and rehashed on every call of every script (~10,000 instructions a
    call); a constructor is sized once."""
    bad = [n for n in names if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", n) or n in _LUA_RESERVED]
    if bad:
        raise ValueError(f"key names {bad} cannot be Lua table fields (keys.py)")
    return "{" + ", ".join(f"{n} = KEYS[{base}{i}]" for i, n in enumerate(names, 1)) + "}"


_LUA_RESERVED = frozenset(["and", "break", "do", "else", "elseif", "end", "false", "for", "function", "if", "in",
                           "local", "nil", "not", "or", "repeat", "return", "then", "true", "until", "while"])


def header(p_names=PARTITION_KEY_NAMES, g_names=GROUP_KEY_NAMES, body: str | None = None) -> str:
    """The generated lines every script starts with; ``body``: the rest of the script (includes and
    its own text), whose unnamed constants are left out (None: all)."""
    return (f"local CODE = {_codes()}\n"
            f"local NO_TIME = {NO_TIME}\n"
            f"local TOPIC_DEFAULTS = {_table(TopicConfig().topic_fields())}\n"
            f"local GROUP_DEFAULTS = {_table(GroupConfig().to_fields())}\n"
            # The call's keys by name (includes/base.lua says what they are): the partition's (P),
            # then whole blocks of the group keys the script touches, NGK each (group_keys).
            f"local NPK, NGK = {len(p_names)}, {len(g_names)}\n"
            f"local P = {_keys_by_name(p_names, '')}\n"
            f"local function group_keys(index)\n"
            f"  local b = NPK + (index - 1) * NGK\n"
            f"  return {_keys_by_name(g_names, 'b + ')}\n"
            f"end\n"
            f"local STATES = {_list(s.value for s in ALL_STATES)}\n"
            + _constants(body))


def _constants(body: str | None) -> str:
    """The header's constants, one ``local`` each, leaving out those ``body`` never names: a Lua
    function has at most 200 locals (claim.lua with its includes reached it before scripts kept only
    the include functions they reach: ``_prune``)."""
    values = {"HELD_BASE": HELD_BASE, "SEQ_BASE": SEQ_BASE, "WAITING_SCORE": WAITING_SCORE,
              "PARENT_GONE_FP": _lua_literal(PARENT_GONE_FP), "MAX_CHILDREN": MAX_CHILDREN,
              "MEMORY_SAMPLES": MEMORY_SAMPLES, "RECORD_OVERHEAD_BYTES": RECORD_OVERHEAD_BYTES,
              "PRIORITY_STEP_MS": PRIORITY_STEP_MS, "LATE_BOUNDS": f"{{{', '.join(map(str, LATENESS_BOUNDS_MS))}}}",
              "HASHTABLE_FIELD": _lua_literal(HASHTABLE_FIELD), "INDEX_HASH": INDEX_HASH_CHARS, "INDEX_LANES": INDEX_LANES, "HASHTABLE_VALUE": _lua_literal(HASHTABLE_VALUE)}
    return "".join(f"local {name} = {value}\n" for name, value in values.items()
                   if body is None or re.search(rf"\b{name}\b", body))


@cache
def source(name: str) -> str:
    """The script ``name`` as sent to Redis: header, includes (each after a ``-- includes/<name>.lua``
    line) and the script; raises ValueError when a file's --@include line is wrong."""
    _checked()
    script = _script(name)
    if script.declared is None:
        return script.text
    _, reached = _reached(name)
    parts = [f"-- includes/{inc}.lua\n{_prune(_include(inc).text, reached)}" for inc in includes_of(name)]
    if script.wraps:
        wrapped = _script(script.wraps).text
        inner = wrapped.split("\n", 1)[1] if _INCLUDE_LINE.match(wrapped) else wrapped
        parts.append(f"-- {script.wraps}.lua, called as a function with its own ARGV\n"
                     f"local function {script.wraps}_script(ARGV)\n{inner}\nend\n")
    body = "".join(parts) + script.text
    return header(*key_usage(name), body=body) + body


class _KeyPicker:
    """Calls a registered script with only the keys it touches, taken from the full list the
    caller passes (a partition's keys, then one block of group keys per group)."""

    def __init__(self, name: str, script):
        self.name, self.script = name, script
        used_p, used_g = key_usage(name)
        self.full = (used_p, used_g) == (PARTITION_KEY_NAMES, GROUP_KEY_NAMES)
        self.p_index = [PARTITION_KEY_NAMES.index(n) for n in used_p]
        self.g_index = [GROUP_KEY_NAMES.index(n) for n in used_g]
        # A holding area (undo, lua/includes/hold.lua) may follow the group's block as one more key.
        self.trailing = "hold_open()" in source(name)

    def pick(self, keys: list[str]) -> list[str]:
        if self.full:
            return keys
        np_, ng = len(PARTITION_KEY_NAMES), len(GROUP_KEY_NAMES)
        blocks, rest = divmod(len(keys) - np_, ng)
        extra = keys[-1:] if rest == 1 and self.trailing else []
        if (rest and not extra) or blocks < 0:
            raise ValueError(f"{self.name}: expected a partition's keys and whole blocks of group keys, "
                             f"got {len(keys)} keys")
        picked = [keys[i] for i in self.p_index]
        for b in range(blocks):
            base = np_ + b * ng
            picked += [keys[base + j] for j in self.g_index]
        return picked + extra

    def __call__(self, keys=None, args=None, client=None):
        return self.script(keys=self.pick(list(keys or [])), args=args, client=client)

    def add_to(self, pipe, keys, args) -> None:
        """Queue a call in ``pipe`` by SHA only: redis-py's pipelines spend a SCRIPT EXISTS round
        trip per execute on registered scripts. ``run_pipeline`` handles NOSCRIPT."""
        picked = self.pick(list(keys))
        pipe.evalsha(self.script.sha, len(picked), *picked, *args)


def pipeline_steps(fill, scripts: list):
    """Steps (queue_core.steps) that build a pipeline with ``fill(pipe)`` and run it. When every
    call of ``scripts`` (the _KeyPickers it queued) answers NOSCRIPT (a restarted or newly
    promoted server that has not seen them), nothing of theirs ran: load them and run the
    pipeline once more."""
    from redis.exceptions import NoScriptError

    for attempt in range(2):
        replies = yield pipeline(fill, raise_on_error=False)
        missing = [r for r in replies if isinstance(r, NoScriptError)]
        if missing and attempt == 0 and len(missing) == len(scripts):
            for picker in {id(p): p for p in scripts}.values():
                picker.script.sha = yield cmd("script_load", picker.script.script)
            continue
        for reply in replies:
            if isinstance(reply, Exception):
                raise reply
        return replies
    raise AssertionError("unreachable")


class Scripts:
    """One registered redis-py Script per operation, named after its Lua file, made at its first
    use: assembling a script's source (its includes, pruned) takes a few ms to tens of ms, all 29
    ~0.2-0.4 s of a process's start, and a command line call or a web request uses a few. Every
    file's include lines are checked here, so a wrong one fails when the queue is made, not at
    the first call of its script."""

    def __init__(self, client):
        _checked()
        self._client = client

    def __getattr__(self, name: str) -> "_KeyPicker":
        if name not in _SCRIPT_NAME_SET:
            raise AttributeError(f"{type(self).__name__!r} object has no attribute {name!r}", name=name, obj=self)
        picker = _KeyPicker(name, self._client.register_script(source(name)))
        setattr(self, name, picker)   # later uses find it without this call (two threads: the same script twice)
        return picker

    def __dir__(self):
        return sorted({*super().__dir__(), *SCRIPT_NAMES})


_SCRIPT_NAME_SET = frozenset(SCRIPT_NAMES)


def is_cluster(client) -> bool:
    from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    from redis.cluster import RedisCluster

    return isinstance(client, (RedisCluster, AsyncRedisCluster))
