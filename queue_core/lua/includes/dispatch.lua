--@include base
--[[
  Dispatch control: priorities, fairness keys and the group's limits (GroupConfig.rate,
  max_in_flight, key_rate, max_in_flight_per_key, fairness), all applied by the claim on Redis's
  clock. A held-back message simply stays ready: nothing moves it, so it is never early, lost or
  re-ordered within its key.

  Priority: a ready message's score is its due time minus PRIORITY_STEP_MS per level, so ZPOPMIN
  takes higher priorities first among what is due. The score is fixed when the message becomes
  ready, so a message that became due at d is never passed by one that became due after
  d + 9 * PRIORITY_STEP_MS, whatever its priority: low priorities age instead of starving.

  P.dispatch[id] = "<priority>|<fairness key>" for messages published with either; plain messages
  have no entry, and every reader skips the hash with an O(1) HLEN when the partition has none.

  Fairness: while any ready message of a group has a fairness key, every message entering ready
  is also listed in G.fidx under its key ('' for messages without one), ordered by ready score, and
  G.fring holds each listed key with its virtual time (messages claimed / weight). A claim serves
  the keys with the lowest virtual time first, each its weighted share, so a key with 100,000
  messages and a key with 100 take turns. An entry goes stale when its message leaves ready by
  another path (deleted, killed, expired, rescheduled): the claim checks each entry against
  G.ready and drops stale ones. When the index empties, fairness stops until a keyed message is
  ready again.
]]

local FILL_BATCH = 1000     -- ready messages listed per call when the fairness index starts
-- Fields of G.fkst beside the keys' buckets: a fairness key has no NUL, so these are never one.
local GROUP_BUCKET, FILL_CURSOR = '\0rate', '\0fill'
-- Fairness keys served per claim round: each key's turn is then at least 1/16 of the claim, so its
-- few calls of bookkeeping are shared by several messages; with more keys than that, a key waits
-- about keys/16 claims for its turn.
local RING_LOOK = 16

-- "<priority>|<fairness key>" of each id (false when plain), or nil when the partition has none.
local function dispatch_of(ids)
  if #ids == 0 or redis.call('HLEN', P.dispatch) == 0 then return nil end
  return redis.call('HMGET', P.dispatch, unpack(ids))
end

local function split_dispatch(v)
  if not v then return 0, '' end
  local p, fk = string.match(v, '^(%d)|(.*)$')
  if not p then return 0, '' end
  return tonumber(p), fk
end

local function fair_member(fkey, score, id)
  return fkey .. '\0' .. string.format('%015d', score) .. '\0' .. id
end

-- Keys that are not in the ring join at the head's virtual time: served in the next claim,
-- with no credit for the time they had nothing ready.
local function ring_join(gk, fkeys)
  local head = redis.call('ZRANGE', gk.fring, 0, 0, 'WITHSCORES')
  local vt = head[2] or '0'
  local args, n = {}, 0
  for k in pairs(fkeys) do args[n + 1] = vt; args[n + 2] = k; n = n + 2 end
  if n > 0 then redis.call('ZADD', gk.fring, 'NX', unpack(args)) end
end

