--@include base, batch, config, dead, dedup, dispatch, events, held, hold, info, ordering, record, signal, state, usage
--[[
  undo: put back up to ARGV[2] messages of one holding area (includes/hold.lua) in the state they
  left. Backs DelayQueue.undo(), which walks the area with HSCAN's cursor, so Redis is never blocked
  by a large undo. A message put back leaves the area in the same call, so an undo run twice (or
  resumed after a crash) puts nothing back twice.

  KEYS: the partition's keys, the group's keys, then the holding area.
  ARGV[1] HSCAN cursor   ARGV[2] count   ARGV[3] actor   ARGV[4] group   ARGV[5] operation (for the history)

  Not put back, reported, and kept in the area until it expires:
    'present'   the id is in the group again (it came back another way)
    'key'       its dedup key is held by another message now (its id follows)
    'not dead'  a killed message is no longer dead (replayed or deleted since)

  Each call reads at most ARGV[2] messages or HELD_CALL_BYTES of held records (whichever comes
  first; HSCAN one bucket at a time), so an area of large payloads takes more, shorter calls.

  Returns {next cursor, restored, {id, reason, ...}}, or {'expired'} when the area is gone.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local cursor, count, actor, group, op = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
if not hold_open() then return {'expired'} end
local H = HOLD.key

local function opt(v) if v == false then return nil end return v end

-- A dead letter back in its error group (its counters for the dashboard's error groups).
local function reindex_dead(info, id, sc)
  redis.call('ZADD', G.dead, sc, id)
  if not (info and info.da) then return end
  local fp = fp_of(info)
  redis.call('ZADD', G.fp_index, 0, fp_member(fp, info.da, id))
  redis.call('HINCRBY', G.fp_count, fp, 1)
  -- first and last seen span the letters put back, whichever order the scan met them in
  local raw = redis.call('HGET', G.fp_info, fp)
  local fpi = raw and cjson.decode(raw)
  if not fpi then
    fpi = {first_seen = info.da, last_seen = info.da, sample = id, t = info.err and info.err.t or '',
      m = info.err and info.err.m or ''}
  else
    fpi.first_seen = math.min(tonumber(fpi.first_seen) or info.da, info.da)
    fpi.last_seen = math.max(tonumber(fpi.last_seen) or info.da, info.da)
  end
  redis.call('HSET', G.fp_info, fp, cjson.encode(fpi))
end

-- Ordering keys given back a message in this call: one whose line has no active message gets
-- its first one promoted at the end of the call (promote_key), as release_key would.
local lines = {}

-- Not dead: where its state puts it. In an ordered group it goes back to its place in its key's
-- line: a held one under the sequence it had (publish order), one that was active (it may have
-- been promoted while its predecessors were removed) at the place hold_take gave it (rec.q);
-- the end of the call promotes the first of a line without an active message. One that still
-- holds its key (a kill in a group with hold_key_on_dead keeps the key for its dead letter; no
-- other removal does, so only kills cost the HGET) goes straight back to its state, still active:
-- in the line too, it would wait behind itself.
-- A place below 0 (a record written before SEQ_BASE, keys.py) is put at 0, the line's front: a
-- waiting member has no sign, and the message loses nothing but its order among such places.
local function place(id, rec, okey)
  local sc = tonumber(rec.sc) or 0
  local was_held = rec.s == 'pending' and sc >= HELD_BASE and sc < 2 * HELD_BASE
  -- A killed message whose dead letter still holds its key (hold_key_on_dead when it was killed:
  -- the group's setting now may differ) goes back holding it, out of the line.
  local own_key = rec.k == 1 and okey ~= '' and redis.call('HGET', G.active, okey) == id
  if gcfg.ordered == '1' and okey ~= '' and not own_key then
    local seq = math.max(was_held and sc - HELD_BASE or tonumber(rec.q) or SEQ_BASE, 0)
    redis.call('ZADD', G.pending, HELD_BASE + seq, id)
    redis.call('ZADD', G.waiting, 0, waiting_member(okey, seq, tonumber(rec.d), id))
    lines[okey] = true
  elseif rec.s == 'retrying' then
    redis.call('ZADD', G.retrying, rec.sc, id)
  elseif tonumber(rec.d) <= ts then
    to_ready(G, {id}, {rec.d})
  else
    redis.call('ZADD', G.pending, rec.d, id)
  end
end

-- A line with no active message gets its first one promoted, as release_key would. HSCAN order
-- is not publish order, and the removal may have passed the key on to a follower (or an earlier
-- call of this undo promoted one): an active message no worker has claimed yet whose recorded
-- place (hold.lua's line_place, valid only for it) comes after the first one waiting waits again
-- there (so too one that took the free key by a publish once a later follower's removal recorded
-- a place for it), and the first is promoted (promote_key records its place). An active message
-- without a valid place (it took a free key by a publish: claim_key records none) keeps the key:
-- the line moved on, and what comes back waits behind it. True when one was promoted.
-- Places tie only by id (ordering.lua's waiting_member): the holder at the first one's place
-- waits again only if its id comes after the first one's, as it would have in the line.
local function settle_line(okey)
  local first = redis.call('ZRANGEBYLEX', G.waiting, '[' .. okey .. '\0', '(' .. okey .. '\1', 'LIMIT', 0, 1)[1]
  if not first then return false end
  local seq, _, first_id = waiting_parts(okey, first)
  seq = tonumber(seq)
  local holder = redis.call('HGET', G.active, okey)
  if holder then
    local own = line_place(G, okey, holder)
    if not own or not seq or not place_before(seq, first_id, own, holder) then return false end
    local state, score = state_of(G, holder)
    if state ~= 'pending' and state ~= 'ready' then return false end   -- claimed since: it stays first
    local due = state == 'ready' and ready_due(redis.call('ZSCORE', G.ready, holder)) or score   -- Redis's own string
    -- Held in the line itself (a key left both active and waiting by an undo before place()
    -- kept a key's own message out of the line): not listed twice. No chained child gets here:
    -- a message published with after= has no ordering key.
    if tonumber(due) >= HELD_BASE then return false end
    if state == 'ready' then unlist(G, holder, score) end
    redis.call('ZREM', G[state], holder)
    redis.call('ZADD', G.pending, HELD_BASE + own, holder)
    redis.call('ZADD', G.waiting, 0, waiting_member(okey, own, tonumber(due), holder))
  end
  promote_key(G, okey, ts)   -- records the promoted one's place for a later call
  return true
end

-- The per-delivery records, with a 'restored' entry in the history (an unreadable info record
-- goes back as it was: it is what marks the letter corrupt).
local function put_records(id, rec)
  local info = {rc = 0, h = {}}
  if opt(rec.i) then
    local ok, decoded = pcall(cjson.decode, rec.i)
    info = ok and type(decoded) == 'table' and type(decoded.h) == 'table' and decoded or nil
  end
  local att = tonumber(opt(rec.a)) or 0
  if opt(rec.a) then redis.call('HSET', G.att, id, rec.a) end
  if opt(rec.t) then redis.call('HSET', G.tracebacks, id, rec.t) end
  if opt(rec.x) then redis.call('ZADD', G.expiry, rec.x, id) end
  if not info then
    redis.call('HSET', G.info, id, rec.i)
    return nil
  end
  push_history(tcfg, info, ts, 'restored', att, actor, 'undo of operation ' .. op)
  save_info(G, id, info)
  return info
end

-- The payload back in the partition: shared again with the groups that still hold it, or written
-- anew with its dedup key and dispatch (its index entries stayed in the log: a sweep keeps those of
-- messages held in a live area, includes/index.lua). Returns a reason when it cannot be.
local function put_payload(id, rec, h)
  local existing = redis.call('HGET', P.msgs, id)
  if existing then
    local refs = tonumber(redis.call('HGET', P.refs, id)) or 1
    redis.call('HSET', P.refs, id, refs + 1)
    return nil
  end
  if not opt(rec.r) then return nil end   -- a corrupt letter had none
  if h and h.key ~= '' then
    local holder = redis.call('HGET', P.dedup, h.key)
    if holder and holder ~= id then return 'key', holder end
    redis.call('HSET', P.dedup, h.key, id)
    if opt(rec.dk) then redis.call('ZADD', P.dedup_until, rec.dk, h.key)
    else redis.call('ZREM', P.dedup_until, h.key) end
    if opt(rec.db) then redis.call('ZADD', P.dedup_until, rec.db, DEBOUNCE_MARK .. h.key) end
  end
  redis.call('HSET', P.msgs, id, rec.r)
  usage_add(record_cost(id, #rec.r))   -- the exact byte count (usage.lua)
  if opt(rec.dp) then redis.call('HSET', P.dispatch, id, rec.dp) end
  return nil
end

-- A member of a batch that still exists is one again: a removal had counted it as ended, so it
-- ends once more when it is done (a callback the removal fired stays fired: each fires once).
local function rejoin_batch(id, rec)
  local bid = opt(rec.bt)
  if not bid or redis.call('HEXISTS', P.batches, bid .. '|cb') == 0 then return end
  redis.call('HSET', P.batch_of, id, bid)
  BATCH.none = false
  if rec.s ~= 'dead' then redis.call('HINCRBY', G.batches, bid .. '|r', -1) end   -- a dead letter had ended as dead
end

local function restore(id, rec)
  local h = parse_header(opt(rec.r))
  local okey = h and h.okey or ''
  if rec.k == 1 and redis.call('ZSCORE', G.dead, id) then   -- killed: from dead back to retrying
    unindex_dead(G, id, load_info(G, id))
    batch_unend(G, id)   -- it had ended as dead
    redis.call('HDEL', G.info, id)   -- the dead letter's record; the held one goes back
    put_records(id, rec)
    place(id, rec, okey)
    return nil
  end
  -- A killed message no longer dead was replayed or deleted (it is in the group), or evicted by
  -- the dead letters' retention (it is not): then it comes back from its held record, to retrying.
  if state_of(G, id) then return rec.k == 1 and 'not dead' or 'present' end
  local why, other = put_payload(id, rec, h)
  if why then return why, other end
  local info = put_records(id, rec)
  if rec.k ~= 1 then rejoin_batch(id, rec) end   -- a killed one's batch had counted it dead already
  if rec.s == 'dead' then reindex_dead(info, id, rec.sc) else place(id, rec, okey) end
  return nil
end

local restored, refused, n_ready = 0, {}, 0
local rows
cursor, rows = held_rows(H, cursor, count)   -- at most `count` records or HELD_CALL_BYTES (held.lua)
for i = 1, #rows, 2 do
  local id = rows[i]
  if string.sub(id, 1, 1) ~= '~' then   -- '~meta', '~unheld': the area's own fields
    local blob = rows[i + 1]
    local rec = cmsgpack.unpack(blob)
    local why, other = restore(id, rec)
    if why then
      refused[#refused + 1] = id
      refused[#refused + 1] = other and (why .. ' ' .. other) or why
    else
      redis.call('HDEL', H, id)
      HOLD.n, HOLD.b = HOLD.n - 1, HOLD.b - #blob - #id
      restored = restored + 1
      if rec.s ~= 'dead' then n_ready = n_ready + 1 end
      ev_add('restored', group, id, {from = rec.k == 1 and 'dead' or 'held'})
    end
  end
end
if restored > 0 then
  hold_save()
  redis.call('HINCRBY', G.stats, 'restored', restored)
end
for okey in pairs(lines) do
  if settle_line(okey) then n_ready = n_ready + 1 end
end
if n_ready > 0 then signal_workers(G, n_ready) end
ev_flush(tcfg, ts, actor)
return {cursor, restored, refused}
