--@include base, debounce, dedup
--[[
  A topic's memory budget (TopicConfig.max_messages / max_bytes), checked by publish.lua before it
  writes anything, so a refused call leaves nothing behind. No script spans partitions, so each
  partition enforces its share: the topic's limit divided by its partitions, rounded up.

  Messages: the partition's message store (P.msgs) holds each message once whatever its groups,
  so HLEN is the count (O(1)). Bytes: Redis's own MEMORY USAGE of that store, sampling
  MEMORY_SAMPLES records (keys.py; O(64), ~2.4 µs): payloads, headers and the hash's overhead, not
  the group indexes (docs/design.md "Memory budgets" says what that leaves out). A topic without a
  budget pays two number comparisons.
]]

local function budget_share(limit, layout)
  local partitions = tonumber(string.match(layout, '^(%d+)')) or 1
  return math.ceil(limit / partitions)
end

-- How many new messages a call of n would write: a keyed call (one message) adds none when its key
-- is held (duplicate, throttled) or its message is rewritten in place (debounce); the same tests
-- publish.lua's loop makes, read-only here.
local function budget_adds(key, rule, ts, n)
  if key == '' then return n end
  local existing, live = key_holder(key, ts)
  if not existing then return n end
  if live and rule.mode == 'debounce' and debounceable(key) then
    return unstarted(existing) and 0 or 1   -- a started message is not rewritten: a new one is written
  end
  return 0
end

-- nil, or publish's refusal {TOPIC_FULL, budget, used, adding, share, limit}.
local function budget_refusal(tcfg, layout, key, rule, ts, header_bytes, first, width, n)
  local max_messages, max_bytes = tonumber(tcfg.max_messages) or 0, tonumber(tcfg.max_bytes) or 0
  if max_messages == 0 and max_bytes == 0 then return nil end
  local adds = budget_adds(key, rule, ts, n)
  if adds == 0 then return nil end
  if max_messages > 0 then
    local share = budget_share(max_messages, layout)
    local used = redis.call('HLEN', P.msgs) - redis.call('HEXISTS', P.msgs, HASHTABLE_FIELD)
    if used + adds > share then return {CODE.TOPIC_FULL, 'messages', used, adds, share, max_messages} end
  end
  if max_bytes > 0 then
    local share = budget_share(max_bytes, layout)
    local used = redis.call('MEMORY', 'USAGE', P.msgs, 'SAMPLES', MEMORY_SAMPLES) or 0
    local bytes = 0
    for i = 0, n - 1 do bytes = bytes + header_bytes + #ARGV[first + i * width + 1] end
    if adds < n then bytes = math.ceil(bytes * adds / n) end
    if used + bytes > share then return {CODE.TOPIC_FULL, 'bytes', used, bytes, share, max_bytes} end
  end
  return nil
end
