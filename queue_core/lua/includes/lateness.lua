--@include minutes
--[[
  lateness: why a delivery was late, decided by the claim that makes it (DelayQueue.get()'s
  lateness_cause, the claimed event's `cause` column, the per-minute `cause:<cause>` counters).

  A claim knows per message only its due time and now, so the group keeps a few facts, each
  written rarely, and the claim reads them only when a message is late (the usual claim, with no
  late message, reads nothing more):
    G.stats claim_at              when a worker last asked to claim (written at most once a
                                  second: CLAIM_AT_MS; causes are for deliveries > 10 ms late)
    G.stats limit_at, limit_by    when a dispatch limit last held messages back, and which limit
    G.config resumed_at           when the group was last resumed (DelayQueue.resume)
    G.key_limits[fairness key]    "<ms>|<cause>": when that key's own limit (key_rate,
                                  max_in_flight_per_key) last held it back, dropped when the key
                                  leaves the fairness ring (dispatch.lua)
    G.late_holders[id]            "<ms>|<holder id>": the message whose key held `id` until ms,
                                  past its due time (ordering.lua, when it releases a message
                                  already late; dropped by the claim of `id`, late or not, and
                                  where `id` leaves the group: leave.lua). A note older than the
                                  message's due time (it was rescheduled since) is not its cause.
  The cause of a delivery (first that applies): key_held:<holder id>, paused, rate_limited or
  concurrency_limited (a group limit held the group, or the message's own fairness key's limit
  held that key, after the message was due), saturated (a claim came
  after the message was due and did not take it, or the group had messages in flight), no_worker
  (no claim since it was due and nothing in flight); a retry more than LATE_CAUSE_MS past its
  backoff's end takes the same causes as a first attempt, and a retry claimed on time
  retry_backoff (its due time is the backoff's end: the message is late against its first due
  time by it).
]]

local LATE_CAUSE_MS = 10   -- deliveries at most this late have no cause: claim's own latency
local LIMIT_CAUSES = {rate = 'rate_limited', key_rate = 'rate_limited', max_in_flight = 'concurrency_limited',
  key_in_flight = 'concurrency_limited'}

-- claim_at is rewritten only when it is older than this: an empty poll loop would otherwise write
-- (and replicate) on every call. A delivery is told no_worker from saturated only to this grain.
local CLAIM_AT_MS = 1000

-- `id` was held by `holder`'s ordering key and is released at ts; it was due at `due`.
local function note_key_held(gk, id, holder, ts, due)
  if ts - due > LATE_CAUSE_MS then redis.call('HSET', gk.late_holders, id, ts .. '|' .. holder) end
end

-- A worker asked to claim at ts (what tells no_worker from saturated), `limit` (a group limit's
-- reason in dispatch.lua, or nil) held some of the group's messages back, and `key_limits`
-- ({fairness key = key_rate | key_in_flight}, or nil) held those keys back: after the call's own
-- messages read the facts as they were before it. claim_at is not rewritten when it is less than
-- CLAIM_AT_MS old (one HGET is cheaper than a write and its replication).
local function note_claim(gk, count, ts, limit, key_limits)
  if key_limits and next(key_limits) then
    local args, n = {}, 0
    for k, why in pairs(key_limits) do args[n + 1] = k; args[n + 2] = ts .. '|' .. LIMIT_CAUSES[why]; n = n + 2 end
    redis.call('HSET', gk.key_limits, unpack(args))
  end
  if limit then
    redis.call('HSET', gk.stats, 'claim_at', ts, 'limit_at', ts, 'limit_by', limit)
  elseif count > 0 and ts - (tonumber(redis.call('HGET', gk.stats, 'claim_at')) or NO_TIME) >= CLAIM_AT_MS then
    redis.call('HSET', gk.stats, 'claim_at', ts)
  end
end

