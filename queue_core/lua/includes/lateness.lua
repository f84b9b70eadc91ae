--@include minutes
--[[
  lateness: why a delivery was late, decided by the claim that makes it (DelayQueue.get()'s
  lateness_cause, the claimed event's `cause` column, the per-minute `cause:<cause>` counters).

  A claim knows per message only its due time and now, so the group keeps a few facts, each
  written rarely, and the claim reads them only when a message is late (the usual claim, with no
  late message, reads nothing more):
    G.stats claim_at              when a worker last asked to claim (once per claim call)
    G.stats limit_at, limit_by    when a dispatch limit last held messages back, and which limit
    G.config resumed_at           when the group was last resumed (DelayQueue.resume)
    G.active["\0" .. id]          the message whose key held `id` past its due time (ordering.lua,
                                  when it releases a message already late; taken by the claim)
  The cause of a delivery (first that applies): key_held:<holder id>, paused, rate_limited or
  concurrency_limited (a limit held the group after the message was due), saturated (a claim came
  after the message was due and did not take it, or the group had messages in flight), no_worker
  (no claim since it was due and nothing in flight; for a retry: retry_backoff), and for a retry
  claimed on time retry_backoff (its due time is the backoff's end: the message is late against
  its first due time by it).
]]

local LATE_CAUSE_MS = 10   -- deliveries at most this late have no cause: claim's own latency
local LIMIT_CAUSES = {rate = 'rate_limited', key_rate = 'rate_limited', max_in_flight = 'concurrency_limited',
  key_in_flight = 'concurrency_limited'}

-- The field of G.active that names the holder of a released message (no ordering key has a NUL).
local function holder_field(id) return '\0' .. id end

-- `id` was held by `holder`'s ordering key and is released at ts, `late` ms after it was due.
local function note_key_held(gk, id, holder, late)
  if late > LATE_CAUSE_MS then redis.call('HSET', gk.active, holder_field(id), holder) end
end

-- A worker asked to claim at ts (what tells no_worker from saturated), and `limit` (a reason of
-- dispatch.lua, or nil) held some of the group's messages back: one write per claim call, after
-- the call's own messages read the facts as they were before it.
local function note_claim(gk, count, ts, limit)
  if limit then
    redis.call('HSET', gk.stats, 'claim_at', ts, 'limit_at', ts, 'limit_by', limit)
  elseif count > 0 then
    redis.call('HSET', gk.stats, 'claim_at', ts)
  end
end

-- The cause of each delivery of one claim call: a function of (id, due ms, ms late, retry: an
-- attempt failed before) that returns the cause ("key_held:<holder>" for a held key), its kind
-- (LATENESS_CAUSES) and what the lease ends with, or nil when the delivery has none. The facts
-- are read on the first late message and kept as upvalues, and the strings are built once per
-- kind: in a backlog every message of a claim is late, and this runs for each (table lookups
-- and new strings per message were most of what the cause cost there).
local function late_facts(gk, gcfg)
  local resumed_at, ordered = tonumber(gcfg.resumed_at) or NO_TIME, gcfg.ordered == '1'
  local read, claim_at, limit_at, limit, busy = false, NO_TIME, NO_TIME, nil, false
  local suffix = {}
  local function ending(cause)
    local sfx = suffix[cause]
    if not sfx then
      -- Byte 1: no ordering key holds a control character, so the key ends where the cause starts.
      sfx = '\1' .. cause
      suffix[cause] = sfx
    end
    return sfx
  end
  return function(id, due, late, retry)
    if late <= LATE_CAUSE_MS then
      if retry then return 'retry_backoff', 'retry_backoff', ending('retry_backoff') end
      return nil
    end
    if not read then
      local v = redis.call('HMGET', gk.stats, 'claim_at', 'limit_at', 'limit_by')
      claim_at, limit_at = tonumber(v[1]) or NO_TIME, tonumber(v[2]) or NO_TIME
      limit = LIMIT_CAUSES[v[3]] or 'rate_limited'
      -- Read before this claim adds its own messages: the workers' earlier claims still in flight.
      busy = redis.call('ZCARD', gk.unacked) > 0
      read = true
    end
    if ordered then
      local holder = redis.call('HGET', gk.active, holder_field(id))
      if holder then
        redis.call('HDEL', gk.active, holder_field(id))
        return 'key_held:' .. holder, 'key_held', '\1key_held:' .. holder
      end
    end
    local kind
    if resumed_at >= due then kind = 'paused'
    elseif limit_at >= due then kind = limit
    elseif claim_at >= due or busy then kind = 'saturated'
    -- A retry nobody claimed since its backoff ended: the backoff is what the engine knows (a
    -- worker failed it moments before; one that stopped since looks the same from here).
    elseif retry then kind = 'retry_backoff'
    else kind = 'no_worker' end
    return kind, kind, ending(kind)
  end
end

-- Counts this call's causes per minute beside the lateness histogram ({cause = n}; key_held
-- without its holder).
local function count_causes(gk, ts, counts)
  for cause, n in pairs(counts) do count_minute(gk, ts, 'cause:' .. cause, n) end
end
