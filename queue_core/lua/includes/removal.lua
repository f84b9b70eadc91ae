--@include batch, dead, dispatch, info, leave, record, waiting
-- Operator removals (cancel, delete, purge) from any state.

-- Removes a message from group gk whatever its state (the caller checked the state it expected).
local function remove_from(gk, gcfg, id, state, score, ts, group)
  local info = load_info(gk, id)
  local okey = okey_of(id)
  if state == 'dead' then
    unindex_dead(gk, id, info)
  else
    if state == 'pending' and score and score >= HELD_BASE then unhold(gk, id, score, okey) end
    if state == 'ready' then unlist(gk, id, score) end
    redis.call('ZREM', gk[state], id)
  end
  if state ~= 'dead' then batch_end(gk, group, {id}, 'r', ts) end   -- a dead letter ended already
  leave(gk, gcfg, {id}, {okey}, ts)
  return info
end
