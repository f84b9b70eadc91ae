--@include base
--[[
  batch: members published with q.batch() are counted per group as they end, and the batch's
  callbacks fire in the same script call that ends the member deciding them.

  P.batch_of[id] = batch id (written by publish.lua, freed with the payload). P.batches holds the
  batch's definition ("<b>|cb" JSON {complete, success, dead, group}, "<b>|s" sealed ms), and
  gk.batches one group's counters "<b>|n" published, "|a" acked, "|d" dead, "|r" removed
  (cancelled, deleted, purged, dropped on expiry), "|t" the ms its last member ended (the console
  tells a stalled batch from a slow one by it), and "|complete", "|success", "|dead": the ms that
  callback fired. Pending is n - a - d - r. A batch of any size costs these few fields.

  The rules, per group (all of a topic's groups count; def.group, when set, is the one whose
  callbacks fire):
    dead      the first member of the batch that becomes a dead letter (sealed or not)
    complete  sealed and every member ended (acked, dead or removed)
    success   sealed and every member acked; a dead member replayed and then acked counts, so
              success may fire after complete
  Each fires once: its "fired" field is set in the same call that writes the callback into
  P.batch_outbox, which engine/batch.py forwards to the callback's topic (keyed by the outbox
  member, so a forwarder killed between its publish and its ZREM publishes nothing twice).
]]

local BATCH_KINDS = {'dead', 'complete', 'success'}
-- A batch's record (its definition, counts and index entry) is kept this long after it opened,
-- and then until every group's members ended and its callbacks were forwarded.
local BATCH_KEEP_MS = 7 * 86400000
local BATCH_COUNTS = {'n', 'a', 'd', 'r', 't', 'dead', 'complete', 'success'}

-- The outbox entries this call wrote: batch_mark() names them to the caller, which then forwards
-- them (and only them) at once (engine/batch.py) instead of leaving them to the workers' heartbeat.
local BATCH = {fired = {}}

