--[[
  Helpers shared by the transition scripts. scripts.py prepends a generated header (defaults,
  key names, state names, HELD_BASE) and this file to every script that starts with
  "--@include common".

  Conventions:
    P         the partition's keys (shared by its groups), from KEYS in PartitionKeys order
    G         the first group's keys, from the KEYS that follow (GroupKeys order); group_keys(i)
              gives the i-th group block (publish gets one block per group)
    record    P.msgs[id] = "created|max|ttl|keylen|okeylen|hdrlen|" .. key .. okey .. headers_json
              .. payload: header and payload in one value, written once at publish (one hash
              operation per step instead of two); the header is parsed only off the hot path
    lease     G.leases[id] = "token|attempt|claim ms|due ms|ordering key" while unacked: ack checks the
              token there without reading anything else (the hot path)
    att       G.att[id] = attempts made, written when an attempt fails (absent: none failed yet)
    info      G.info[id] = JSON {rc, da, err = {t, m, fp}, h = list of {ts, event, att, summary, actor},
              corrupt}, written only by failures and operator actions: claim and ack never
              encode or decode JSON
    state     never stored: it is the ZSET that holds the id.
    events    buffered per (kind, group) and written once per script call (ev_flush), ids batched
]]
local P = {}
for i, name in ipairs(PK_NAMES) do P[name] = KEYS[i] end
local function group_keys(index)
  local g, base = {}, #PK_NAMES + (index - 1) * #GK_NAMES
  for j, name in ipairs(GK_NAMES) do g[name] = KEYS[base + j] end
  return g
