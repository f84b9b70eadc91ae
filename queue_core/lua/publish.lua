--@include base, batch, budget, chain, config, debounce, dedup, dispatch, events, index, minutes, ordering, record, signal, usage
--[[
  publish: new messages -> pending (due later) or ready (due now), in every group of the
  partition. Backs DelayQueue.publish/publish_many.

  KEYS: the partition's keys, then one block of group keys per group, in the layout's order.
  ARGV[1] layout the caller routed by ("<partitions>|<g1,g2,...>"): a stale one is refused
  ARGV[2] mode: 'delay' (ARGV[3] = delay ms from Redis now) or 'at' (ARGV[3] = absolute epoch ms),
          or 'after|<group>|<parent id>' (ARGV[3] = delay ms from the parent's ack in that group:
          the messages wait in that group alone, includes/chain.lua)
  ARGV[3] delay ms or epoch ms
  ARGV[4] actor
  ARGV[5] the key's rule: '0', or '1' (strict: a held key is refused with DUPLICATE instead of
          returning its id), or '<0|1>|<mode>|<window ms>' with mode unique_for, throttle or
          debounce (includes/dedup.lua, includes/debounce.lua)
  ARGV[6] ttl ms of these messages ('0' = each group's default)
  ARGV[7] key ('' = none; only with one message)   ARGV[8] ordering key ('' = none)
  ARGV[9] headers JSON ('' = none)                  ARGV[10] max_attempts ('0' = the group's)
  ARGV[11] fairness key ('' = none)                ARGV[12] priority ('0'..'9')
  ARGV[13] the topic's indexed fields the caller computed the entries for (its config's 'indexes',
           '' = none): a stale one is refused like a stale layout
  ARGV[14] the messages' index log entries, each naming its message's id ('' = none): a blob
           (indexes.entries_blob), or '@' with the entries' hashes in ARGV[16] and their ids in
           ARGV[17] (indexes.entries_args); appended for the messages written (a debounce's to the
           message it rewrote)
  ARGV[15] the batch the messages join (q.batch(); '' = none): counted per group (includes/batch.lua)
  ARGV[16..] the two arguments ARGV[14]'s '@' names, if any; then per message, 2 fields: id, payload
           (everything else is shared by the call's messages)

  A message's record is the call's header followed by its payload (see includes/record.lua).

  Returns {CODE.OK, id1, id2, ...} (the existing id for a key that is already held), followed, when
          the call has a key, by what happened: 'published', 'duplicate' (the key is held: its id
          is returned), 'throttled' (the same, by a throttle publish) or 'debounced'; or
          {CODE.PAYLOAD_TOO_LARGE, index, size, cap}, {CODE.DUPLICATE, existing_id} (strict),
          {CODE.DELAY_TOO_LONG, delay_ms, max_delay_ms}, {CODE.STALE_LAYOUT, layout},
          {CODE.NOT_FOUND, 'parent'|'group', name} and {CODE.STATE_CONFLICT, 'children', n} (after=),
          {CODE.NOT_FOUND, 'batch', id} and {CODE.STATE_CONFLICT, 'sealed', ms} (ARGV[15]),
          {CODE.TOPIC_FULL, 'messages'|'bytes', used, adding, share, limit} (includes/budget.lua).
          A refusal writes nothing.
]]
local tcfg = load_topic()
local layout = tcfg.layout or ('1|' .. 'default')
if layout ~= ARGV[1] or ARGV[13] ~= (tcfg.indexes or '') then return {CODE.STALE_LAYOUT, layout} end
local ts = now_ms()
local mode, value, actor, ttl = ARGV[2], tonumber(ARGV[3]), ARGV[4], tonumber(ARGV[6])
local rule = key_rule(ARGV[5])
local strict = rule.strict

local due = (mode == 'at') and value or ts + value
if due - ts > tcfg.max_delay_ms then return {CODE.DELAY_TOO_LONG, due - ts, tcfg.max_delay_ms} end
if due < ts then due = ts end

local key, okey, headers, max = ARGV[7], ARGV[8], ARGV[9], ARGV[10]

-- Validate the whole batch before writing anything: a refusal must leave no half-published batch.
local fkey, prio = ARGV[11], ARGV[12]
local entries, taken = index_call_entries(ARGV, 14, 16)   -- (includes/index.lua)
local first, width = 16 + taken, 2
-- Each entry's id is one of the call's, all of one width: a pair that is not would misalign the
-- log from here on (a client's bug; nothing is written).
if entries[1] ~= '' and #entries[2] * INDEX_HASH ~= #entries[1] * #(ARGV[first] or '') then
  return redis.error_reply('publish: the index entries do not match the messages (hashes ' .. #entries[1] ..
    ' bytes, ids ' .. #entries[2] .. ' bytes)')
end
local n = (#ARGV - first + 1) / width
for i = 0, n - 1 do
  local size = #ARGV[first + i * width + 1]
  if size > tcfg.max_payload_bytes then return {CODE.PAYLOAD_TOO_LARGE, i, size, tcfg.max_payload_bytes} end
end
local chain = chain_of(mode, layout)
if chain then
  local refusal = chain_refusal(chain, n)
  if refusal then return refusal end
end
local refused = ARGV[15] ~= '' and batch_refusal(ARGV[15])   -- an open batch of this topic (batch.lua)
if refused then return refused end

-- The header is the same for every message of the call, so it is built once as a string (no
-- cjson), and the batch is written with one multi-field HSET per hash and one ZADD per group.
local header = header_string(ts, max ~= '0' and max or '', ttl > 0 and tostring(ttl) or '', key, okey, headers)
local full = budget_refusal(tcfg, layout, key, rule, ts, #header, ARGV, first, width, n)   -- before any write
if full then return full end
local result = {CODE.OK}
local outcome = 'published'
local new_ids = {}
local record_args, ref_args = {}, {}
local nr = 0
local new_bytes = 0   -- the exact byte count's growth (includes/usage.lua)
for i = 0, n - 1 do
  local base = first + i * width
  local id, payload = ARGV[base], ARGV[base + 1]
  local existing, live = nil, false
  if key ~= '' then existing, live = key_holder(key, ts) end
  if existing and live and rule.mode == 'debounce' and debounceable(key) then
    -- Debounce rewrites the message while no group has started it; else a new one takes the key.
    if debounce(tcfg, existing, payload, due, ts, actor) then
      outcome = 'debounced'
      index_rewritten(existing, index_rehomed(entries, existing))
    else
      existing = nil
    end
  elseif existing then
    if strict then return {CODE.DUPLICATE, existing} end
    outcome = rule.mode == 'throttle' and 'throttled' or 'duplicate'
    if live and rule.mode ~= '' then note_held(tcfg, existing, outcome, ts, actor) end
  end
  if existing then
    result[#result + 1] = existing
  else
    if key ~= '' then take_key(key, id, rule, ts) end
    record_args[nr + 1] = id; record_args[nr + 2] = header .. payload
    new_bytes = new_bytes + record_cost(id, #header + #payload)
    nr = nr + 2
    if NGROUPS > 1 and not chain then ref_args[#ref_args + 1] = id; ref_args[#ref_args + 1] = NGROUPS end
    new_ids[#new_ids + 1] = id
    result[#result + 1] = id
  end
end
local published = #new_ids
if key ~= '' then result[#result + 1] = outcome end
if published == 0 then
  ev_flush(tcfg, ts, actor)   -- a debounce's event
  return result
end
usage_start(tcfg)
hashtable(P.msgs)
redis.call('HSET', P.msgs, unpack(record_args))
if (tonumber(tcfg.max_bytes) or 0) > 0 then usage_add(new_bytes) end   -- kept only with a bytes budget
-- The indexed fields' entries of the messages written: all of the call's but with a key (one
-- message a call), whose existing message's publish wrote its entries.
if published == n then index_write(entries) end
if #ref_args > 0 then redis.call('HSET', P.refs, unpack(ref_args)) end
if fkey ~= '' or prio ~= '0' then
  local d_args, tag = {}, prio .. '|' .. fkey
  for j, id in ipairs(new_ids) do d_args[2 * j - 1] = id; d_args[2 * j] = tag end
  -- Read and written per message by every claim and ack: a listpack (up to 512 fields) would be
  -- scanned end to end by each of those (keys.py HASHTABLE_FIELD).
  hashtable(P.dispatch)
  redis.call('HSET', P.dispatch, unpack(d_args))
end
if ARGV[15] ~= '' then batch_join(ARGV[15], new_ids) end
if chain then
  publish_after(tcfg, chain, new_ids, value, ttl, ts, actor)
  return result
end

for gi = 1, NGROUPS do
  local gk = group_keys(gi)
  local gcfg = load_group(gk)
  local ordered = gcfg.ordered == '1'
  local target = (due <= ts) and gk.ready or gk.pending
  local was_earliest = nil
  if target == gk.pending then
    local head = redis.call('ZRANGE', gk.pending, 0, 0, 'WITHSCORES')
    was_earliest = head[2] and tonumber(head[2]) or nil
  end
  local z_ids, z_dues, x_args = {}, {}, {}
  local life = ttl > 0 and ttl or gcfg.ttl_ms
  local due_s, ends_s = tostring(due), tostring(ts + life)   -- formatted once, not per message
  for _, id in ipairs(new_ids) do
    if ordered and not claim_key(gk, gcfg, okey, id) then
      hold(gk, okey, id, due)
    else
      z_ids[#z_ids + 1] = id; z_dues[#z_dues + 1] = due_s
    end
    if life > 0 then x_args[#x_args + 1] = ends_s; x_args[#x_args + 1] = id end
  end
  -- A group under a group-wide limit: its workers already know about what is ready (they sleep
  -- until the limit allows more), so only a first ready message wakes them, not every publish.
  -- (Per-key limits do not hush it: a new key's message may be claimable at once.)
  local limited = gcfg.rate_n > 0 or gcfg.mif > 0
  local quiet = limited and target == gk.ready and redis.call('ZCARD', gk.ready) > 0
  if #z_ids > 0 then
    if target == gk.ready then
      to_ready(gk, z_ids, z_dues, prio .. '|' .. fkey)
    else
      local z = {}
      for j, id in ipairs(z_ids) do z[2 * j - 1] = due_s; z[2 * j] = id end
      zadd_many(target, z)
    end
  end
  if #x_args > 0 then zadd_many(gk.expiry, x_args) end
  redis.call('HINCRBY', gk.stats, 'published', published)
  count_minute(gk, ts, 'published', published)
  -- Wake sleeping workers only when there is something new for them to act on sooner.
  if #z_ids > 0 and not quiet then
    if target == gk.ready then
      signal_workers(gk, #z_ids)
    elseif was_earliest == nil or due < was_earliest then
      signal_workers(gk, 1)
    end
  end
end
ev_ids('published', '', new_ids)
ev_flush(tcfg, ts, actor, {due = due})
return result
