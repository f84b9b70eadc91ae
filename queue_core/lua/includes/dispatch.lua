--@include base
--[[
  Dispatch control: priorities, fairness keys and the group's limits (GroupConfig.rate,
  max_in_flight, key_rate, max_in_flight_per_key, fairness), all applied by the claim on Redis's
  clock. A held-back message simply stays ready: nothing moves it, so it is never early, lost or
  re-ordered within its key.

  Priority: a ready message's score is its due time minus PRIORITY_STEP_MS per level, plus the
  level / 16 (so the score alone says both: ready_due()), so ZPOPMIN takes higher priorities
  first among what is due. The score is fixed when the message becomes
  ready, so a message that became due at d is never passed by one that became due after
  d + 9 * PRIORITY_STEP_MS, whatever its priority: low priorities age instead of starving.

  P.dispatch[id] = "<priority>|<fairness key>" for messages published with either; plain messages
  have no entry, and every reader skips the hash with an O(1) HLEN when the partition has none.

  Fairness: while the ready messages of a group have two keys or more ('' for messages without
  one is a key too), every message entering ready is also listed in G.fidx under its key, ordered
  by ready score, and G.fring holds each listed key with its virtual time (messages claimed /
  weight). A claim serves the keys with the lowest virtual time first, each its weighted share,
  so a key with 100,000 messages and a key with 100 take turns. An entry goes stale when its
  message leaves ready by another path (deleted, killed, expired, rescheduled): the claim checks
  each entry against G.ready and drops stale ones.
  While every ready message has one key, there is nobody to be fair between: nothing is listed,
  claims pop ready as plain ones do, and G.fsolo names that key (absent: no key). A message of
  another key starts fairness: a fill lists what is ready (FILL_BATCH a claim), G.fsolo then
  naming the key of what it has not listed yet. Fairness ends when one key is left in the ring
  and every ready message is known to have it (listed, or unlisted and of G.fsolo's key). One
  tenant's backlog thus costs what unkeyed messages cost; a second tenant pays the index only
  while both have messages ready. Per-key limits (key_rate, max_in_flight_per_key) need the
  index whatever the keys: then a claim starts fairness for a single key too, and it ends only
  when no key but '' is left.
]]

