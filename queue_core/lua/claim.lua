--@include common
--[[
  claim: ready -> unacked for up to ARGV[1] messages of one group, after bounded upkeep. Backs
  DelayQueue.claim().

  Upkeep first, so a bare claim() loop sees everything that is due and no scheduler is needed:
  promote due pending and retrying messages to ready, expire messages whose TTL ran out, reap
  expired leases (as a failed attempt), evict dead letters past their retention. Each step is
  bounded by ARGV[4].

  The hot path reads and writes each structure once per batch and never touches JSON: attempts
  come from G.att (absent until an attempt failed), the lease is a fixed-format string, and the
  event is one stream entry for the whole batch.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] count          max messages to claim (0 = upkeep only)
  ARGV[2] seed           random float in [0, 1) from the client, for retry jitter of reaped leases
  ARGV[3] actor          worker id, recorded in history and events
  ARGV[4] upkeep_limit   max messages promoted / expired / reaped / evicted per call
  ARGV[5] expired_fp     error fingerprint for "lease expired"
  ARGV[6] corrupt_fp     error fingerprint for quarantined corrupt messages
  ARGV[7] group          the group's name (for events)
  ARGV[8] ttl_fp         error fingerprint for "time to live ran out"

  Returns {now_ms, next_due_ms (-1 = nothing scheduled), paused (0|1), n,
           then n times: id, token, attempt, due_ms, lease_deadline_ms, payload, header, info or ''}
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local count, limit, actor, group = tonumber(ARGV[1]), tonumber(ARGV[4]), ARGV[3], ARGV[7]
local ttl_fp = ARGV[8]
math.randomseed(math.floor(tonumber(ARGV[2]) * 2147483647))

for _, zkey in ipairs({G.pending, G.retrying}) do
  local due = redis.call('ZRANGEBYSCORE', zkey, '-inf', ts, 'WITHSCORES', 'LIMIT', 0, limit)
  if #due > 0 then
    local ids, z = {}, {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]
      z[#z + 1] = due[i + 1]; z[#z + 1] = due[i]
    end
    redis.call('ZREM', zkey, unpack(ids))
    redis.call('ZADD', G.ready, unpack(z))
  end
end

local has_ttl = redis.call('ZCARD', G.expiry) > 0
if has_ttl then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', G.expiry, '(0', ts, 'LIMIT', 0, limit)) do
    local state = state_of(G, id)
    if state == 'unacked' then
      redis.call('ZADD', G.expiry, 0, id)   -- ran out while handled: the attempt finishes first
    elseif state == 'pending' or state == 'ready' or state == 'retrying' then
      ttl_expire(tcfg, G, gcfg, group, id, state, ts, ttl_fp)
    else
      redis.call('ZREM', G.expiry, id)
    end
  end
end

local expired = redis.call('ZRANGEBYSCORE', G.unacked, '-inf', ts, 'LIMIT', 0, limit)
for _, id in ipairs(expired) do
  local lease = parse_lease(redis.call('HGET', G.leases, id))
  if lease then
    fail(tcfg, G, gcfg, group, id, lease, ts, {t = 'LeaseExpired', m = 'lease expired before ack', fp = ARGV[5]}, '',
      -1, math.random(), 'delayq', false, 'expired', ttl_fp)
  else
    redis.call('ZREM', G.unacked, id)
    quarantine(tcfg, G, gcfg, group, id, ts, 'lease record missing', ARGV[6], nil)
  end
end

enforce_retention(tcfg, G, gcfg, group, ts, math.min(limit, 100))
prune_minutes(G, ts)

local paused = gcfg.paused == '1' and 1 or 0
local out = {}
local n_out = 0
if paused == 0 and count > 0 then
  local popped = redis.call('ZPOPMIN', G.ready, count)
  local ids, dues = {}, {}
  for i = 1, #popped, 2 do ids[#ids + 1] = popped[i]; dues[#dues + 1] = tonumber(popped[i + 1]) end
  if #ids > 0 then
    -- One read and one write per structure for the whole batch: each redis.call from Lua has a
    -- fixed cost, which per message would dominate the claim.
    local payloads = redis.call('HMGET', P.payloads, unpack(ids))
    local headers = redis.call('HMGET', P.msgs, unpack(ids))
    local atts = redis.call('HMGET', G.att, unpack(ids))
    local infos = redis.call('HMGET', G.info, unpack(ids))
    local lives = has_ttl and redis.call('ZMSCORE', G.expiry, unpack(ids)) or nil
    local ordered = gcfg.ordered == '1'
    -- Tokens come from one per-group sequence, reserved once for the whole batch.
    local seq = redis.call('HINCRBY', G.stats, 'seq', #ids) - #ids
    local deadline = ts + gcfg.visibility_timeout_ms
    local z_args, lease_args = {}, {}
    for j, id in ipairs(ids) do
      local life = lives and tonumber(lives[j])
      if not payloads[j] or not headers[j] then
        quarantine(tcfg, G, gcfg, group, id, ts, payloads[j] and 'message header missing' or 'payload missing',
          ARGV[6], nil)
      elseif not string.find(headers[j], '^%d+|%d*|%d*|%d+|%d+|') then
        quarantine(tcfg, G, gcfg, group, id, ts, 'message header is not valid delayq data: '
          .. string.sub(headers[j], 1, 200), ARGV[6], headers[j])
      elseif life and life > 0 and life <= ts then
        ttl_expire(tcfg, G, gcfg, group, id, nil, ts, ttl_fp)
      else
        local att = (tonumber(atts[j]) or 0) + 1
        seq = seq + 1
        local token = tostring(seq)
        local okey = ''
        if ordered then
          local h = parse_header(headers[j])
          okey = h and h.okey or ''
        end
        z_args[#z_args + 1] = deadline; z_args[#z_args + 1] = id
        lease_args[#lease_args + 1] = id
        lease_args[#lease_args + 1] = token .. '|' .. att .. '|' .. ts .. '|' .. dues[j] .. '|' .. okey
        ev_add('claimed', group, id, {att = att, due = dues[j]})
        out[#out + 1] = id; out[#out + 1] = token; out[#out + 1] = att; out[#out + 1] = dues[j]
        out[#out + 1] = deadline; out[#out + 1] = payloads[j]; out[#out + 1] = headers[j]
        out[#out + 1] = infos[j] or ''
        n_out = n_out + 1
      end
    end
    if n_out > 0 then
      redis.call('ZADD', G.unacked, unpack(z_args))
      redis.call('HSET', G.leases, unpack(lease_args))
      redis.call('HINCRBY', G.stats, 'claimed', n_out)
    end
  end
end
ev_flush(tcfg, ts, actor)

-- The next moment something becomes actionable, so an idle worker can sleep exactly until then.
local next_due = -1
if paused == 0 and redis.call('ZCARD', G.ready) > 0 then next_due = ts end
for _, zkey in ipairs({G.pending, G.retrying, G.unacked}) do
  local head = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if head[2] then
    local s = tonumber(head[2])
    if s < HELD_BASE and (next_due < 0 or s < next_due) then next_due = s end
  end
end
if has_ttl then
  local head = redis.call('ZRANGEBYSCORE', G.expiry, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if head[2] then
    local s = tonumber(head[2])
    if next_due < 0 or s < next_due then next_due = s end
  end
end
local result = {ts, next_due, paused, n_out}
for _, v in ipairs(out) do result[#result + 1] = v end
return result