-- List up to FILL_BATCH ready messages (scores >= `from`) in the fairness index; leaves a cursor
-- (FILL_CURSOR) for the claim to go on from when there are more.
local function fair_fill(gk, from)
  local rows = redis.call('ZRANGEBYSCORE', gk.ready, from or '-inf', '+inf', 'WITHSCORES', 'LIMIT', 0, FILL_BATCH)
  if #rows == 0 then redis.call('HDEL', gk.fkst, FILL_CURSOR); return end
  local ids = {}
  for i = 1, #rows, 2 do ids[#ids + 1] = rows[i] end
  local disp = dispatch_of(ids)
  local members, keys = {}, {}
  for j, id in ipairs(ids) do
    local _, fk = split_dispatch(disp and disp[j])
    members[#members + 1] = 0; members[#members + 1] = fair_member(fk, tonumber(rows[2 * j]), id)
    keys[fk] = true
  end
  redis.call('ZADD', gk.fidx, unpack(members))
  ring_join(gk, keys)
  if #ids < FILL_BATCH then
    redis.call('HDEL', gk.fkst, FILL_CURSOR)
  else
    local last = tonumber(rows[#rows])
    -- A whole batch on one score moves past it (a rare tie: those left wait for the index to empty).
    redis.call('HSET', gk.fkst, FILL_CURSOR, (from and last <= tonumber(from)) and last + 1 or last)
  end
end

-- `ids` become ready in gk, due at `dues` (numbers or strings): every script that makes a message
-- ready comes through here, so priorities and the fairness index are never skipped.
local function to_ready(gk, ids, dues)
  if #ids == 0 then return end
  local disp = dispatch_of(ids)
  local fair = redis.call('EXISTS', gk.fring) == 1
  if not disp and not fair then
    local z = {}
    for j, id in ipairs(ids) do z[2 * j - 1] = dues[j]; z[2 * j] = id end
    redis.call('ZADD', gk.ready, unpack(z))
    return
  end
  local z, prios, fks = {}, {}, {}
  local keyed = false
  for j, id in ipairs(ids) do
    local p, fk = split_dispatch(disp and disp[j])
    prios[j], fks[j] = p, fk
    if fk ~= '' then keyed = true end
  end
  if keyed and not fair then
    fair_fill(gk, nil)   -- the messages already ready join the index first
    fair = true
  end
  local members, keys = {}, {}
  for j, id in ipairs(ids) do
    local score = tonumber(dues[j]) - prios[j] * PRIORITY_STEP_MS
    z[2 * j - 1] = score; z[2 * j] = id
    if fair then
      members[2 * j - 1] = 0; members[2 * j] = fair_member(fks[j], score, id)
      keys[fks[j]] = true
    end
  end
  redis.call('ZADD', gk.ready, unpack(z))
  if fair then
    redis.call('ZADD', gk.fidx, unpack(members))
    ring_join(gk, keys)
  end
end

-- A token bucket in `hash`.`field` ("tokens|ms"): `n` per `per_ms`, holding at most `cap`.
-- Returns the whole tokens available now and a function that spends `k` of them and says when
-- `cap` tokens will be there again (Redis ms).
local function bucket(hash, field, n, per_ms, cap, ts)
  local raw = redis.call('HGET', hash, field)
  local tokens, last = cap, ts
  if raw then
    local t, l = string.match(raw, '^([^|]+)|(%d+)$')
    if t then tokens, last = tonumber(t), tonumber(l) end
  end
  tokens = math.min(cap, tokens + math.max(0, ts - last) * n / per_ms)
  local function spend(k)
    local left = tokens - k
    redis.call('HSET', hash, field, string.format('%.6f', left) .. '|' .. ts)
    return ts + math.ceil((cap - left) * per_ms / n)
  end
  return math.floor(tokens + 1e-9), spend
end

-- The burst of a rate limit: 1/20 of the period's count (at least 1), so a limited group is
-- claimed in ~20 small steps per period rather than in one burst per period.
local function burst_of(n) return math.max(1, math.ceil(n / 20)) end

-- What the group's own limits allow this partition to claim now (its share of them: limits are
-- split evenly over the topic's partitions, which never share a script on a cluster). Returns the
-- count allowed, the reason it is below `count` (or nil), and a function to call with the count
-- actually claimed, which returns when the rate allows the next claim (or NO_TIME).
local function group_allowance(gk, gcfg, tcfg, partition, count, ts)
  local nparts = tonumber(string.match(tcfg.layout or '1', '^(%d+)')) or 1
  local allowed, reason, spend = count, nil, nil
  if gcfg.mif > 0 then
    local share = math.floor(gcfg.mif / nparts) + ((partition < gcfg.mif % nparts) and 1 or 0)
    local free = math.max(0, share - redis.call('ZCARD', gk.unacked))
    if free < allowed then allowed, reason = free, 'max_in_flight' end
  end
  if gcfg.rate_n > 0 and allowed > 0 then
    local n = gcfg.rate_n / nparts
    local can
    can, spend = bucket(gk.fkst, GROUP_BUCKET, n, gcfg.rate_ms, burst_of(n), ts)
    if can < allowed then allowed, reason = can, 'rate' end
  end
  local function charge(k)
    if spend and (k > 0 or reason == 'rate') then
      local at = spend(k)
      if reason == 'rate' or allowed == k then return at end
    end
    return NO_TIME
  end
  return allowed, reason, charge
end

-- The fairness weights ({key = weight}, '*' for the others) of a group, parsed once per call.
local function weights_of(gcfg)
  if not gcfg.fairness or gcfg.fairness == '' then return nil end
  local ok, w = pcall(cjson.decode, gcfg.fairness)
  if ok and type(w) == 'table' then return w end
  return nil
end

-- What one fairness key may take now under key_rate and max_in_flight_per_key: the count, the
-- reason when limited, and a function (or nil) that spends k and returns when it may go on.
-- `seen`: the ids this claim took already (in flight, though not in unacked until it ends).
local function key_allowance(gk, gcfg, fkey, want, ts, seen)
  local allowed, reason, spend = want, nil, nil
  if gcfg.mif_key > 0 then
    local prefix = fkey .. '\0'
    local rows = redis.call('ZRANGEBYLEX', gk.fkinf, '[' .. prefix, '(' .. fkey .. '\1', 'LIMIT', 0, gcfg.mif_key + 64)
    local live = 0
    if #rows > 0 then
      local ids = {}
      for i, m in ipairs(rows) do ids[i] = string.sub(m, #prefix + 1) end
      local held = redis.call('ZMSCORE', gk.unacked, unpack(ids))
      local gone = {}
      for i, m in ipairs(rows) do
        if held[i] or seen[ids[i]] then live = live + 1 else gone[#gone + 1] = m end
      end
      if #gone > 0 then redis.call('ZREM', gk.fkinf, unpack(gone)) end
    end
    local free = math.max(0, gcfg.mif_key - live)
    if free < allowed then allowed, reason = free, 'key_in_flight' end
  end
  if gcfg.key_rate_n > 0 and allowed > 0 then
    local can
    can, spend = bucket(gk.fkst, fkey, gcfg.key_rate_n, gcfg.key_rate_ms, burst_of(gcfg.key_rate_n), ts)
    if can < allowed then allowed, reason = can, 'key_rate' end
  end
  return allowed, reason, spend
end

-- Claim up to `count` ready ids by fairness key. Returns ids, their ready scores, the fairness
-- key of each, the reasons keys were held back ({reason = n}) and the earliest time a held key
-- may go on (NO_TIME: none, or only in-flight limits, which an ack ends).
local function fair_take(gk, gcfg, count, ts)
  local weights = weights_of(gcfg)
  local default_w = weights and tonumber(weights['*']) or 1
  local ids, scores, fkeys, held, next_ms = {}, {}, {}, {}, NO_TIME
  local seen, blocked = {}, {}
  for _ = 1, 8 do
    local left = count - #ids
    if left <= 0 then break end
    local ring = redis.call('ZRANGE', gk.fring, 0, RING_LOOK - 1, 'WITHSCORES')
    local keys, wsum = {}, 0
    for i = 1, #ring, 2 do
      if not blocked[ring[i]] then
        local w = weights and tonumber(weights[ring[i]]) or default_w
        keys[#keys + 1] = {ring[i], tonumber(ring[i + 1]), w}
        wsum = wsum + w
      end
    end
    if #keys == 0 then break end
    local progress = false   -- entries taken or dropped as stale: another round may find more
    local round = left   -- each key's weighted share of what this round may take
    for _, entry in ipairs(keys) do
      local fkey, vt, w = entry[1], entry[2], entry[3]
      left = count - #ids
      if left <= 0 then break end
      local want = math.max(1, math.floor(round * w / wsum + 0.5))
      local can, reason, spend = key_allowance(gk, gcfg, fkey, math.min(want, left), ts, seen)
      if can <= 0 then
        blocked[fkey] = true
        held[reason] = (held[reason] or 0) + 1
        if spend then
          local at = spend(0)
          if next_ms < 0 or at < next_ms then next_ms = at end
        end
        -- Behind every other key, so keys that may go on are looked at first next time.
        local tail = redis.call('ZRANGE', gk.fring, -1, -1, 'WITHSCORES')
        redis.call('ZADD', gk.fring, 'XX', math.max(vt, tonumber(tail[2] or vt)) + 1, fkey)
      else
        local prefix = fkey .. '\0'
        local rows = redis.call('ZRANGEBYLEX', gk.fidx, '[' .. prefix, '(' .. fkey .. '\1', 'LIMIT', 0, can)
        if #rows > 0 then
          redis.call('ZREM', gk.fidx, unpack(rows))
          local cand = {}
          for i, m in ipairs(rows) do cand[i] = string.match(string.sub(m, #prefix + 1), '^%d+%z(.*)$') end
          local live = redis.call('ZMSCORE', gk.ready, unpack(cand))
          local got, take = 0, {}
          for i, id in ipairs(cand) do
            if live[i] and not seen[id] then
              seen[id] = true
              take[#take + 1] = id
              ids[#ids + 1] = id; scores[#ids] = live[i]; fkeys[#ids] = fkey
              got = got + 1
            end
          end
          progress = true
          if got > 0 then
            redis.call('ZREM', gk.ready, unpack(take))
            if gcfg.mif_key > 0 then
              local inf = {}
              for i, id in ipairs(take) do inf[2 * i - 1] = 0; inf[2 * i] = prefix .. id end
              redis.call('ZADD', gk.fkinf, unpack(inf))
            end
          end
          if spend then
            local at = spend(got)
            if got >= can and reason == 'key_rate' and (next_ms < 0 or at < next_ms) then next_ms = at end
          end
          redis.call('ZADD', gk.fring, 'XX', vt + math.max(got, 1) / w, fkey)
        end
        if #rows < can then
          -- Nothing more listed under this key: it leaves the ring (and its rate bucket, once full).
          if redis.call('ZLEXCOUNT', gk.fidx, '[' .. prefix, '(' .. fkey .. '\1') == 0 then
            redis.call('ZREM', gk.fring, fkey)
          end
        end
      end
    end
    if not progress then break end
  end
  return ids, scores, fkeys, held, next_ms
end
