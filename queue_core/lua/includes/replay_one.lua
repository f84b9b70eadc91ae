--@include batch, dead, dispatch, events, info, ordering, record
-- A dead letter back into its group (replay, replay_dead, replay_edited).

local function replay_one(tcfg, gk, gcfg, group, id, ts, delay_ms, actor)
  if not redis.call('ZSCORE', gk.dead, id) then return false end
  local info = load_info(gk, id)
  if not info or info.corrupt or redis.call('HEXISTS', P.msgs, id) == 0 then return false end
  unindex_dead(gk, id, info)
  batch_unend(gk, id)   -- a batch member ends once more (batch.lua)
  redis.call('HDEL', gk.att, id)
  info.rc = (info.rc or 0) + 1
  info.da = nil
  local due = ts + delay_ms
  push_history(tcfg, info, ts, 'replayed', 0, actor, '')
  save_info(gk, id, info)
  local okey = okey_of(id)
  if not claim_key(gk, gcfg, okey, id) then
    hold(gk, okey, id, due)
  elseif delay_ms > 0 then
    redis.call('ZADD', gk.pending, due, id)
  else
    to_ready(gk, {id}, {due})
  end
  redis.call('HINCRBY', gk.stats, 'replayed', 1)
  ev_add('replayed', group, id, {att = 0, due = due, fp = fp_of(info)})
  return true
end
