--@include debounce, dedup, held, record, usage
--[[
  A topic's memory budget (TopicConfig.max_messages / max_bytes), checked by publish.lua before it
  writes anything, so a refused call leaves nothing behind. No script spans partitions, so each
  partition enforces its share: the topic's limit divided by its partitions, rounded up.

  Messages: the partition's message store (P.msgs) holds each message once whatever its groups,
  so HLEN is the count (O(1)). Bytes: the store's exact byte count (includes/usage.lua: each
  record's id, header, payload and RECORD_OVERHEAD_BYTES), one HGET; what a call adds is counted
  the same way, and a debounce adds the difference between its payload and the one it replaces.
  A partition whose count is not kept yet (records from before it existed) falls back to MEMORY
  USAGE sampling MEMORY_SAMPLES records (docs/design.md "Memory budgets"). Messages and bytes held
  for undo in the partition count as used (usage_held_sum). A topic without a budget pays two
  number comparisons.
]]

-- The exact bytes of the store, or nil while they are not kept.
local function usage_bytes() return tonumber(redis.call('HGET', P.usage, USAGE_FIELD)) end

-- Call before writing records: an empty store of a topic with a bytes budget starts the count.
-- Only such a topic keeps one (the removal point pays an HSTRLEN per record while it is kept);
-- configure_topic drops it when the budget goes, so a topic without one pays an HEXISTS per
-- removal call and nothing at publish.
local function usage_start(tcfg)
  if (tonumber(tcfg.max_bytes) or 0) <= 0 or redis.call('HEXISTS', P.usage, USAGE_FIELD) == 1 then return end
  if redis.call('HLEN', P.msgs) - redis.call('HEXISTS', P.msgs, HASHTABLE_FIELD) == 0 then
    redis.call('HSET', P.usage, USAGE_FIELD, 0)
  end
end


local function budget_share(limit, layout)
  local partitions = tonumber(string.match(layout, '^(%d+)')) or 1
  return math.ceil(limit / partitions)
end

-- What a call of n would add: {messages, bytes}. A keyed call (one message) adds nothing when its
-- key is held (duplicate, throttled), and a debounce that rewrites its message in place adds no
-- message and the payload's difference in bytes; the same tests publish.lua's loop makes,
-- read-only here. `args`: publish.lua's ARGV (a wrapping script passes its own), the messages from
-- `first` on, `width` fields each (id, payload); bytes are counted only when `bytes_too`.
local function budget_adds(key, rule, ts, header_bytes, args, first, width, n, bytes_too)
  if key ~= '' then
    local existing, live = key_holder(key, ts)
    if existing then
      if not (live and rule.mode == 'debounce' and debounceable(key)) then return 0, 0 end
      if unstarted(existing) then
        local record = redis.call('HGET', P.msgs, existing)
        local h = parse_header(record)
        if h then return 0, (h.body - 1 + #args[first + 1]) - #record end
      end
      -- a started message is not rewritten: a new one is written
    end
  end
  local bytes = 0
  if bytes_too then
    for i = 0, n - 1 do
      local base = first + i * width
      bytes = bytes + record_cost(args[base], header_bytes + #args[base + 1])
    end
  end
  return n, bytes
end

-- nil, or publish's refusal {TOPIC_FULL, budget, used, adding, share, limit}.
local function budget_refusal(tcfg, layout, key, rule, ts, header_bytes, args, first, width, n)
  local max_messages, max_bytes = tonumber(tcfg.max_messages) or 0, tonumber(tcfg.max_bytes) or 0
  if max_messages == 0 and max_bytes == 0 then return nil end
  local adds, bytes = budget_adds(key, rule, ts, header_bytes, args, first, width, n, max_bytes > 0)
  local held_n, held_b = 0, 0
  if adds > 0 or bytes > 0 then held_n, held_b = usage_held_sum(ts) end   -- kept for undo (usage.lua)
  if max_messages > 0 and adds > 0 then
    local share = budget_share(max_messages, layout)
    local used = redis.call('HLEN', P.msgs) - redis.call('HEXISTS', P.msgs, HASHTABLE_FIELD) + held_n
    if used + adds > share then return {CODE.TOPIC_FULL, 'messages', used, adds, share, max_messages} end
  end
  if max_bytes > 0 and bytes > 0 then
    local share = budget_share(max_bytes, layout)
    local used = (usage_bytes() or redis.call('MEMORY', 'USAGE', P.msgs, 'SAMPLES', MEMORY_SAMPLES) or 0) + held_b
    if used + bytes > share then return {CODE.TOPIC_FULL, 'bytes', used, bytes, share, max_bytes} end
  end
  return nil
end
