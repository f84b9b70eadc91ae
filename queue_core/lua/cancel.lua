--@include base, batch, cancels, config, dead, events, fail, hold, info, lease, removal, retention, signal, state
--[[
  cancel: stop messages of one group, the ones a worker is running included. Backs
  DelayQueue.cancel(..., running=True) (cancel without running stays on remove.lua). A message
  in pending, ready or retrying is removed (event 'cancelled', as remove.lua does). An unacked
  one loses its lease at once: it becomes a dead letter with the error Cancelled "cancelled by
  <actor>" in its history (or, with ARGV[3] = '1', is removed), and a mark tells the lease holder
  at its next lease extension (includes/cancels.lua). Any later ack, nack or extend with that
  lease's token is refused: the lease is gone (fencing).

  KEYS: the partition's keys, then the group's keys, then (undo) the operation's holding area.
  ARGV[1] actor   ARGV[2] group   ARGV[3] '1' = remove an unacked message instead of dead-lettering it
  ARGV[4] fingerprint of the Cancelled error   ARGV[5] ttl_fp (a message whose TTL ran out meanwhile)
  ARGV[6] expected states, comma separated (compare-and-set on what the caller saw)
  ARGV[7..] ids

  Returns one code per id: CODE.OK cancelled, CODE.NOT_FOUND, CODE.STATE_CONFLICT (in a state not
  expected).
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
hold_open()   -- undo: the holding area passed after the group's keys, if any (includes/hold.lua)
local actor, group, remove = ARGV[1], ARGV[2], ARGV[3] == '1'
local expected = {}
for s in string.gmatch(ARGV[6], '[^,]+') do expected[s] = true end
local out = {}
local removed, dead = 0, 0
for i = 7, #ARGV do
  local id = ARGV[i]
  local state, score = state_of(G, id)
  if not state then
    out[#out + 1] = CODE.NOT_FOUND
  elseif not expected[state] then
    out[#out + 1] = CODE.STATE_CONFLICT
  else
    local lease = nil
    if state == 'unacked' then
      lease = parse_lease(redis.call('HGET', G.leases, id))
      if lease then mark_cancelled(G, id, lease.tok, score, ts) end
    end
    if lease and not remove then
      fail(tcfg, G, gcfg, group, id, lease, ts, {t = 'Cancelled', m = 'cancelled by ' .. actor, fp = ARGV[4]}, '',
        -1, 0, actor, true, 'cancelled', ARGV[5])
      dead = dead + 1
    else
      local att = attempts_of(G, id)
      hold_take(G, id, state, ts)
      local info = remove_from(G, gcfg, id, state, score, ts, group)
      ev_add('cancelled', group, id, {att = att, from = state, fp = fp_of(info)})
      removed = removed + 1
    end
    out[#out + 1] = CODE.OK
  end
end
if removed > 0 then redis.call('HINCRBY', G.stats, 'cancelled', removed) end
if dead > 0 then enforce_retention(tcfg, G, gcfg, group, ts, 100) end
-- A released ordering key may have made one ready; an in-flight limit now has room.
if removed + dead > 0 and (gcfg.ordered == '1' or gcfg.mif > 0 or gcfg.mif_key > 0) then signal_workers(G, 1) end
hold_save()
ev_flush(tcfg, ts, actor)
return batch_mark(out)   -- 'batch' last when a callback fired (includes/batch.lua)
