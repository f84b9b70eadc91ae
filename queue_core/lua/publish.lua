--@include common
--[[
  publish: new messages -> pending (due later) or ready (due now). Backs DelayQueue.publish/publish_many.

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] mode: 'delay' (ARGV[2] = delay ms from Redis now) or 'at' (ARGV[2] = absolute epoch ms)
  ARGV[2] delay ms or epoch ms
  ARGV[3] actor
  ARGV[4] strict: '1' refuses an existing key with DUPLICATE instead of returning its id
  ARGV[5..] per message, 5 fields: id, payload, key ('' = none), headers JSON ('' = none), max_attempts ('0' = topic's)

  Returns {0, id1, id2, ...} (the existing id for a key that is already present), or
          {-1, index, size, cap} payload too large, {-2, existing_id} duplicate (strict),
          {-6, delay_ms, max_delay_ms} delay too long. A refusal writes nothing.
]]
local cfg = load_config()
local ts = now_ms()
local mode, value, actor, strict = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4] == '1'

local due = (mode == 'at') and value or ts + value
if due - ts > cfg.max_delay_ms then return {-6, due - ts, cfg.max_delay_ms} end
if due < ts then due = ts end

-- Validate the whole batch before writing anything: a refusal must leave no half-published batch.
local first = 5
local n = (#ARGV - first + 1) / 5
for i = 0, n - 1 do
  local size = #ARGV[first + i * 5 + 1]
  if size > cfg.max_payload_bytes then return {-1, i, size, cfg.max_payload_bytes} end
end

local result = {0}
local target = (due <= ts) and K.ready or K.pending
local was_earliest = nil
if target == K.pending then
  local head = redis.call('ZRANGE', K.pending, 0, 0, 'WITHSCORES')
  was_earliest = head[2] and tonumber(head[2]) or nil
end
-- Metadata of a new message has a fixed shape, so it is built as a string (no cjson per message),
-- and the batch is written with one multi-field HSET per hash and one multi-member ZADD.
local actor_json = cjson.encode(actor)
local tail = ',"rc":0,"h":[[' .. ts .. ',"published",0,"",' .. actor_json .. ']]}'
local head = '{"att":0,"c":' .. ts .. ',"due":' .. due
local hdr_json = {}
local payload_args, meta_args, z_args = {}, {}, {}
local published = 0
for i = 0, n - 1 do
  local base = first + i * 5
  local id, payload, key, headers, max = ARGV[base], ARGV[base + 1], ARGV[base + 2], ARGV[base + 3], ARGV[base + 4]
  local existing = nil
  if key ~= '' then
    existing = redis.call('HGET', K.dedup, key)
    if existing and redis.call('HEXISTS', K.meta, existing) == 0 then existing = nil end
  end
  if existing then
    if strict then return {-2, existing} end
    result[#result + 1] = existing
  else
    local m = head
    if max ~= '0' then m = m .. ',"max":' .. tonumber(max) end
    if key ~= '' then
      m = m .. ',"key":' .. cjson.encode(key)
      redis.call('HSET', K.dedup, key, id)
    end
    if headers ~= '' then
      hdr_json[headers] = hdr_json[headers] or cjson.encode(headers)
      m = m .. ',"hdr":' .. hdr_json[headers]
    end
    payload_args[#payload_args + 1] = id; payload_args[#payload_args + 1] = payload
    meta_args[#meta_args + 1] = id; meta_args[#meta_args + 1] = m .. tail
    z_args[#z_args + 1] = due; z_args[#z_args + 1] = id
    emit(cfg, {'event', 'published', 'msg', id, 'ts', ts, 'attempt', 0, 'due', due, 'actor', actor})
    published = published + 1
    result[#result + 1] = id
  end
end
if published > 0 then
  redis.call('HSET', K.payloads, unpack(payload_args))
  redis.call('HSET', K.meta, unpack(meta_args))
  redis.call('ZADD', target, unpack(z_args))
end
if published > 0 then
  redis.call('HINCRBY', K.stats, 'published', published)
  count_minute(ts, 'published', published)
  -- Wake sleeping workers only when there is something new for them to act on sooner.
  if target == K.ready then
    signal_workers(published)
  elseif was_earliest == nil or due < was_earliest then
    signal_workers(1)
  end
end
return result
