--@include base, config, dispatch, events, info, record, signal, state, usage
--[[
  debounce: a publish with dedup="debounce" whose key's message has not started anywhere gives
  that message its payload and its due time instead of publishing another (publish.lua).
]]

-- Each group's place of `id` when no group has started it (pending but not held behind its
-- ordering key, or ready, in every group of the partition), else nil: a message one group has
-- claimed, retried, killed or acked is not rewritten under that group's feet.
local function unstarted(id)
  local places = {}
  for gi = 1, NGROUPS do
    local gk = group_keys(gi)
    local state, score = state_of(gk, id)
    if not ((state == 'pending' and score < HELD_BASE) or state == 'ready') then return nil end
    places[gi] = {gk = gk, state = state, score = score}
  end
  return places
end

-- Message `id` takes `payload` (its header stays: created, ttl, headers, ordering key) and the due
-- time `due` in every group; its TTL, if any, counts again from now. Returns false (nothing
-- written) when some group has started it.
local function debounce(tcfg, id, payload, due, ts, actor)
  local places = unstarted(id)
  if not places then return false end
  local record = redis.call('HGET', P.msgs, id)
  local h = parse_header(record)
  if not h then return false end
  redis.call('HSET', P.msgs, id, string.sub(record, 1, h.body - 1) .. payload)
  usage_add(#payload - (#record - h.body + 1))
  for _, place in ipairs(places) do
    local gk, state, score = place.gk, place.state, place.score
    local was = state == 'ready' and ready_due(redis.call('ZSCORE', gk.ready, id)) or string.format('%d', score)
    if state == 'ready' then unlist(gk, id, score) end
    redis.call('ZREM', gk[state], id)
    if due <= ts then to_ready(gk, {id}, {tostring(due)}) else redis.call('ZADD', gk.pending, due, id) end
    signal_workers(gk, 1)   -- its sleeping workers may have timed their wake-up to the old due time
    if redis.call('ZSCORE', gk.expiry, id) then
      local life = h.ttl or load_group(gk).ttl_ms
      if life and life > 0 then redis.call('ZADD', gk.expiry, ts + life, id) end
    end
    local info = load_info(gk, id)
    if info then
      push_history(tcfg, info, ts, 'debounced', attempts_of(gk, id), actor,
                   'payload replaced; due ' .. string.format('%d', due) .. ' (was ' .. was .. ')')
      save_info(gk, id, info)
    end
  end
  ev_add('debounced', '', id, {due = string.format('%d', due)})
  return true
end

-- A windowed publish found its key held by live message `id`: the message's history says so in
-- each group that holds it (`event`: deduplicated or throttled).
local function note_held(tcfg, id, event, ts, actor)
  for gi = 1, NGROUPS do
    local gk = group_keys(gi)
    if state_of(gk, id) then
      local info = load_info(gk, id)
      if info then
        push_history(tcfg, info, ts, event, attempts_of(gk, id), actor, 'a publish with its key returned this id')
        save_info(gk, id, info)
      end
    end
  end
end
