--@include chain_release, config, dead, events, info, minutes, state
--[[
  chain: a message published with after=<parent id> waits in one group until that group acks its
  parent (publish.lua, ack.lua, includes/leave.lua).

  The child lives in its parent's partition and only in the group whose ack releases it: pending
  with score WAITING_SCORE (beyond every due time and held score, so nothing promotes it), listed
  in gk.chain_parent (child -> "<parent>|<delay ms>|<group>") and gk.chain_children ("<parent>\0<child>").
    parent acked          its children become due `delay` ms after the ack, inside the ack's
                          script: a worker killed around the ack cannot split the two
    parent dead           its children keep waiting: a replayed parent that is then acked
                          releases them; deleting the dead parent cuts them (below)
    parent leaves without an ack (cancelled, deleted, purged, evicted, dropped on expiry):
                          its children become dead letters (error ParentGone) in the group, so
                          nothing is lost silently; a replay of one publishes it like any other
  At most MAX_CHILDREN children wait on one parent, and one call releases at most
  CHAIN_RELEASE_BUDGET children (more wait in gk.chain_acked for the group's next ack or claim),
  so an ack's extra work stays bounded.
]]

-- publish.lua's ARGV[2] for a chained publish: 'after|<group>|<parent id>'; nil for 'delay'/'at'.
-- The group's index among the call's key blocks comes from the layout (ARGV[1]: "<partitions>|<g1,g2,...>").
local function chain_of(mode, layout)
  local group, parent = string.match(mode, '^after|([^|]+)|(.+)$')
  if not group then return nil end
  local gi = 0
  local names = string.match(layout, '^[^|]*|(.*)$') or ''
  for name in string.gmatch(names, '[^,]+') do
    gi = gi + 1
    if name == group then return {group = group, parent = parent, gi = gi} end
  end
  return {group = group, parent = parent, gi = nil}
end

-- The refusal for a chained publish of `count` messages whose parent cannot release them, or nil.
local function chain_refusal(chain, count)
  if not chain.gi then return {CODE.NOT_FOUND, 'group', chain.group} end
  local gk = group_keys(chain.gi)
  if not state_of(gk, chain.parent) then return {CODE.NOT_FOUND, 'parent', chain.parent} end
  local lo = '[' .. child_member(chain.parent, '')
  local hi = '(' .. chain.parent .. '\1'
  local n = redis.call('ZLEXCOUNT', gk.chain_children, lo, hi)
  if n + count > MAX_CHILDREN then return {CODE.STATE_CONFLICT, 'children', n} end
  return nil
end

-- `ids` (just stored) wait for the chain's parent in its group; `delay_ms` counts from its ack.
local function publish_after(tcfg, chain, ids, delay_ms, ttl, ts, actor)
  local gk = group_keys(chain.gi)
  local gcfg = load_group(gk)
  local z, links, members, x = {}, {}, {}, {}
  local link = chain.parent .. '|' .. string.format('%d', delay_ms) .. '|' .. chain.group
  local life = ttl > 0 and ttl or gcfg.ttl_ms
  for j, id in ipairs(ids) do
    z[2 * j - 1] = WAITING_SCORE; z[2 * j] = id
    links[2 * j - 1] = id; links[2 * j] = link
    members[2 * j - 1] = 0; members[2 * j] = child_member(chain.parent, id)
    if life > 0 then x[#x + 1] = ts + life; x[#x + 1] = id end
  end
  redis.call('ZADD', gk.pending, unpack(z))
  redis.call('HSET', gk.chain_parent, unpack(links))
  redis.call('ZADD', gk.chain_children, unpack(members))
  if #x > 0 then redis.call('ZADD', gk.expiry, unpack(x)) end
  redis.call('HINCRBY', gk.stats, 'published', #ids)
  count_minute(gk, ts, 'published', #ids)
  ev_ids('published', chain.group, ids)
  ev_flush(tcfg, ts, actor, {after = chain.parent})
end

-- Waiting children among `ids` stop waiting (they leave, or their TTL ran out: includes/ttl.lua).
local function chain_unlink(gk, ids)
  local links = redis.call('HMGET', gk.chain_parent, unpack(ids))
  local mine, parents = {}, {}
  for j, id in ipairs(ids) do
    if links[j] then
      mine[#mine + 1] = id
      parents[#parents + 1] = child_member(string.match(links[j], '^([^|]*)|'), id)
    end
  end
  if #mine > 0 then
    redis.call('HDEL', gk.chain_parent, unpack(mine))
    redis.call('ZREM', gk.chain_children, unpack(parents))
  end
end

-- Messages `ids` leave gk for good (includes/leave.lua): a waiting child unlinks itself, and the
-- children of a parent leaving without an ack become dead letters (ack.lua releases first).
local function chain_leave(gk, gcfg, ids, ts)
  chain_unlink(gk, ids)
  local tcfg = nil
  -- A parent the ack's budget left in gk.chain_acked was acked: its children wait for release.
  local deferred = redis.call('EXISTS', gk.chain_acked) == 1
  for _, parent in ipairs(ids) do
    local kids = {}
    if not (deferred and redis.call('ZSCORE', gk.chain_acked, parent)) then kids = take_children(gk, parent) end
    for _, c in ipairs(kids) do
      tcfg = tcfg or load_topic()
      redis.call('ZREM', gk.pending, c.id)
      local info = load_info(gk, c.id) or {rc = 0, h = {}}
      info.err = {t = 'ParentGone', m = 'its parent ' .. parent .. ' left the group without an ack', fp = PARENT_GONE_FP}
      push_history(tcfg, info, ts, 'parent_gone', 0, 'delayq', info.err.m)
      to_dead(tcfg, gk, gcfg, c.group, c.id, info, 0, ts, '')
      save_info(gk, c.id, info)
    end
  end
end
