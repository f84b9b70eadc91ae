--@include base, batch, config, dead, dispatch, events, hold, index, info, ordering, record, signal, state, usage
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
  if redis.call('HEXISTS', G.fp_info, fp) == 0 then
    redis.call('HSET', G.fp_info, fp, cjson.encode({first_seen = info.da, last_seen = info.da, sample = id,
      t = info.err and info.err.t or '', m = info.err and info.err.m or ''}))
  end
end

-- Not dead: where its state puts it, behind the holder of its ordering key if another has it now.
local function place(id, rec, okey)
  if gcfg.ordered == '1' and okey ~= '' and not claim_key(G, gcfg, okey, id) then
    hold(G, okey, id, tonumber(rec.d))
  elseif rec.s == 'retrying' then
    redis.call('ZADD', G.retrying, rec.sc, id)
  elseif tonumber(rec.d) <= ts then
    to_ready(G, {id}, {rec.d})
  else
    redis.call('ZADD', G.pending, rec.d, id)
  end
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
-- anew with its dedup key, dispatch and index entries. Returns a reason when it cannot be.
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
  end
  redis.call('HSET', P.msgs, id, rec.r)
  usage_add(record_cost(id, #rec.r))   -- the exact byte count (usage.lua)
  if opt(rec.dp) then redis.call('HSET', P.dispatch, id, rec.dp) end
  if opt(rec.ix) then index_add({id}, {rec.ix}) end
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
  if rec.k == 1 then   -- killed: from dead back to retrying
    if not redis.call('ZSCORE', G.dead, id) then return 'not dead' end
    unindex_dead(G, id, load_info(G, id))
    batch_unend(G, id)   -- it had ended as dead
    redis.call('HDEL', G.info, id)   -- the dead letter's record; the held one goes back
    put_records(id, rec)
    place(id, rec, okey)
    return nil
  end
  if state_of(G, id) then return 'present' end
  local why, other = put_payload(id, rec, h)
  if why then return why, other end
  local info = put_records(id, rec)
  rejoin_batch(id, rec)
  if rec.s == 'dead' then reindex_dead(info, id, rec.sc) else place(id, rec, okey) end
  return nil
end

local scan = redis.call('HSCAN', H, cursor, 'COUNT', count)
local restored, refused, n_ready = 0, {}, 0
local rows = scan[2]
for i = 1, #rows, 2 do
  local id = rows[i]
  if id ~= HOLD_META then
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
if n_ready > 0 then signal_workers(G, n_ready) end
ev_flush(tcfg, ts, actor)
return {scan[1], restored, refused}
