--@include
--[[
  dedup: who holds a dedup key, and for how long (publish(..., key=, dedup=, window=)).

  A key is held while its message exists (P.dedup: key -> id) and while its window is open
  (P.dedup_until, a ZSET key -> score):
    score > 0   the window closes at that time (ms): a throttle window counts from the accepted
                publish; a unique_for window from the moment its message was done
    score < 0   a live unique_for message: -score is its window (ms), opened by end_key() when the
                last group is done with the message (acked, cancelled, deleted, purged, evicted,
                dropped on expiry). A dead letter still exists, so it keeps its key: a replay
                keeps its id, and nothing runs the same work twice meanwhile.
  P.dedup keeps the id through the window, so a held key always answers with the id that holds it.

  Bounded by time: entries leave when their window has closed. Every publish with a key trims up
  to DEDUP_TRIM closed windows (ZRANGEBYSCORE with a LIMIT), and so does every claim's upkeep (up
  to 64 a call, claim.lua), which runs whether or not anything is published: after a burst of
  keyed publishes and silence, the workers' idle claims empty the index of closed windows. A claim
  with nothing to trim pays one ZRANGEBYSCORE (on an absent key when the partition has no windows).
]]
local DEDUP_TRIM = 16
-- A live message published with dedup="debounce" is marked in P.dedup_until as this prefix and its
-- key (score -1: never trimmed as a closed window; a dedup key holds no NUL, publish.py refuses
-- one): only such a message may be rewritten by a debounce, never one a plain key merely holds.
local DEBOUNCE_MARK = '\0debounce\0'

-- publish.lua's ARGV[5]: '0' | '1' (strict), or '<strict>|<mode>|<window ms>'.
local function key_rule(arg)
  local s, mode, w = string.match(arg, '^([01])|([a-z_]+)|(%d+)$')
  if not s then return {strict = arg == '1', mode = '', window = 0} end
  return {strict = s == '1', mode = mode, window = tonumber(w)}
end

-- The id holding `key` at ts, and whether that message still exists; nil when the key is free.
local function key_holder(key, ts)
  local id = redis.call('HGET', P.dedup, key)
  if not id then return nil, false end
  if redis.call('HEXISTS', P.msgs, id) == 1 then return id, true end
  local closes = tonumber(redis.call('ZSCORE', P.dedup_until, key))
  if closes and closes > ts then return id, false end
  return nil, false
end

-- Closed windows leave the index, at most `n` per call (DEDUP_TRIM when not given); the key's id
-- goes with them unless its message still exists (a live message holds its key by itself).
local function trim_windows(ts, n)
  local closed = redis.call('ZRANGEBYSCORE', P.dedup_until, 0, ts, 'LIMIT', 0, n or DEDUP_TRIM)
  if #closed == 0 then return end
  for _, k in ipairs(closed) do
    local id = redis.call('HGET', P.dedup, k)
    if id and redis.call('HEXISTS', P.msgs, id) == 0 then redis.call('HDEL', P.dedup, k) end
  end
  redis.call('ZREM', P.dedup_until, unpack(closed))
end

-- A new message `id` takes `key` under `rule` (see key_rule). A plain key on a partition without
-- windows costs one ZCARD more than before windows existed.
local function take_key(key, id, rule, ts)
  redis.call('HSET', P.dedup, key, id)
  local any = redis.call('ZCARD', P.dedup_until) > 0
  if rule.mode == 'debounce' then
    redis.call('ZADD', P.dedup_until, -1, DEBOUNCE_MARK .. key)
    if any then redis.call('ZREM', P.dedup_until, key) end     -- no window from an earlier message
  elseif rule.mode == 'unique_for' then
    redis.call('ZADD', P.dedup_until, -rule.window, key)
    if any then redis.call('ZREM', P.dedup_until, DEBOUNCE_MARK .. key) end
  elseif rule.mode == 'throttle' then
    redis.call('ZADD', P.dedup_until, ts + rule.window, key)
    if any then redis.call('ZREM', P.dedup_until, DEBOUNCE_MARK .. key) end
  elseif any then
    redis.call('ZREM', P.dedup_until, key, DEBOUNCE_MARK .. key)   -- no window, no mark from before
  else
    return
  end
  trim_windows(ts)
end

-- Whether the live message holding `key` was published with dedup="debounce" (a debounce may
-- rewrite it; another producer's message that merely holds the key is never rewritten).
local function debounceable(key)
  return redis.call('ZSCORE', P.dedup_until, DEBOUNCE_MARK .. key) ~= false
end

-- Message `id`, holding `key`, is done (its last group let it go): a unique_for window opens now,
-- an open throttle window keeps the key, otherwise the key is free. `windows`: whether the
-- partition has any (one ZCARD per call instead of a ZSCORE per message when it has none).
local function end_key(key, id, ts, windows)
  if redis.call('HGET', P.dedup, key) ~= id then return end
  if windows then redis.call('ZREM', P.dedup_until, DEBOUNCE_MARK .. key) end
  local w = windows and tonumber(redis.call('ZSCORE', P.dedup_until, key)) or nil
  if w and w < 0 then
    redis.call('ZADD', P.dedup_until, ts - w, key)
  elseif not (w and w > ts) then
    redis.call('HDEL', P.dedup, key)
    if w then redis.call('ZREM', P.dedup_until, key) end
  end
end
