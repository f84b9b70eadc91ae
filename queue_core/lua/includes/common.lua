--[[
  Helpers shared by the transition scripts. scripts.py prepends this file (after the generated
  DEFAULTS table) to every script that starts with "--@include common".

  Conventions:
    K         table of the topic's keys, built from KEYS in TopicKeys order (keys.py)
    meta      the message's JSON metadata (HASH K.meta): att, max, c, due, key, hdr, rc,
              err = {t, m, fp}, da, corrupt, h = history [[ts, event, attempt, summary, actor], ...]
    lease     while unacked, HASH K.leases holds "token|attempt|claim ms|dedup key": ack, nack and
              extend check the token there without decoding meta (the hot path).
    state     never stored in meta: it is the structure (ZSET) that holds the id.
]]
local KEY_NAMES = {'config', 'pending', 'ready', 'unacked', 'retrying', 'dead', 'meta', 'payloads',
  'tracebacks', 'dedup', 'fp_count', 'fp_info', 'fp_index', 'events', 'stats', 'signal', 'workers', 'leases',
  'minutes'}
local NUMERIC = {'visibility_timeout_ms', 'max_payload_bytes', 'retry_base_ms', 'retry_factor',
  'retry_max_delay_ms', 'retry_jitter', 'max_attempts', 'dead_max_count', 'dead_max_age_ms',
  'events_maxlen', 'max_delay_ms', 'history_max'}
local STATES = {'pending', 'ready', 'unacked', 'retrying', 'dead'}
local SIGNAL_MAX = 64

local K = {}
for i, name in ipairs(KEY_NAMES) do K[name] = KEYS[i] end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function load_config()
  local cfg = {}
  for k, v in pairs(DEFAULTS) do cfg[k] = v end
  local raw = redis.call('HGETALL', K.config)
  for i = 1, #raw, 2 do cfg[raw[i]] = raw[i + 1] end
  for _, name in ipairs(NUMERIC) do cfg[name] = tonumber(cfg[name]) end
  return cfg
end

local function state_of(id)
  for _, s in ipairs(STATES) do
    local score = redis.call('ZSCORE', K[s], id)
    if score then return s, tonumber(score) end
  end
  return nil, nil
end

-- Decodes stored metadata; returns meta or nil, reason. A corrupt hash must never raise inside a
-- script that also moves other messages: that would abort the batch and block every worker on the
-- same poison message.
local function decode_meta(raw)
  if not raw then return nil, 'metadata missing' end
  local ok, meta = pcall(cjson.decode, raw)
  if not ok or type(meta) ~= 'table' or type(meta.att) ~= 'number' or type(meta.h) ~= 'table' then
    return nil, 'metadata is not valid delayq JSON: ' .. string.sub(raw, 1, 200)
  end
  return meta, nil
end

local function load_meta(id)
  return decode_meta(redis.call('HGET', K.meta, id))
end

local function save_meta(id, meta)
  redis.call('HSET', K.meta, id, cjson.encode(meta))
end

