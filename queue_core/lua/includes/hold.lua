--@include base, dedup, dispatch, held, ordering, record, waiting
--[[
  hold: holding areas for undo (issue #38 point 5). A destructive call (purge, remove, cancel,
  kill) given one more KEY after the group's block copies each message it is about to destroy (or
  kill) into that key, a HASH of this partition and group (same hash tag: no script spans
  partitions):
    "~meta"   "<until ms>|<max messages>|<max bytes>|<messages>|<bytes>|<not held>", written by
              engine/undo.py when the operation opens it (the key expires at <until>)
    <id>      cmsgpack {s = state, sc = score, d = due ms, r = record, a = attempts, i = info,
              t = traceback, x = TTL end, dp = dispatch, dk = dedup window,
              bt = batch, db = debounce mark, q = its place in its ordering key's line (the active
              one of an ordered key), k = 1 for a kill} : everything lua/undo.lua needs
    "~unheld" messages destroyed without a copy because Redis was full when the operation opened
              the area (engine/undo.py counts them there; the script never could)
    "~ix"     the indexed fields ready at every call that held messages here (JSON [slot, ...]): each
              message held has those fields' entries in the index log, and the sweeps keep them;
              undo lists the others before it puts messages back (engine/index.py _index_held)
  Past the caps a message is destroyed as without a hold and counted in <not held>: a purge is
  often what frees memory, so it must not be refused because its copy would not fit. So too when
  Redis refuses the copy (maxmemory under noeviction): that message and the rest of the call go
  without one, and count as not held.
]]

local HOLD_META = '~meta'
local HOLD_IX = '~ix'
local HOLD = nil   -- {key, until, max_n, max_b, n, b, unheld, moved, full, ix} once hold_open() found the area
-- Bytes one call copies at most: a copy of a 1 MB payload costs milliseconds, and Redis does
-- nothing else meanwhile. The purge stops its batch there (hold_spent()); the caller goes on.
local HOLD_CALL_BYTES = 2 * 1024 * 1024

-- The holding area of this call, or nil (no hold key passed, or it expired before the call).
local function hold_open()
  local key = KEYS[NPK + NGK + 1]
  if not key then return nil end
  local fields = redis.call('HMGET', key, HOLD_META, HOLD_IX)
  local raw = fields[1]
  if not raw then return nil end
  local u, mn, mb, n, b, un = string.match(raw, '^(%d+)|(%d+)|(%d+)|(%d+)|(%d+)|(%d+)$')
  HOLD = {key = key, ['until'] = tonumber(u), max_n = tonumber(mn), max_b = tonumber(mb), n = tonumber(n),
    b = tonumber(b), unheld = tonumber(un), moved = 0, full = false, ix = fields[2]}
  return HOLD
end

