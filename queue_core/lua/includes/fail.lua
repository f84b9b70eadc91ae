--@include dead, events, info, record, ttl
-- Failed deliveries: retry by the group's policy, or dead.

local function retry_delay_ms(gcfg, attempt, r)
  local kind, d = gcfg.retry_kind, 0
  if kind == 'fixed' then
    d = gcfg.retry_base_ms
  elseif kind == 'linear' then
    d = gcfg.retry_base_ms * attempt
  elseif kind == 'exponential' then
    d = gcfg.retry_base_ms * (gcfg.retry_factor ^ (attempt - 1))
  elseif kind == 'custom' then
    local sched = {}
    for v in string.gmatch(gcfg.retry_schedule_ms, '[^,]+') do sched[#sched + 1] = tonumber(v) end
    d = sched[math.min(attempt, #sched)] or 0
  end
  if gcfg.retry_max_delay_ms > 0 and d > gcfg.retry_max_delay_ms then d = gcfg.retry_max_delay_ms end
  if gcfg.retry_jitter > 0 then d = d * (1 + gcfg.retry_jitter * (2 * r - 1)) end
  return math.floor(d)
end

-- An unacked delivery failed (nack, reject, expired lease): retrying by the policy, or dead.
-- Returns the new state's name and the due time of a retry.
local function fail(tcfg, gk, gcfg, group, id, lease, ts, err, tb, retry_in_ms, r, actor, force_dead, event, ttl_fp)
  redis.call('ZREM', gk.unacked, id)
  redis.call('HDEL', gk.leases, id)
  local att = lease.att
  redis.call('HSET', gk.att, id, att)
  local header = parse_header(redis.call('HGET', P.msgs, id))
  local info, reason = load_info(gk, id)
  if not info or not header then
    quarantine(tcfg, gk, gcfg, group, id, ts, reason or 'message header missing or unreadable', err.fp,
      redis.call('HGET', gk.info, id))
    return 'dead', NO_TIME
  end
  if tb and tb ~= '' then redis.call('HSET', gk.tracebacks, id, tb) else redis.call('HDEL', gk.tracebacks, id) end
  redis.call('HINCRBY', gk.stats, event, 1)
  info.err = err
  local summary = string.sub((err.t or '') .. ': ' .. (err.m or ''), 1, 200)
  push_history(tcfg, info, lease.ct, 'claimed', att, '', '')
  push_history(tcfg, info, ts, event, att, actor, summary)
  local max = (header.max and header.max > 0) and header.max or gcfg.max_attempts
  -- Handler time is known only when the worker reported back (not for an expired lease).
  local hms = (event ~= 'expired' and lease.ct) and (ts - lease.ct) or NO_TIME
  if ttl_over(gk, id, ts) then
    ev_add(event, group, id, {att = att, fp = err.fp, next = 'dead', due = '', hms = hms})
    save_info(gk, id, info)
    ttl_expire(tcfg, gk, gcfg, group, id, nil, ts, ttl_fp, 'time to live ran out (last error: ' .. summary .. ')')
    return 'dead', NO_TIME
  end
  if force_dead or att >= max then
    ev_add(event, group, id, {att = att, fp = err.fp, next = 'dead', due = '', hms = hms})
    to_dead(tcfg, gk, gcfg, group, id, info, att, ts, lease.okey)
    save_info(gk, id, info)
    return 'dead', NO_TIME
  end
  local delay = retry_in_ms >= 0 and retry_in_ms or retry_delay_ms(gcfg, att, r)
  local due = ts + delay
  redis.call('ZADD', gk.retrying, due, id)
  ev_add(event, group, id, {att = att, fp = err.fp, next = 'retrying', due = due, hms = hms})
  save_info(gk, id, info)
  return 'retrying', due
end