end
local NGROUPS = (#KEYS - #PK_NAMES) / #GK_NAMES
local G = group_keys(1)
local SIGNAL_MAX = 64
local T_NUMERIC = {'max_payload_bytes', 'events_maxlen', 'max_delay_ms', 'history_max'}
local G_NUMERIC = {'visibility_timeout_ms', 'retry_base_ms', 'retry_factor', 'retry_max_delay_ms', 'retry_jitter',
  'max_attempts', 'dead_max_count', 'dead_max_age_ms', 'ttl_ms'}

-- Keeps a hot hash in the hashtable encoding (see HASHTABLE_FIELD in keys.py): O(1) per field.
local function hashtable(key)
  redis.call('HSETNX', key, HASHTABLE_FIELD, HASHTABLE_VALUE)
end

local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end

local function load_hash(key, defaults, numeric)
  local cfg = {}
  for k, v in pairs(defaults) do cfg[k] = v end
  local raw = redis.call('HGETALL', key)
  for i = 1, #raw, 2 do cfg[raw[i]] = raw[i + 1] end
  for _, name in ipairs(numeric) do cfg[name] = tonumber(cfg[name]) end
  return cfg
end

local function load_topic() return load_hash(P.config, TOPIC_DEFAULTS, T_NUMERIC) end
local function load_group(gk) return load_hash((gk or G).config, GROUP_DEFAULTS, G_NUMERIC) end

-- ---------------------------------------------------------------------------------------------
-- events: one stream entry per (kind, group) per script call; per-message columns are comma lists
-- aligned with `ids` (see queue_core/events.py, which explodes them back into one row per message)
local EVB, EVB_ORDER = {}, {}

-- The buffer of one (kind, group) in this call, created on first use.
local function ev_buffer(kind, group)
  local key = kind .. '\0' .. group
  local b = EVB[key]
  if not b then
    b = {kind = kind, group = group, ids = {}, cols = {}}
    EVB[key] = b
    EVB_ORDER[#EVB_ORDER + 1] = key
  end
  return b
end

local function ev_add(kind, group, id, cols)
  local b = ev_buffer(kind, group)
  local n = #b.ids + 1
  b.ids[n] = id
  if cols then
    for name, v in pairs(cols) do
      local c = b.cols[name]
      if not c then c = {}; b.cols[name] = c end
      c[n] = v
    end
  end
end

-- A whole list of ids, with their columns as whole lists (the hot paths build them as they go).
local function ev_ids(kind, group, ids, cols)
  local b = ev_buffer(kind, group)
  local base = #b.ids
  if base == 0 then   -- a new buffer adopts the caller's arrays instead of copying them
    b.ids = ids
    if cols then for name, values in pairs(cols) do b.cols[name] = values end end
    return
  end
  for i, id in ipairs(ids) do b.ids[base + i] = id end
  if cols then
    for name, values in pairs(cols) do
      local c = b.cols[name]
      if not c then c = {}; b.cols[name] = c end
      for i, v in ipairs(values) do c[base + i] = v end
    end
  end
end

local function ev_flush(tcfg, ts, actor, extra)
  if tcfg.events ~= '1' then return end
  for _, key in ipairs(EVB_ORDER) do
    local b = EVB[key]
    local f = {'e', b.kind, 'g', b.group, 'ts', ts, 'n', #b.ids, 'ids', table.concat(b.ids, ','), 'actor', actor or ''}
    for name, c in pairs(b.cols) do
      for i = 1, #b.ids do if c[i] == nil then c[i] = '' end end
      f[#f + 1] = name; f[#f + 1] = table.concat(c, ',')
    end
    if extra then for k, v in pairs(extra) do f[#f + 1] = k; f[#f + 1] = v end end
    redis.call('XADD', P.events, 'MAXLEN', '~', tcfg.events_maxlen, '*', unpack(f))
  end
end

-- Per-minute counters for the dashboard's throughput figures (read.py throughput()).
local function count_minute(gk, ts, event, n)
  if n > 0 then redis.call('HINCRBY', gk.minutes, math.floor(ts / 60000) .. ':' .. event, n) end
end

-- Drop counters older than an hour; runs from claim's upkeep, at most once per minute, and only
-- reads the field names when the hash holds more than a few minutes' worth (three events and up
-- to 16 lateness buckets a minute).
local function prune_minutes(gk, ts)
  local minute = math.floor(ts / 60000)
  if redis.call('HGET', gk.stats, 'minutes_pruned') == tostring(minute) then return end
  redis.call('HSET', gk.stats, 'minutes_pruned', minute)
  if redis.call('HLEN', gk.minutes) <= 200 then return end
  for _, field in ipairs(redis.call('HKEYS', gk.minutes)) do
    local m = tonumber(string.match(field, '^(%d+):'))
    if not m or m < minute - 61 then redis.call('HDEL', gk.minutes, field) end
  end
end

local function signal_workers(gk, n)
  for _ = 1, math.min(n, 16) do redis.call('RPUSH', gk.signal, '1') end
  redis.call('LTRIM', gk.signal, -SIGNAL_MAX, -1)
end

-- ---------------------------------------------------------------------------------------------
-- message data

-- A record's header as a table {c, max, ttl, key, okey, hdr, body} (body: where the payload
-- starts), or nil when it is not one of ours.
local function parse_header(h)
  if not h then return nil end
  local c, max, ttl, kl, okl, hl, rest = string.match(h, '^(%d+)|(%d*)|(%d*)|(%d+)|(%d+)|(%d+)|()')
  if not c then return nil end
  kl, okl, hl = tonumber(kl), tonumber(okl), tonumber(hl)
  return {c = tonumber(c), max = tonumber(max), ttl = tonumber(ttl), key = string.sub(h, rest, rest + kl - 1),
    okey = string.sub(h, rest + kl, rest + kl + okl - 1), hdr = string.sub(h, rest + kl + okl, rest + kl + okl + hl - 1),
    body = rest + kl + okl + hl}
end

-- The header part of a record for fields c, max, ttl, key, okey, hdr (a new record is this plus a
-- payload).
local function header_string(c, max, ttl, key, okey, hdr)
  return c .. '|' .. (max or '') .. '|' .. (ttl or '') .. '|' .. #key .. '|' .. #okey .. '|' .. #hdr .. '|' .. key
    .. okey .. hdr
end

local function state_of(gk, id)
  for _, s in ipairs(STATES) do
    local score = redis.call('ZSCORE', gk[s], id)
    if score then return s, tonumber(score) end
  end
  return nil, nil
end

-- Decodes a group's info record; returns info or nil, reason. Corrupt data must never raise inside
-- a script that also moves other messages: that would abort the batch and block every worker.
local function load_info(gk, id)
  local raw = redis.call('HGET', gk.info, id)
  if not raw then return {rc = 0, h = {}}, nil end
  local ok, info = pcall(cjson.decode, raw)
  if not ok or type(info) ~= 'table' or type(info.h) ~= 'table' then
    return nil, 'delivery record is not valid delayq JSON: ' .. string.sub(raw, 1, 200)
  end
  return info, nil
end

local function save_info(gk, id, info)
  redis.call('HSET', gk.info, id, cjson.encode(info))
end

local function push_history(tcfg, info, ts, event, att, actor, summary)
  local h = info.h
  h[#h + 1] = {ts, event, att, summary or '', actor or ''}
  while #h > tcfg.history_max do table.remove(h, 1) end
end

local function attempts_of(gk, id)
  return tonumber(redis.call('HGET', gk.att, id)) or 0
end

-- A lease string as a table, or nil.
local function parse_lease(raw)
  if not raw then return nil end
  local tok, att, ct, due, okey = string.match(raw, '^([^|]*)|([^|]*)|([^|]*)|([^|]*)|(.*)$')
  if not tok then return nil end
  return {tok = tok, att = tonumber(att), ct = tonumber(ct), due = tonumber(due), okey = okey}
end

-- The lease of an unacked message if `token` holds it, else nil.
local function held_lease(gk, id, token)
  local lease = parse_lease(redis.call('HGET', gk.leases, id))
  if not lease or lease.tok ~= token then return nil end
  return lease
end

-- The last group done with these ids frees the payload, header and dedup key (refs counts the
-- groups still holding a message when there were several at publish; absent means one).
local function release_payloads(ids)
  local gone = ids
  if redis.call('HLEN', P.refs) > 0 then
    gone = {}
    local refs = redis.call('HMGET', P.refs, unpack(ids))
    for j, id in ipairs(ids) do
      local r = tonumber(refs[j])
      if r and r > 2 then redis.call('HINCRBY', P.refs, id, -1)
      elseif r == 2 then redis.call('HDEL', P.refs, id)
      else gone[#gone + 1] = id end
    end
  end
  if #gone == 0 then return end
  if redis.call('HLEN', P.dedup) > 0 then
    local hs = redis.call('HMGET', P.msgs, unpack(gone))
    for j, id in ipairs(gone) do
      local h = parse_header(hs[j])
      if h and h.key ~= '' and redis.call('HGET', P.dedup, h.key) == id then redis.call('HDEL', P.dedup, h.key) end
    end
  end
  redis.call('HDEL', P.msgs, unpack(gone))
end

-- ---------------------------------------------------------------------------------------------
-- ordered groups: one active message per ordering key; the others are held in pending (score
-- HELD_BASE + sequence) and listed in publish order in `waiting`

local function waiting_member(okey, seq, due, id)
  return okey .. '\0' .. string.format('%015d', seq) .. '\0' .. string.format('%015d', due) .. '\0' .. id
end

-- Hold `id` behind its key's active message (it stays pending, out of the promoter's range).
local function hold(gk, okey, id, due)
  local seq = redis.call('HINCRBY', gk.stats, 'oseq', 1)
  redis.call('ZADD', gk.pending, HELD_BASE + seq, id)
  redis.call('ZADD', gk.waiting, 0, waiting_member(okey, seq, due, id))
end

-- The active message of `okey` is done with it: the next one in publish order becomes active
-- and due (pending or ready by its own due time). Returns true when a message was released.
local function release_key(gk, okey, id, ts)
  if okey == nil or okey == '' or redis.call('HGET', gk.active, okey) ~= id then return false end
  local nxt = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. okey .. '\0', '(' .. okey .. '\1', 'LIMIT', 0, 1)
  if #nxt == 0 then
    redis.call('HDEL', gk.active, okey)
    return false
  end
  redis.call('ZREM', gk.waiting, nxt[1])
  local rest = string.sub(nxt[1], #okey + 2)
  local due, next_id = string.match(rest, '^%d+%z(%d+)%z(.*)$')
  due = tonumber(due)
  redis.call('HSET', gk.active, okey, next_id)
  redis.call('ZREM', gk.pending, next_id)
  if due <= ts then redis.call('ZADD', gk.ready, due, next_id) else redis.call('ZADD', gk.pending, due, next_id) end
  return true
end

-- Remove a held message's waiting entry (it is being deleted or cancelled while held).
local function unhold(gk, id, score, okey)
  local seq = score - HELD_BASE
  local prefix = okey .. '\0' .. string.format('%015d', seq) .. '\0'
  local m = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. prefix, '(' .. prefix .. '\255', 'LIMIT', 0, 1)
  if m[1] then redis.call('ZREM', gk.waiting, m[1]) end
end

-- Where a message (re)enters an ordered group: active for its key (true) or held behind another.
local function claim_key(gk, gcfg, okey, id)
  if gcfg.ordered ~= '1' or okey == nil or okey == '' then return true end
  local holder = redis.call('HGET', gk.active, okey)
  if not holder then redis.call('HSET', gk.active, okey, id); return true end
  return holder == id
end

-- ---------------------------------------------------------------------------------------------
-- leaving a group

-- `ids` leave group gk for good (acked, cancelled, deleted, purged, evicted, dropped on expiry):
-- per-delivery records go, the ordering key passes on, and the payload is freed by the last group.
local function leave(gk, gcfg, ids, okeys, ts)
  if #ids == 0 then return end
  -- Per-delivery records exist only for messages that failed or were acted on; a healthy stream
  -- has none, and an O(1) HLEN is cheaper than an HDEL of many absent fields.
  for _, key in ipairs({gk.leases, gk.att, gk.info, gk.tracebacks}) do
    if redis.call('HLEN', key) > 0 then redis.call('HDEL', key, unpack(ids)) end
  end
  if redis.call('ZCARD', gk.expiry) > 0 then redis.call('ZREM', gk.expiry, unpack(ids)) end
  if gcfg.ordered == '1' and okeys then
    for j, id in ipairs(ids) do release_key(gk, okeys[j], id, ts) end
  end
  release_payloads(ids)
end

local function fp_member(fp, dead_at, id)
  return fp .. ':' .. string.format('%015d', dead_at) .. ':' .. id
end

local function fp_of(info)
  return (info and info.err and info.err.fp) or 'none'
end

local function unindex_dead(gk, id, info)
  redis.call('ZREM', gk.dead, id)
  if info and info.da then
    local fp = fp_of(info)
    redis.call('ZREM', gk.fp_index, fp_member(fp, info.da, id))
    if redis.call('HINCRBY', gk.fp_count, fp, -1) <= 0 then
      redis.call('HDEL', gk.fp_count, fp)
      redis.call('HDEL', gk.fp_info, fp)
    end
  end
end

local function okey_of(id)
  local h = parse_header(redis.call('HGET', P.msgs, id))
  return h and h.okey or ''
end

-- Removes a message from group gk whatever its state (the caller checked the state it expected).
local function remove_from(gk, gcfg, id, state, score, ts)
  local info = load_info(gk, id)
  local okey = okey_of(id)
  if state == 'dead' then
    unindex_dead(gk, id, info)
  else
    if state == 'pending' and score and score >= HELD_BASE then unhold(gk, id, score, okey) end
    redis.call('ZREM', gk[state], id)
  end
  leave(gk, gcfg, {id}, {okey}, ts)
  return info
end

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

local function to_dead(tcfg, gk, gcfg, group, id, info, att, ts, okey)
  info.da = ts
  local fp = fp_of(info)
  redis.call('ZADD', gk.dead, ts, id)
  redis.call('ZADD', gk.fp_index, 0, fp_member(fp, ts, id))
  redis.call('HINCRBY', gk.fp_count, fp, 1)
  local info_raw = redis.call('HGET', gk.fp_info, fp)
  local ok, fpi = pcall(cjson.decode, info_raw or '')
  if not ok or type(fpi) ~= 'table' then
    fpi = {first_seen = ts, t = info.err and info.err.t or '', m = info.err and info.err.m or '', sample = id}
  end
  fpi.last_seen = ts
  redis.call('HSET', gk.fp_info, fp, cjson.encode(fpi))
  redis.call('HINCRBY', gk.stats, 'dead', 1)
  count_minute(gk, ts, 'dead', 1)
  redis.call('ZREM', gk.expiry, id)
  ev_add('dead', group, id, {att = att, fp = fp})
  if gcfg.hold_on_dead ~= '1' then release_key(gk, okey, id, ts) end
end

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

-- Messages whose data is unreadable become dead letters flagged corrupt, so an operator can see
-- and delete them and no worker ever chokes on them.
local function quarantine(tcfg, gk, gcfg, group, id, ts, reason, corrupt_fp, raw)
  local info = {rc = 0, h = {}, corrupt = reason, err = {t = 'CorruptMessage', m = reason, fp = corrupt_fp}}
  if raw then redis.call('HSET', gk.tracebacks, id, 'raw data: ' .. string.sub(raw, 1, 8000)) end
  push_history(tcfg, info, ts, 'quarantined', attempts_of(gk, id), 'delayq', reason)
  to_dead(tcfg, gk, gcfg, group, id, info, attempts_of(gk, id), ts, okey_of(id))
  save_info(gk, id, info)
end

-- A message's TTL ran out while it waited (pending, ready or retrying; `state` nil when the
-- caller already took it out of its ZSET): dead with the error Expired, or dropped.
local function ttl_expire(tcfg, gk, gcfg, group, id, state, ts, ttl_fp, summary)
  if state then redis.call('ZREM', gk[state], id) end
  redis.call('ZREM', gk.expiry, id)
  redis.call('HINCRBY', gk.stats, 'ttl_expired', 1)
  local att = attempts_of(gk, id)
  if gcfg.on_expire == 'drop' then
    ev_add('ttl_expired', group, id, {att = att, next = 'dropped'})
    leave(gk, gcfg, {id}, {okey_of(id)}, ts)
    return 'dropped'
  end
  local info = load_info(gk, id) or {rc = 0, h = {}}
  info.err = {t = 'Expired', m = summary or 'time to live ran out before the message was handled', fp = ttl_fp}
  push_history(tcfg, info, ts, 'ttl_expired', att, 'delayq', info.err.m)
  ev_add('ttl_expired', group, id, {att = att, next = 'dead'})
  to_dead(tcfg, gk, gcfg, group, id, info, att, ts, okey_of(id))
  save_info(gk, id, info)
  return 'dead'
end

-- Whether a message's TTL has run out (its expiry score is 0 once it ran out while unacked).
local function ttl_over(gk, id, ts)
  local e = redis.call('ZSCORE', gk.expiry, id)
  return e ~= false and e ~= nil and tonumber(e) <= ts
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

local function replay_one(tcfg, gk, gcfg, group, id, ts, delay_ms, actor)
  if not redis.call('ZSCORE', gk.dead, id) then return false end
  local info = load_info(gk, id)
  if not info or info.corrupt or redis.call('HEXISTS', P.msgs, id) == 0 then return false end
  unindex_dead(gk, id, info)
  redis.call('HDEL', gk.att, id)
  info.rc = (info.rc or 0) + 1
  info.da = nil
  local due = ts + delay_ms
  push_history(tcfg, info, ts, 'replayed', 0, actor, '')
  save_info(gk, id, info)
  local okey = okey_of(id)
  if not claim_key(gk, gcfg, okey, id) then
    hold(gk, okey, id, due)
  elseif delay_ms > 0 then
    redis.call('ZADD', gk.pending, due, id)
  else
    redis.call('ZADD', gk.ready, due, id)
  end
  redis.call('HINCRBY', gk.stats, 'replayed', 1)
  ev_add('replayed', group, id, {att = 0, due = due, fp = fp_of(info)})
  return true
end