-- The slots in both JSON lists of slots ('[1,3]'), as such a list; a list that is missing or
-- not one holds none.
local function hold_ix_common(a, b)
  local in_b = {}
  for slot in string.gmatch(b or '', '%d+') do in_b[slot] = true end
  local both = {}
  for slot in string.gmatch(a or '', '%d+') do if in_b[slot] then both[#both + 1] = slot end end
  return '[' .. table.concat(both, ',') .. ']'
end

local function hold_save()
  if not HOLD then return end
  if HOLD.moved > 0 then
    -- The fields ready now, and at every earlier call that held messages here ("~ix").
    local ready = redis.call('HGET', P.config, 'index_ready') or '[]'
    local ix = hold_ix_common(HOLD.ix or ready, ready)
    if ix ~= HOLD.ix then redis.pcall('HSET', HOLD.key, HOLD_IX, ix); HOLD.ix = ix end
  end
  -- pcall: under maxmemory a script that has written nothing yet is refused even this
  redis.pcall('HSET', HOLD.key, HOLD_META, table.concat({HOLD['until'], HOLD.max_n, HOLD.max_b, HOLD.n, HOLD.b,
    HOLD.unheld}, '|'))
  usage_held(HOLD.key, HOLD.n, HOLD.b, now_ms())   -- counted in the memory budget (held.lua)
end

-- The partition's dispatch and batch hashes are empty in most topics: one EXISTS per call
-- is cheaper than a read per message. Only these: no removal script adds to them (it may take
-- from them, which costs one read), whereas a group's info or attempts may gain a field in the
-- same call (a chained child made a dead letter when its parent goes).
local HOLD_EMPTY = {}
local function hold_empty(key)
  if HOLD_EMPTY[key] == nil then HOLD_EMPTY[key] = redis.call('EXISTS', key) == 0 end
  return HOLD_EMPTY[key]
end

local function hold_field(key, id)
  if hold_empty(key) then return false end
  return redis.call('HGET', key, id)
end

-- The place in `okey`'s line of its active message `id`, as the hold path last wrote it:
-- active["\1<key>"] = "<id>|<sequence>" (no ordering key has a control byte). It is valid only
-- while <id> is still the key's active message; a field naming another one is stale and ignored,
-- so publish, claim and ack never clear it; promote_key writes it in the HSET that passes the key.
-- A place below 0 (written before SEQ_BASE, keys.py) reads as 0: a waiting member has no sign.
local function line_place(gk, okey, id)
  local who, seq = string.match(redis.call('HGET', gk.active, '\1' .. okey) or '', '^(.*)|(%-?%d+)$')
  return who == id and math.max(tonumber(seq), 0) or nil
end

-- Whether place (seq_a, id_a) comes before (seq_b, id_b) in a line: by place, then id in the
-- ZSET's byte order (Lua's < on strings follows the server's locale, strcoll).
local function place_before(seq_a, id_a, seq_b, id_b)
  if seq_a ~= seq_b then return seq_a < seq_b end
  for i = 1, math.min(#id_a, #id_b) do
    local x, y = string.byte(id_a, i), string.byte(id_b, i)
    if x ~= y then return x < y end
  end
  return #id_a < #id_b
end

-- Copies message `id` (in `state` of group gk) into the holding area before the caller destroys
-- it; `kill`: the caller makes it a dead letter instead (undo moves it back to retrying).
local function hold_take(gk, id, state, ts, kill)
  if not HOLD then return end
  local sc = redis.call('ZSCORE', gk[state], id)
  local r = redis.call('HGET', P.msgs, id)
  local h = parse_header(r)
  local due = sc
  if state == 'ready' then
    due = ready_due(sc)
  elseif state == 'unacked' then
    due = tostring(ts)   -- no worker holds it any more: it comes back due at once
  elseif state == 'pending' and tonumber(sc) >= 2 * HELD_BASE then
    due = tostring(ts)   -- a chained child: its link to the parent is gone (docs/design.md)
  elseif state == 'pending' and tonumber(sc) >= HELD_BASE and h then
    -- its own entry in the line (found by its id too: another may wait at the same place)
    local _, d = waiting_find(gk, h.okey, tonumber(sc) - HELD_BASE, id)
    due = d or tostring(ts)
  end
  local rec = {s = state, sc = sc, d = due, r = r, a = redis.call('HGET', gk.att, id),
    i = redis.call('HGET', gk.info, id), t = redis.call('HGET', gk.tracebacks, id),
    x = redis.call('ZSCORE', gk.expiry, id), dp = hold_field(P.dispatch, id),
    bt = hold_field(P.batch_of, id), k = kill and 1 or nil}
  -- An ordered message: keep the places undo needs (lua/undo.lua). The active message of a key
  -- lost its sequence when it became active, so the hold path records one (line_place):
  --   a held follower goes: the active one's place is before the first still waiting, a floor
  --     kept as the minimum whatever the order and calls the followers go in;
  --   the active one goes: rec.q = its recorded place, else one before the first still waiting,
  --     else a fresh sequence (nothing of its line waits, and none of its followers went with a
  --     hold, or they would have recorded its place: every message of the key with a sequence
  --     came before it, and whatever comes later is published after this); the removal then
  --     promotes the first waiting (release_key), and promote_key records that one's place, its
  --     own sequence.
  -- A place "one before the first" may be another message's own sequence (a follower held
  -- earlier): the two are told apart by id in the line (ordering.lua's waiting_member).
  local okey = h and h.okey ~= '' and h.okey
  local holder = okey and redis.call('HGET', gk.active, okey)
  if holder then
    local first = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. okey .. '\0', '(' .. okey .. '\1', 'LIMIT', 0, 1)[1]
    local seq, _, first_id
    if first then seq, _, first_id = waiting_parts(okey, first); seq = tonumber(seq) end
    if holder == id then
      rec.q = line_place(gk, okey, id) or seq and seq - 1
        or SEQ_BASE + redis.call('HINCRBY', gk.stats, 'oseq', 1)
    elseif seq and state == 'pending' and tonumber(sc) >= HELD_BASE and tonumber(sc) < 2 * HELD_BASE then
      local place = line_place(gk, okey, holder)
      -- %d: Lua's own number to string (%.14g) would round a place of 15 digits
      if not place or not place_before(place, holder, seq, first_id) then redis.call('HSET', gk.active, '\1' .. okey, holder .. '|' .. string.format('%d', seq - 1)) end
    end
  end
  if h and h.key ~= '' then
    rec.dk = redis.call('ZSCORE', P.dedup_until, h.key)
    rec.db = redis.call('ZSCORE', P.dedup_until, DEBOUNCE_MARK .. h.key)
  end
  local blob = cmsgpack.pack(rec)
  local size = #blob + #id
  HOLD.moved = HOLD.moved + size
  if HOLD.full or HOLD.n + 1 > HOLD.max_n or HOLD.b + size > HOLD.max_b then
    HOLD.unheld = HOLD.unheld + 1
    return
  end
  local wrote = redis.pcall('HSET', HOLD.key, id, blob)
  if type(wrote) == 'table' and wrote.err then
    -- Redis is full (OOM): the removal never fails for its copy; the rest of the call goes without
    HOLD.full = true
    HOLD.unheld = HOLD.unheld + 1
    return
  end
  HOLD.n, HOLD.b = HOLD.n + 1, HOLD.b + size
end

-- The call has copied HOLD_CALL_BYTES: a batch loop stops here and says so to its caller.
local function hold_spent()
  return HOLD ~= nil and HOLD.moved >= HOLD_CALL_BYTES
end