-- The causes of one claim call's deliveries, as a table:
--   .of(id, due ms, ms late, retry: an attempt failed before, its fairness key or nil) returns the
--   cause ("key_held:<holder>" for a held key), its kind (LATENESS_CAUSES) and what the lease ends
--   with, or nil when the delivery has none;
--   .floor, .kind, .ending: a late delivery due after .floor has the cause .kind (and the lease
--   ending .ending) without calling .of. In a backlog every message of a claim is late and most
--   share one cause (saturated): the claim tests that inline, because a function call per message
--   was most of what the causes cost there. .floor is set (from +inf) once the facts are read, on
--   the first late message, and only when no holder note or fairness-key limit can apply.
-- The facts are kept as upvalues of .of and the strings are built once per kind.
-- `ids`: the call's ids; their holder notes (G.late_holders) are read with one HMGET and dropped,
-- late or not, when the hash exists (one EXISTS per call otherwise).
local function late_facts(gk, gcfg, ids)
  local resumed_at, ordered = tonumber(gcfg.resumed_at) or NO_TIME, gcfg.ordered == '1'
  local holders = nil   -- id -> {held until ms, holder}
  if redis.call('EXISTS', gk.late_holders) == 1 then
    local v = redis.call('HMGET', gk.late_holders, unpack(ids))
    redis.call('HDEL', gk.late_holders, unpack(ids))
    if ordered then
      holders = {}
      for j, id in ipairs(ids) do
        local at, holder = string.match(v[j] or '', '^(%d+)|(.*)$')
        if at then holders[id] = {tonumber(at), holder} end
      end
    end
  end
  local key_limits = nil   -- fairness key -> {ms, cause} or false, read per key on its first late message
  local read, claim_at, limit_at, limit, busy = false, NO_TIME, NO_TIME, nil, false
  local suffix = {}
  local why = {floor = math.huge}
  local function ending(cause)
    local sfx = suffix[cause]
    if not sfx then
      -- Byte 1: no ordering key holds a control character, so the key ends where the cause starts.
      sfx = '\1' .. cause
      suffix[cause] = sfx
    end
    return sfx
  end
  why.of = function(id, due, late, retry, fkey)
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
      if redis.call('EXISTS', gk.key_limits) == 1 then key_limits = {} end
      read = true
      if not holders and not key_limits then   -- one cause for every delivery due after the facts
        -- Not busy, a delivery due after the last claim found no worker; busy, the workers were
        -- saturated whenever it fell due (the order of the tests below).
        why.floor = math.max(resumed_at, limit_at, busy and NO_TIME or claim_at)
        why.kind = busy and 'saturated' or 'no_worker'
        why.ending = ending(why.kind)
      end
    end
    local held = holders and holders[id]
    -- Held until after this due time: a message rescheduled since its release has a later one.
    if held and held[1] > due then
      local holder = held[2]
      return 'key_held:' .. holder, 'key_held', '\1key_held:' .. holder
    end
    local key_at, key_cause = NO_TIME, nil
    if key_limits and fkey and fkey ~= '' then
      local kl = key_limits[fkey]
      if kl == nil then
        local at, cause = string.match(redis.call('HGET', gk.key_limits, fkey) or '', '^(%d+)|(.*)$')
        kl = at and {tonumber(at), cause} or false
        key_limits[fkey] = kl
      end
      if kl then key_at, key_cause = kl[1], kl[2] end
    end
    local kind
    -- Due at the very millisecond of the resume (published just after it): the pause held nothing.
    if resumed_at > due then kind = 'paused'
    elseif limit_at >= due then kind = limit
    elseif key_at >= due then kind = key_cause   -- this message's own key was held, not another's
    elseif claim_at >= due or busy then kind = 'saturated'
    -- A retry late past its backoff's end was late for the same reasons as a first attempt.
    else kind = 'no_worker' end
    return kind, kind, ending(kind)
  end
  return why
end

-- Counts this call's causes per minute beside the lateness histogram ({cause = n}; key_held
-- without its holder).
local function count_causes(gk, ts, counts)
  for cause, n in pairs(counts) do count_minute(gk, ts, 'cause:' .. cause, n) end
end
