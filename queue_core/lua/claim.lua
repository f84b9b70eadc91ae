--@include common
--[[
  claim: ready -> unacked for up to ARGV[1] messages, after bounded upkeep. Backs DelayQueue.claim().

  Upkeep first, so a bare claim() loop sees everything that is due and no scheduler is needed:
  promote due pending and retrying messages to ready, reap expired leases (as a failed attempt),
  evict dead letters past their retention. Each step is bounded by ARGV[4].

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] count          max messages to claim (0 = upkeep only)
  ARGV[2] seed           random float in [0, 1) from the client, for retry jitter of reaped leases
  ARGV[3] actor          worker id, recorded in history and events
  ARGV[4] upkeep_limit   max messages promoted / reaped / evicted per call
  ARGV[5] expired_fp     error fingerprint for "lease expired"
  ARGV[6] corrupt_fp     error fingerprint for quarantined corrupt messages

  Returns {now_ms, next_due_ms (-1 = nothing scheduled), paused (0|1), n,
           then n times: id, token, attempt, due_ms, lease_deadline_ms, payload, meta_json}
]]
local cfg = load_config()
local ts = now_ms()
local count, limit, actor = tonumber(ARGV[1]), tonumber(ARGV[4]), ARGV[3]
math.randomseed(math.floor(tonumber(ARGV[2]) * 2147483647))

for _, zkey in ipairs({K.pending, K.retrying}) do
  local due = redis.call('ZRANGEBYSCORE', zkey, '-inf', ts, 'WITHSCORES', 'LIMIT', 0, limit)
  for i = 1, #due, 2 do
    redis.call('ZREM', zkey, due[i])
    redis.call('ZADD', K.ready, due[i + 1], due[i])
  end
end

local expired = redis.call('ZRANGEBYSCORE', K.unacked, '-inf', ts, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local meta, reason = load_meta(id)
  if meta then
    fail(cfg, id, meta, ts, {t = 'LeaseExpired', m = 'lease expired before ack', fp = ARGV[5]}, '', -1,
      math.random(), 'delayq', false, 'expired', nil)
  else
    redis.call('ZREM', K.unacked, id)
    redis.call('HDEL', K.leases, id)
    quarantine(cfg, id, ts, reason, ARGV[6])
  end
end

enforce_retention(cfg, ts, math.min(limit, 100))
prune_minutes(ts)

local paused = cfg.paused == '1' and 1 or 0
local out = {}
if paused == 0 and count > 0 then
  local popped = redis.call('ZPOPMIN', K.ready, count)
  local ids, dues = {}, {}
  for i = 1, #popped, 2 do ids[#ids + 1] = popped[i]; dues[#dues + 1] = tonumber(popped[i + 1]) end
  if #ids > 0 then
    -- One read and one write per structure for the whole batch: each redis.call from Lua has a
    -- fixed cost, which per message would dominate the claim.
    local metas = redis.call('HMGET', K.meta, unpack(ids))
    local payloads = redis.call('HMGET', K.payloads, unpack(ids))
    -- Tokens come from one per-topic sequence, reserved once for the whole batch.
    local seq = redis.call('HINCRBY', K.stats, 'seq', #ids) - #ids
    local deadline = ts + cfg.visibility_timeout_ms
    local z_args, lease_args, meta_args = {}, {}, {}
    for j, id in ipairs(ids) do
      local meta, reason = decode_meta(metas[j])
      local payload = payloads[j]
      if meta and not payload then meta, reason = nil, 'payload missing' end
      if meta then
        meta.att = meta.att + 1
        seq = seq + 1
        local token = tostring(seq)
        z_args[#z_args + 1] = deadline; z_args[#z_args + 1] = id
        lease_args[#lease_args + 1] = id
        lease_args[#lease_args + 1] = token .. '|' .. meta.att .. '|' .. ts .. '|' .. (meta.key or '')
        push_history(cfg, meta, ts, 'claimed', actor, '')
        local raw = cjson.encode(meta)
        meta_args[#meta_args + 1] = id; meta_args[#meta_args + 1] = raw
        emit(cfg, {'event', 'claimed', 'msg', id, 'ts', ts, 'attempt', meta.att, 'due', dues[j],
          'lateness_ms', ts - dues[j], 'actor', actor})
        out[#out + 1] = id; out[#out + 1] = token; out[#out + 1] = meta.att; out[#out + 1] = dues[j]
        out[#out + 1] = deadline; out[#out + 1] = payload; out[#out + 1] = raw
      else
        quarantine(cfg, id, ts, reason, ARGV[6])
      end
    end
    if #z_args > 0 then
      redis.call('ZADD', K.unacked, unpack(z_args))
      redis.call('HSET', K.leases, unpack(lease_args))
      redis.call('HSET', K.meta, unpack(meta_args))
      redis.call('HINCRBY', K.stats, 'claimed', #z_args / 2)
    end
  end
end

-- The next moment something becomes actionable, so an idle worker can sleep exactly until then.
local next_due = -1
if paused == 0 and redis.call('ZCARD', K.ready) > 0 then next_due = ts end
for _, zkey in ipairs({K.pending, K.retrying, K.unacked}) do
  local head = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if head[2] then
    local s = tonumber(head[2])
    if next_due < 0 or s < next_due then next_due = s end
  end
end
local result = {ts, next_due, paused, #out / 7}
for _, v in ipairs(out) do result[#result + 1] = v end
return result