local FILL_BATCH = 1000     -- ready messages listed per call when the fairness index starts
-- Fields of G.fkst beside the keys' buckets: a fairness key has no NUL, so these are never one
-- (nor '\0hashtable', fair_take's keep-alive field).
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
  -- By bytes, not string.match: called per message by promotions, the fill and the ack, where a
  -- pattern match cost more than the rest of the message's bookkeeping.
  local p = v and string.byte(v, 1)
  if not p or p < 48 or p > 57 or string.byte(v, 2) ~= 124 then return 0, '' end   -- '0'..'9', '|'
  return p - 48, string.sub(v, 3)
end

-- The fairness index member of `id` (without `id`: the prefix its key and score give).
local function fair_member(fkey, score, id)
  return fkey .. '\0' .. string.format('%015d', score) .. '\0' .. (id or '')
end

-- Keys that are not in the ring join at the head's virtual time: served in the next claim,
-- with no credit for the time they had nothing ready.
local function ring_join(gk, fkeys)
  local head = redis.call('ZRANGE', gk.fring, 0, 0, 'WITHSCORES')
  local vt = head[2] or '0'
  local args, n = {}, 0
  for k in pairs(fkeys) do args[n + 1] = vt; args[n + 2] = k; n = n + 2 end
  if n == 0 then return end
  if not head[1] then
    -- A new ring starts as a skiplist: each claim round moves up to RING_LOOK keys, and in a
    -- listpack (up to 128 keys) every move scans the whole ring twice (callgrind, 100 keys:
    -- ~4k Redis instructions a message). A member longer than a listpack holds converts it, and
    -- removing it does not convert back (a restart loads a small ring as a listpack again).
    redis.call('ZADD', gk.fring, '0', HASHTABLE_VALUE)
    redis.call('ZADD', gk.fring, 'NX', unpack(args))
    redis.call('ZREM', gk.fring, HASHTABLE_VALUE)
  else
    redis.call('ZADD', gk.fring, 'NX', unpack(args))
  end
end

-- List the next FILL_BATCH ready messages in the fairness index, after `cursor` ("score|id" of
-- the last one listed; nil: from the start), and leave a cursor (FILL_CURSOR) for the claim to
-- go on from while there are more. By rank, so any number sharing one score is walked through.
local function fair_fill(gk, cursor)
  local start = 0
  if cursor then
    local score, last = string.match(cursor, '^([^|]+)|(.*)$')
    -- Its rank only while it is where the fill left it: a message that left ready and came back
    -- (a debounce, a release) sits elsewhere, and resuming there would skip what lies between.
    local rank = last and redis.call('ZSCORE', gk.ready, last) == score and redis.call('ZRANK', gk.ready, last)
    if rank then
      start = rank + 1
    elseif score then
      -- The cursor's message has left ready: from the first of its score (listing again is harmless).
      start = redis.call('ZCOUNT', gk.ready, '-inf', '(' .. score)
    end
  end
  local rows = redis.call('ZRANGE', gk.ready, start, start + FILL_BATCH - 1, 'WITHSCORES')
  if #rows == 0 then redis.call('HDEL', gk.fkst, FILL_CURSOR); return end
  local ids = {}
  for i = 1, #rows, 2 do ids[#ids + 1] = rows[i] end
  local disp = dispatch_of(ids)
  local members, keys = {}, {}
  for j, id in ipairs(ids) do
    local _, fk = split_dispatch(disp and disp[j])
    members[#members + 1] = '0'; members[#members + 1] = fair_member(fk, tonumber(rows[2 * j]), id)
    keys[fk] = true
  end
  redis.call('ZADD', gk.fidx, unpack(members))
  ring_join(gk, keys)
  if #ids < FILL_BATCH then
    redis.call('HDEL', gk.fkst, FILL_CURSOR)
  else
    redis.call('HSET', gk.fkst, FILL_CURSOR, rows[#rows] .. '|' .. ids[#ids])
  end
end

-- The due time (a string of whole ms) of a ready score as Redis returns it ("<ms>" or
-- "<ms>.<fraction>": see the priority above).
local function ready_due(score)
  if not string.find(score, '.', 1, true) then return score end
  local sc = tonumber(score)
  local base = math.floor(sc)
  return string.format('%d', base + math.floor((sc - base) * 16 + 0.5) * PRIORITY_STEP_MS)
end

-- A ready message leaving ready by another path than the claim (cancel, delete, purge, expiry):
-- its fairness entry goes with it, so a key's listed entries stay its ready messages.
local function unlist(gk, id, score)
  if not score or redis.call('EXISTS', gk.fring) == 0 then return end
  local _, fk = split_dispatch(redis.call('HGET', P.dispatch, id))
  redis.call('ZREM', gk.fidx, fair_member(fk, score, id))
end

-- `ids` become ready in gk, due at `dues` (numbers or strings): every script that makes a message
-- ready comes through here, so priorities and the fairness index are never skipped.
local function to_ready(gk, ids, dues, tag)
  if #ids == 0 then return end
  local disp = nil
  if not tag then disp = dispatch_of(ids) end
  -- One command tells the usual case: no fairness, and no ready message has a key.
  local modes = redis.call('EXISTS', gk.fring, gk.fsolo)
  if modes == 0 and not disp and (not tag or tag == '0|') then
    local z = {}
    for j, id in ipairs(ids) do z[2 * j - 1] = dues[j]; z[2 * j] = id end
    zadd_many(gk.ready, z)
    return
  end
  local fair = modes > 0 and redis.call('EXISTS', gk.fring) == 1
  local z, prios, fks = {}, {}, {}
  if tag then   -- the caller knows: every id has this "<priority>|<fairness key>" (publish): split once
    local p, fk = split_dispatch(tag)
    for j = 1, #ids do prios[j], fks[j] = p, fk end
  else
    for j = 1, #ids do prios[j], fks[j] = split_dispatch(disp and disp[j]) end
  end
  if not fair then
    -- The one key these ids share (false: several), against the one every ready message has.
    local one = fks[1]
    for j = 2, #ids do if fks[j] ~= one then one = false; break end end
    local solo = modes > 0 and redis.call('GET', gk.fsolo) or ''
    if one ~= solo then
      if one and redis.call('ZCARD', gk.ready) == 0 then   -- nothing ready: a new solo key
        if one == '' then redis.call('DEL', gk.fsolo) else redis.call('SET', gk.fsolo, one) end
      else
        fair_fill(gk, nil)   -- two keys: the messages already ready join the index first
        fair = true
      end
    end
  end
  local members, keys = {}, {}
  -- A run of ids with one due time, priority and key (a publish call's) shares its score string
  -- and index prefix: formatted once, not per message.
  local last_due, last_p, last_fk, score_s, prefix = nil, nil, nil, nil, nil
  for j, id in ipairs(ids) do
    local p, fk = prios[j], fks[j]
    if dues[j] ~= last_due or p ~= last_p or fk ~= last_fk then
      last_due, last_p, last_fk = dues[j], p, fk
      local score = tonumber(dues[j])
      if p > 0 then
        score = score - p * PRIORITY_STEP_MS + p / 16
        -- As a string: Lua would pass the number with 14 significant digits, losing the fraction.
        score_s = string.format('%.4f', score)
      else
        score_s = dues[j]
      end
      if fair then prefix = fair_member(fk, score) end
    end
    z[2 * j - 1] = score_s
    z[2 * j] = id
    if fair then
      -- Scores as strings: a Lua number passed to redis.call is formatted with sprintf each time.
      members[2 * j - 1] = '0'; members[2 * j] = prefix .. id
      keys[fk] = true
    end
  end
  zadd_many(gk.ready, z)
  if fair then
    redis.call('ZADD', gk.fidx, unpack(members))
    ring_join(gk, keys)
  end
end

-- A token bucket "tokens|ms" (or nil: never used, so full): `n` tokens per `per_ms`, holding at
-- most `cap`. The tokens there are at `ts`.
local function refill(raw, n, per_ms, cap, ts)
  local tokens, last = cap, ts
  if raw then
    local t, l = string.match(raw, '^([^|]+)|(%d+)$')
    if t then tokens, last = tonumber(t), tonumber(l) end
  end
  return math.min(cap, tokens + math.max(0, ts - last) * n / per_ms)
end

local function bucket_after(tokens, k, ts) return string.format('%.6f', tokens - k) .. '|' .. ts end

-- When a bucket holding `tokens` - `k` is full again (Redis ms).
local function bucket_full_at(tokens, k, n, per_ms, cap, ts) return ts + math.ceil((cap - (tokens - k)) * per_ms / n) end

-- The bucket in `hash`.`field`: the whole tokens available now, and a function that spends `k`
-- of them and says when the bucket is full again.
local function bucket(hash, field, n, per_ms, cap, ts)
  local tokens = refill(redis.call('HGET', hash, field), n, per_ms, cap, ts)
  local function spend(k)
    redis.call('HSET', hash, field, bucket_after(tokens, k, ts))
    return bucket_full_at(tokens, k, n, per_ms, cap, ts)
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

-- How many messages of the key at `slot` are in flight (G.fkinf: ack removes its entries).
-- Entries of messages that left unacked another way (failed, reaped, released) are dropped only
-- when the count reaches the limit: then each is checked against unacked. `seen`: ids this claim
-- took (in flight, though not in unacked until the claim ends).
local function in_flight_of(gk, slot, limit, seen)
  local n = redis.call('ZCOUNT', gk.fkinf, slot, slot)
  if n < limit then return n end
  local ids = redis.call('ZRANGEBYSCORE', gk.fkinf, slot, slot, 'LIMIT', 0, limit + 64)
  local held = redis.call('ZMSCORE', gk.unacked, unpack(ids))
  local gone = {}
  for i, id in ipairs(ids) do
    if not held[i] and not seen[id] then gone[#gone + 1] = id end
  end
  if #gone > 0 then redis.call('ZREM', gk.fkinf, unpack(gone)) end
  return n - #gone
end

-- Acked ids leave their keys' in-flight counts (ids without a fairness key are simply not there).
local function untrack_in_flight(gk, ids)
  redis.call('ZREM', gk.fkinf, unpack(ids))
end

-- Claim up to `count` ready ids by fairness key. Returns ids, their ready scores, the fairness
-- key of each, the reasons keys were held back ({reason = n}), the earliest time a held key
-- may go on (NO_TIME: none, or only in-flight limits, which an ack ends) and the keys held back
-- ({key = reason}: what lateness.lua blames only that key's messages for). Each round reads one
-- range per key and writes each structure once for all its keys.
local function fair_take(gk, gcfg, count, ts)
  local weights = weights_of(gcfg)
  local default_w = weights and tonumber(weights['*']) or 1
  local ids, scores, fkeys, held, next_ms = {}, {}, {}, {}, NO_TIME
  local seen, blocked = {}, {}   -- blocked: key -> the reason it was held back
  local kr_n, kr_ms = gcfg.key_rate_n, gcfg.key_rate_ms
  local kr_cap = burst_of(kr_n)
  for round = 1, 8 do
    local left = count - #ids
    if left <= 0 then break end
    local ring = redis.call('ZRANGE', gk.fring, 0, RING_LOOK - 1, 'WITHSCORES')
    local keys, wsum = {}, 0
    for i = 1, #ring, 2 do
      if not blocked[ring[i]] then
        local w = weights and tonumber(weights[ring[i]]) or default_w
        keys[#keys + 1] = {key = ring[i], vt = tonumber(ring[i + 1]), w = w}
        wsum = wsum + w
      end
    end
    if #keys == 0 then break end
    -- Each key's weighted share of this round, within its own limits; its listed entries.
    local raws = nil   -- the keys' rate buckets, read in one call
    if kr_n > 0 then
      -- Read and written per key each round: a listpack (up to 128 fields) is scanned by each
      -- (base.lua's hashtable(), under a field no fairness key can be).
      if round == 1 then redis.call('HSETNX', gk.fkst, '\0hashtable', HASHTABLE_VALUE) end
      local names = {}
      for i, k in ipairs(keys) do names[i] = k.key end
      raws = redis.call('HMGET', gk.fkst, unpack(names))
    end
    local members, cand, owner = {}, {}, {}
    local budget = left
    -- Anything done this round (entries read, a key moved behind the others or out of the ring)
    -- may let the next round find more.
    local progress = false
    -- Each key's weighted share, rounded down, and what rounding left over one each to the first
    -- keys in turn order: the shares add up to the whole claim, so keys with enough ready fill it
    -- in one round (a second round of one message a key cost as much bookkeeping as the first).
    local extra = left
    for _, k in ipairs(keys) do extra = extra - math.floor(left * k.w / wsum) end
    for i, k in ipairs(keys) do
      if budget <= 0 then break end
      local share = math.floor(left * k.w / wsum)
      if extra > 0 then share, extra = share + 1, extra - 1 end
      local can = math.min(budget, share)
      if can > 0 then   -- else no share this round (a key after it may have one by its weight)
        local reason = nil
        if gcfg.mif_key > 0 then
          -- The key's score in G.fkinf, shared by its claimed ids: the first 12 hex digits of its
          -- SHA-1 (48 bits, exact as a double; engine/dispatch.py's key_slot is the same). Numbers,
          -- not "<key>\0<id>" members: an ack then removes its ids without reading their keys.
          -- Two keys sharing a slot (about 1 in 10^7 with 10,000 keys) share one count: each is
          -- held back earlier than its limit says, never later.
          k.slot = string.format('%d', tonumber(string.sub(redis.sha1hex(k.key), 1, 12), 16))
          local free = math.max(0, gcfg.mif_key - in_flight_of(gk, k.slot, gcfg.mif_key, seen))
          if free < can then can, reason = free, 'key_in_flight' end
        end
        if raws then
          k.tokens = refill(raws[i], kr_n, kr_ms, kr_cap, ts)
          local whole = math.floor(k.tokens + 1e-9)
          if whole < can then can, reason = whole, 'key_rate' end
        end
        k.can, k.reason, k.got = can, reason, 0
        if can <= 0 then
          blocked[k.key] = reason
          progress = true
          held[reason] = (held[reason] or 0) + 1
          if reason == 'key_rate' then
            local at = bucket_full_at(k.tokens, 0, kr_n, kr_ms, kr_cap, ts)
            if next_ms < 0 or at < next_ms then next_ms = at end
          end
          -- Behind every other key, so keys that may go on are looked at first next time.
          local tail = redis.call('ZRANGE', gk.fring, -1, -1, 'WITHSCORES')
          redis.call('ZADD', gk.fring, 'XX', math.max(k.vt, tonumber(tail[2] or k.vt)) + 1, k.key)
        else
          local prefix = k.key .. '\0'
          local rows = redis.call('ZRANGEBYLEX', gk.fidx, '[' .. prefix, '(' .. k.key .. '\1', 'LIMIT', 0, can)
          k.rows = #rows
          budget = budget - #rows
          local skip = #prefix + 17   -- the prefix, the 15-digit score and its NUL
          for _, m in ipairs(rows) do
            local n = #members + 1
            members[n] = m; cand[n] = string.sub(m, skip); owner[n] = k
          end
        end
      end
    end
    local take, inflight = {}, {}
    local live = {}
    if #members > 0 then
      progress = true
      redis.call('ZREM', gk.fidx, unpack(members))
      live = redis.call('ZMSCORE', gk.ready, unpack(cand))
    end
    for i, id in ipairs(cand) do
      if live[i] and not seen[id] then
        seen[id] = true
        local k = owner[i]
        take[#take + 1] = id
        ids[#ids + 1] = id; scores[#ids] = live[i]; fkeys[#ids] = k.key
        k.got = k.got + 1
        if k.slot then inflight[#inflight + 1] = k.slot; inflight[#inflight + 1] = id end
      end
    end
    if #take > 0 then redis.call('ZREM', gk.ready, unpack(take)) end
    if #inflight > 0 then redis.call('ZADD', gk.fkinf, unpack(inflight)) end
    local turns, spent = {}, {}
    for _, k in ipairs(keys) do
      if k.rows then
        if k.tokens and k.got >= k.can and k.reason == 'key_rate' then
          local at = bucket_full_at(k.tokens, k.got, kr_n, kr_ms, kr_cap, ts)
          if next_ms < 0 or at < next_ms then next_ms = at end
        end
        if k.rows < k.can and redis.call('ZLEXCOUNT', gk.fidx, '[' .. k.key .. '\0', '(' .. k.key .. '\1') == 0 then
          -- Nothing more listed under this key: it leaves the ring, and its rate bucket goes (a key
          -- back within the period may take one burst step early: the price of not keeping a
          -- bucket for every key ever seen).
          redis.call('ZREM', gk.fring, k.key)
          if kr_n > 0 then redis.call('HDEL', gk.fkst, k.key) end
          if kr_n > 0 or gcfg.mif_key > 0 then redis.call('HDEL', gk.key_limits, k.key) end   -- lateness.lua
          progress = true
        else
          turns[#turns + 1] = k.vt + math.max(k.got, 1) / k.w; turns[#turns + 1] = k.key
          if k.tokens and k.got > 0 then
            spent[#spent + 1] = k.key; spent[#spent + 1] = bucket_after(k.tokens, k.got, ts)
          end
        end
      end
    end
    if #turns > 0 then redis.call('ZADD', gk.fring, 'XX', unpack(turns)) end
    if #spent > 0 then redis.call('HSET', gk.fkst, unpack(spent)) end
    if not progress then break end
  end
  -- One key left, and every ready message has it (none unlisted, or the unlisted are G.fsolo's):
  -- fairness has nobody to be fair between, so it ends (claims pop ready as plain ones do) until
  -- a message of another key is ready. Per-key limits keep it on for any key but ''.
  if redis.call('ZCARD', gk.fring) == 1 then
    local last = redis.call('ZRANGE', gk.fring, 0, 0)[1]
    if last == '' or (gcfg.mif_key == 0 and gcfg.key_rate_n == 0) then
      local rest = redis.call('GET', gk.fsolo) or ''
      if last == rest or redis.call('HEXISTS', gk.fkst, FILL_CURSOR) == 0 then
        redis.call('DEL', gk.fring)
        redis.call('UNLINK', gk.fidx)
        redis.call('HDEL', gk.fkst, FILL_CURSOR)
        if last == '' then redis.call('DEL', gk.fsolo) else redis.call('SET', gk.fsolo, last) end
      end
    end
  end
  return ids, scores, fkeys, held, next_ms, blocked
end