local function push_history(cfg, meta, ts, event, actor, summary)
  local h = meta.h
  h[#h + 1] = {ts, event, meta.att, summary or '', actor or ''}
  while #h > cfg.history_max do table.remove(h, 1) end
end

local function emit(cfg, fields, force)
  if force or cfg.events == '1' then
    redis.call('XADD', K.events, 'MAXLEN', '~', cfg.events_maxlen, '*', unpack(fields))
  end
end

-- Per-minute counters for the dashboard's throughput figures (read.py throughput()).
local function count_minute(ts, event, n)
  redis.call('HINCRBY', K.minutes, math.floor(ts / 60000) .. ':' .. event, n)
end

-- Drop counters older than an hour; runs from claim's upkeep, at most once per minute, and only
-- reads the field names when the hash has grown past what one hour of three events needs.
local function prune_minutes(ts)
  local minute = math.floor(ts / 60000)
  if redis.call('HGET', K.stats, 'minutes_pruned') == tostring(minute) then return end
  redis.call('HSET', K.stats, 'minutes_pruned', minute)
  if redis.call('HLEN', K.minutes) <= 200 then return end
  for _, field in ipairs(redis.call('HKEYS', K.minutes)) do
    local m = tonumber(string.match(field, '^(%d+):'))
    if not m or m < minute - 61 then redis.call('HDEL', K.minutes, field) end
  end
end

local function signal_workers(n)
  for _ = 1, math.min(n, 16) do redis.call('RPUSH', K.signal, '1') end
  redis.call('LTRIM', K.signal, -SIGNAL_MAX, -1)
end

local function fp_member(fp, dead_at, id)
  return fp .. ':' .. string.format('%015d', dead_at) .. ':' .. id
end

local function fp_of(meta)
  return (meta.err and meta.err.fp) or 'none'
end

-- Removes every trace of a message except the structure holding it (the caller ZREMs that).
local function delete_data(id, key)
  redis.call('HDEL', K.meta, id)
  redis.call('HDEL', K.payloads, id)
  redis.call('HDEL', K.tracebacks, id)
  redis.call('HDEL', K.leases, id)
  if key and key ~= '' and redis.call('HGET', K.dedup, key) == id then
    redis.call('HDEL', K.dedup, key)
  end
end

-- A lease string "token|attempt|claim ms|dedup key" as a table, or nil.
local function parse_lease(raw)
  if not raw then return nil end
  local tok, att, ct, key = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if not tok then return nil end
  return {tok = tok, att = tonumber(att), ct = tonumber(ct), key = key}
end

-- The lease of an unacked message if `token` holds it, else nil.
local function held_lease(id, token)
  local lease = parse_lease(redis.call('HGET', K.leases, id))
  if not lease or lease.tok ~= token then return nil end
  return lease
end

local function unindex_dead(id, meta)
  redis.call('ZREM', K.dead, id)
  if meta and meta.da then
    local fp = fp_of(meta)
    redis.call('ZREM', K.fp_index, fp_member(fp, meta.da, id))
    if redis.call('HINCRBY', K.fp_count, fp, -1) <= 0 then
      redis.call('HDEL', K.fp_count, fp)
      redis.call('HDEL', K.fp_info, fp)
    end
  end
end

-- Eviction is never silent: the event carries the whole message (even with events off) so the
-- archive can restore it, and a counter records it.
local function evict(cfg, id, ts, reason)
  local meta = load_meta(id)
  local payload = redis.call('HGET', K.payloads, id) or ''
  emit(cfg, {'event', 'evicted', 'msg', id, 'ts', ts, 'reason', reason, 'attempt', meta and meta.att or 0,
    'fp', meta and fp_of(meta) or 'none', 'meta', redis.call('HGET', K.meta, id) or '', 'payload', payload}, true)
  unindex_dead(id, meta)
  delete_data(id, meta and meta.key)
  redis.call('HINCRBY', K.stats, 'evicted', 1)
end

-- Retention by count, then by age; at most `budget` evictions per call so Redis is never blocked.
local function enforce_retention(cfg, ts, budget)
  local n = 0
  local over = redis.call('ZCARD', K.dead) - cfg.dead_max_count
  if over > 0 then
    local ids = redis.call('ZRANGE', K.dead, 0, math.min(over, budget) - 1)
    for _, id in ipairs(ids) do evict(cfg, id, ts, 'max_count'); n = n + 1 end
  end
  if cfg.dead_max_age_ms > 0 and n < budget then
    local ids = redis.call('ZRANGEBYSCORE', K.dead, '-inf', ts - cfg.dead_max_age_ms, 'LIMIT', 0, budget - n)
    for _, id in ipairs(ids) do evict(cfg, id, ts, 'max_age'); n = n + 1 end
  end
  return n
end

local function to_dead(cfg, id, meta, ts, actor)
  meta.da = ts
  local fp = fp_of(meta)
  redis.call('ZADD', K.dead, ts, id)
  redis.call('ZADD', K.fp_index, 0, fp_member(fp, ts, id))
  redis.call('HINCRBY', K.fp_count, fp, 1)
  local info_raw = redis.call('HGET', K.fp_info, fp)
  local info = info_raw and cjson.decode(info_raw) or {first_seen = ts, t = meta.err and meta.err.t or '',
    m = meta.err and meta.err.m or '', sample = id}
  info.last_seen = ts
  redis.call('HSET', K.fp_info, fp, cjson.encode(info))
  redis.call('HINCRBY', K.stats, 'dead', 1)
  count_minute(ts, 'dead', 1)
  emit(cfg, {'event', 'dead', 'msg', id, 'ts', ts, 'attempt', meta.att, 'fp', fp, 'actor', actor or ''})
end

local function retry_delay_ms(cfg, attempt, r)
  local kind, d = cfg.retry_kind, 0
  if kind == 'fixed' then
    d = cfg.retry_base_ms
  elseif kind == 'linear' then
    d = cfg.retry_base_ms * attempt
  elseif kind == 'exponential' then
    d = cfg.retry_base_ms * (cfg.retry_factor ^ (attempt - 1))
  elseif kind == 'custom' then
    local sched = {}
    for v in string.gmatch(cfg.retry_schedule_ms, '[^,]+') do sched[#sched + 1] = tonumber(v) end
    d = sched[math.min(attempt, #sched)] or 0
  end
  if cfg.retry_max_delay_ms > 0 and d > cfg.retry_max_delay_ms then d = cfg.retry_max_delay_ms end
  if cfg.retry_jitter > 0 then d = d * (1 + cfg.retry_jitter * (2 * r - 1)) end
  return math.floor(d)
end

-- An unacked delivery failed (nack, reject, expired lease): retrying by the policy, or dead.
-- claim_ms is when it was claimed (for handler time). Returns the new state's name.
local function fail(cfg, id, meta, ts, err, tb, retry_in_ms, r, actor, force_dead, event, claim_ms)
  redis.call('ZREM', K.unacked, id)
  redis.call('HDEL', K.leases, id)
  meta.err = err
  if tb and tb ~= '' then redis.call('HSET', K.tracebacks, id, tb) else redis.call('HDEL', K.tracebacks, id) end
  redis.call('HINCRBY', K.stats, event, 1)
  local max = (meta.max and meta.max > 0) and meta.max or cfg.max_attempts
  local summary = string.sub((err.t or '') .. ': ' .. (err.m or ''), 1, 200)
  local next_state
  if force_dead or meta.att >= max then
    next_state = 'dead'
    push_history(cfg, meta, ts, event, actor, summary)
    emit(cfg, {'event', event, 'msg', id, 'ts', ts, 'attempt', meta.att, 'fp', err.fp, 'next', 'dead', 'actor', actor or '',
      'handler_ms', claim_ms and (ts - claim_ms) or -1})
    to_dead(cfg, id, meta, ts, actor)
  else
    next_state = 'retrying'
    local delay = retry_in_ms >= 0 and retry_in_ms or retry_delay_ms(cfg, meta.att, r)
    meta.due = ts + delay
    redis.call('ZADD', K.retrying, meta.due, id)
    push_history(cfg, meta, ts, event, actor, summary)
    emit(cfg, {'event', event, 'msg', id, 'ts', ts, 'attempt', meta.att, 'fp', err.fp, 'next', 'retrying', 'due', meta.due,
      'actor', actor or '', 'handler_ms', claim_ms and (ts - claim_ms) or -1})
  end
  save_meta(id, meta)
  return next_state
end

-- Ready messages whose metadata or payload is unreadable become dead letters flagged corrupt, so
-- an operator can see and delete them and no worker ever chokes on them.
local function quarantine(cfg, id, ts, reason, corrupt_fp)
  local raw = redis.call('HGET', K.meta, id)
  local meta = {att = 0, c = ts, h = {}, corrupt = reason,
    err = {t = 'CorruptMessage', m = reason, fp = corrupt_fp}}
  if raw then redis.call('HSET', K.tracebacks, id, 'raw metadata: ' .. string.sub(raw, 1, 8000)) end
  push_history(cfg, meta, ts, 'quarantined', '', reason)
  to_dead(cfg, id, meta, ts, 'delayq')
  save_meta(id, meta)
end

local function replay_one(cfg, id, ts, delay_ms, actor)
  if not redis.call('ZSCORE', K.dead, id) then return false end
  local meta = load_meta(id)
  if not meta or meta.corrupt or redis.call('HEXISTS', K.payloads, id) == 0 then return false end
  unindex_dead(id, meta)
  meta.att = 0
  meta.rc = (meta.rc or 0) + 1
  meta.da = nil
  meta.due = ts + delay_ms
  if delay_ms > 0 then redis.call('ZADD', K.pending, meta.due, id) else redis.call('ZADD', K.ready, meta.due, id) end
  push_history(cfg, meta, ts, 'replayed', actor, '')
  save_meta(id, meta)
  redis.call('HINCRBY', K.stats, 'replayed', 1)
  emit(cfg, {'event', 'replayed', 'msg', id, 'ts', ts, 'attempt', 0, 'due', meta.due, 'fp', fp_of(meta), 'actor', actor})
  return true
end
