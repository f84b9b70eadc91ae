--@include dispatch, events, signal
--[[
  chain_release: an acked parent's waiting children become due (includes/chain.lua says what a
  chain is). Apart from chain.lua so that claim.lua, which releases what an ack's budget left
  waiting, takes only this (a script may hold at most 200 locals).
]]

local CHAIN_RELEASE_BUDGET = 1000   -- children one call releases (then whole parents wait: <= +99)

local function child_member(parent, child) return parent .. '\0' .. child end

-- The waiting children of `parent` in gk (at most MAX_CHILDREN), each unlinked from it.
local function take_children(gk, parent)
  local members = redis.call('ZRANGEBYLEX', gk.chain_children, '[' .. child_member(parent, ''),
                             '(' .. parent .. '\1', 'LIMIT', 0, MAX_CHILDREN)
  if #members == 0 then return members end
  local ids = {}
  for j, m in ipairs(members) do ids[j] = string.sub(m, #parent + 2) end
  local links = redis.call('HMGET', gk.chain_parent, unpack(ids))
  redis.call('ZREM', gk.chain_children, unpack(members))
  redis.call('HDEL', gk.chain_parent, unpack(ids))
  local out = {}
  for j, id in ipairs(ids) do
    -- Only a child still waiting moves (one leaving in this same call has left pending already).
    if links[j] and redis.call('ZSCORE', gk.pending, id) then
      local delay, group = string.match(links[j], '^[^|]*|(%d+)|(.*)$')
      out[#out + 1] = {id = id, delay = tonumber(delay) or 0, group = group or ''}
    end
  end
  return out
end

-- The children of `parent`, acked at `acked`, become due `delay` after that ack (counted in `r`).
local function release_of(gk, parent, acked, r)
  for _, c in ipairs(take_children(gk, parent)) do
    local due = acked + c.delay
    redis.call('ZREM', gk.pending, c.id)
    if due <= r.ts then
      to_ready(gk, {c.id}, {string.format('%d', due)})
      r.woke = r.woke + 1
    else
      redis.call('ZADD', gk.pending, due, c.id)
      r.woke = math.max(r.woke, 1)
    end
    r.moved = r.moved + 1
    ev_add('released', c.group, c.id, {due = string.format('%d', due), from = parent})
  end
end

-- Parents `ids` were acked in gk (ack.lua; claim.lua passes none): their children become due,
-- `delay` after the ack. At most CHAIN_RELEASE_BUDGET children move in one call (one ack of 500
-- parents with 100 children each held Redis ~0.75 s): the parents beyond it are written to
-- gk.chain_acked with their ack's time in this same call, so the ack and the promise of the
-- release stay one atomic step, and the next ack or claim of the group releases them first
-- (due times still counted from the ack).
local function release_children(gk, ids, ts)
  local r = {woke = 0, moved = 0, ts = ts}
  if redis.call('EXISTS', gk.chain_acked) == 1 then
    local rows = redis.call('ZRANGE', gk.chain_acked, 0, CHAIN_RELEASE_BUDGET - 1, 'WITHSCORES')
    for i = 1, #rows, 2 do
      if r.moved >= CHAIN_RELEASE_BUDGET then break end
      redis.call('ZREM', gk.chain_acked, rows[i])
      release_of(gk, rows[i], tonumber(rows[i + 1]), r)
    end
  end
  local later = {}
  for _, parent in ipairs(ids) do
    if r.moved >= CHAIN_RELEASE_BUDGET then
      later[#later + 1] = ts; later[#later + 1] = parent
    else
      release_of(gk, parent, ts, r)
    end
  end
  if #later > 0 then redis.call('ZADD', gk.chain_acked, unpack(later)) end
  if r.woke > 0 then signal_workers(gk, r.woke) end
end