-- Whether the partition holds no member of a batch: one HLEN per script call, however many of
-- batch_end, batch_unend and batch_forget ask (an ack asks twice: its end, then leave's forget).
local function batch_none()
  if BATCH.none == nil then BATCH.none = redis.call('HLEN', P.batch_of) == 0 end
  return BATCH.none
end

-- Fires the callbacks of batch `bid` in group gk whose condition holds now and that never fired.
local function batch_check(gk, group, bid, ts)
  local f = redis.call('HMGET', gk.batches, bid .. '|n', bid .. '|a', bid .. '|d', bid .. '|r',
                       bid .. '|dead', bid .. '|complete', bid .. '|success')
  local n, a, d, r = tonumber(f[1]) or 0, tonumber(f[2]) or 0, tonumber(f[3]) or 0, tonumber(f[4]) or 0
  local sealed = redis.call('HEXISTS', P.batches, bid .. '|s') == 1
  local due = {dead = d > 0 and not f[5], complete = sealed and a + d + r >= n and not f[6],
               success = sealed and a >= n and not f[7]}
  if not (due.dead or due.complete or due.success) then return end
  local ok, def = pcall(cjson.decode, redis.call('HGET', P.batches, bid .. '|cb') or '')
  if not ok or type(def) ~= 'table' then def = {} end
  local mine = def.group == nil or def.group == cjson.null or def.group == '' or def.group == group
  for _, kind in ipairs(BATCH_KINDS) do
    if due[kind] then
      redis.call('HSET', gk.batches, bid .. '|' .. kind, ts)
      if mine and type(def[kind]) == 'table' then
        redis.call('ZADD', P.batch_outbox, ts, bid .. '|' .. group .. '|' .. kind)
        BATCH.fired[#BATCH.fired + 1] = bid .. '|' .. group .. '|' .. kind
      end
    end
  end
end

-- Members `ids` ended in group gk as `kind` ('a' acked, 'd' dead, 'r' removed); a caller calls
-- this before leave() frees their batch_of entries. O(1) when the partition holds no batch.
local function batch_end(gk, group, ids, kind, ts)
  if #ids == 0 or batch_none() then return end
  local bids, counts = redis.call('HMGET', P.batch_of, unpack(ids)), {}
  for _, bid in ipairs(bids) do
    if bid then counts[bid] = (counts[bid] or 0) + 1 end
  end
  for bid, c in pairs(counts) do
    if redis.call('HEXISTS', P.batches, bid .. '|cb') == 1 then   -- else trimmed or discarded: no orphan counters
      redis.call('HINCRBY', gk.batches, bid .. '|' .. kind, c)
      redis.call('HSET', gk.batches, bid .. '|t', ts)
      batch_check(gk, group, bid, ts)
    end
  end
end

-- A dead member replayed (includes/replay_one.lua) is pending again: it ends a second time.
local function batch_unend(gk, id)
  if batch_none() then return end
  local bid = redis.call('HGET', P.batch_of, id)
  if bid and redis.call('HEXISTS', P.batches, bid .. '|cb') == 1 then redis.call('HINCRBY', gk.batches, bid .. '|d', -1) end
end

-- A script's reply `out`, with one more element when the call fired a callback: 'batch' and the
-- outbox entries it wrote, each on a line of its own (engine/base.py batch_fired reads it).
local function batch_mark(out)
  if #BATCH.fired > 0 then out[#out + 1] = 'batch\n' .. table.concat(BATCH.fired, '\n') end
  return out
end

-- publish.lua: why members cannot join batch `bid` (nil: they can): it must be a batch of this
-- topic's partition (its definition exists) and not sealed, so complete cannot have fired early
-- and nobody grows counters for a batch that does not exist.
local function batch_refusal(bid)
  if redis.call('HEXISTS', P.batches, bid .. '|cb') == 0 then return {CODE.NOT_FOUND, 'batch', bid} end
  local sealed = redis.call('HGET', P.batches, bid .. '|s')
  if sealed then return {CODE.STATE_CONFLICT, 'sealed', sealed} end
  return nil
end

-- publish.lua: `ids` (just stored) are members of batch `bid` in every group of the call.
local function batch_join(bid, ids)
  local args = {}
  for j, id in ipairs(ids) do args[2 * j - 1] = id; args[2 * j] = bid end
  redis.call('HSET', P.batch_of, unpack(args))
  BATCH.none = false
  for gi = 1, NGROUPS do
    local gk = group_keys(gi)
    redis.call('HINCRBY', gk.batches, bid .. '|n', #ids)
  end
end

-- The payloads of `ids` are freed (includes/leave.lua): so is their batch membership.
local function batch_forget(ids)
  if not batch_none() then redis.call('HDEL', P.batch_of, unpack(ids)) end
end

-- Whether batch `bid` is over in every group (`names`, in key-block order): every member ended
-- and nothing is left in the outbox. An open batch counts too (batch_trim asks only of those
-- opened BATCH_KEEP_MS ago): one abandoned unsealed, or half-opened, would else stay for ever.
local function batch_over(bid, names)
  for gi, name in ipairs(names) do
    local gk = group_keys(gi)
    local f = redis.call('HMGET', gk.batches, bid .. '|n', bid .. '|a', bid .. '|d', bid .. '|r')
    if (tonumber(f[2]) or 0) + (tonumber(f[3]) or 0) + (tonumber(f[4]) or 0) < (tonumber(f[1]) or 0) then return false end
    for _, kind in ipairs(BATCH_KINDS) do
      if redis.call('ZSCORE', P.batch_outbox, bid .. '|' .. name .. '|' .. kind) then return false end
    end
  end
  return true
end

-- batch.lua: up to `budget` batches opened more than BATCH_KEEP_MS ago lose their record when
-- they are over; the others are looked at again BATCH_KEEP_MS later. Returns how many went.
local function batch_trim(names, ts, budget)
  local old = redis.call('ZRANGEBYSCORE', P.batch_index, '-inf', ts - BATCH_KEEP_MS, 'LIMIT', 0, budget)
  local gone = 0
  for _, bid in ipairs(old) do
    if batch_over(bid, names) then
      local fields, own = {}, {bid .. '|cb', bid .. '|c', bid .. '|s'}
      for j, c in ipairs(BATCH_COUNTS) do fields[j] = bid .. '|' .. c end
      for gi = 1, #names do
        local gk = group_keys(gi)
        redis.call('HDEL', gk.batches, unpack(fields))
        -- the callbacks a forwarder gave up on (engine/batch.py BATCH_FAILED)
        for _, kind in ipairs(BATCH_KINDS) do own[#own + 1] = bid .. '|x|' .. names[gi] .. '|' .. kind end
      end
      redis.call('HDEL', P.batches, unpack(own))
      redis.call('ZREM', P.batch_index, bid)
      gone = gone + 1
    else
      redis.call('ZADD', P.batch_index, ts, bid)
    end
  end
  return gone
end
