--@include dead, info, leave, record
-- Dead-letter retention (count and age), evicting into the event stream.

-- Eviction is never silent: the event carries the whole message (even with events off) so the
-- archive can restore it, and a counter records it.
local function evict(tcfg, gk, gcfg, group, id, ts, reason)
  local info = load_info(gk, id)
  local h = parse_header(redis.call('HGET', P.msgs, id)) or {}
  local meta = cjson.encode({key = h.key or '', okey = h.okey or '', hdr = h.hdr or '', max = h.max or 0,
    c = h.c or 0, ttl = h.ttl or 0, info = redis.call('HGET', gk.info, id) or ''})
  redis.call('XADD', P.events, 'MAXLEN', '~', tcfg.events_maxlen, '*', 'e', 'evicted', 'g', group, 'ts', ts, 'n', 1,
    'ids', id, 'reason', reason, 'att', attempts_of(gk, id), 'fp', fp_of(info), 'meta', meta,
    'payload', h.body and string.sub(redis.call('HGET', P.msgs, id), h.body) or '')
  unindex_dead(gk, id, info)
  leave(gk, gcfg, {id}, {h.okey or ''}, ts)
  redis.call('HINCRBY', gk.stats, 'evicted', 1)
end

-- The partition count from the layout (each partition keeps its share of a group's dead letters).
local function partition_count(tcfg)
  return tonumber(string.match(tcfg.layout or '1|', '^(%d+)|')) or 1
end

-- Retention by count, then by age; at most `budget` evictions per call so Redis is never blocked.
-- dead_max_count is the group's total: each partition keeps its share (rounded up).
local function enforce_retention(tcfg, gk, gcfg, group, ts, budget)
  local n = 0
  local over = redis.call('ZCARD', gk.dead) - math.ceil(gcfg.dead_max_count / partition_count(tcfg))
  if over > 0 then
    local ids = redis.call('ZRANGE', gk.dead, 0, math.min(over, budget) - 1)
    for _, id in ipairs(ids) do evict(tcfg, gk, gcfg, group, id, ts, 'max_count'); n = n + 1 end
  end
  if gcfg.dead_max_age_ms > 0 and n < budget then
    local ids = redis.call('ZRANGEBYSCORE', gk.dead, '-inf', ts - gcfg.dead_max_age_ms, 'LIMIT', 0, budget - n)
    for _, id in ipairs(ids) do evict(tcfg, gk, gcfg, group, id, ts, 'max_age'); n = n + 1 end
  end
  return n
end
