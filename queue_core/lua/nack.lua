--@include base, batch, config, events, fail, lease, retention, signal
--[[
  nack: unacked -> retrying (by the group's retry policy) or dead (attempts exhausted, reject, or
  TTL over), for a batch of failed deliveries. Backs DelayQueue.nack(), reject() and nack_many().

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] seed (random float in [0, 1) for jitter)   ARGV[2] actor   ARGV[3] group   ARGV[4] ttl_fp
  ARGV[5..] per delivery, 8 fields: id, token, error type, error message (<= 1 KiB), fingerprint,
           traceback (<= 8 KiB, '' = none), retry_in_ms (-1 = by policy), reject ('1' = dead now)

  Returns per delivery: state ('retrying'|'dead') and due_ms (NO_TIME unless retrying), or CODE.LEASE_LOST
  and NO_TIME when the lease is lost.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
math.randomseed(math.floor(tonumber(ARGV[1]) * 2147483647))
local actor, group, ttl_fp = ARGV[2], ARGV[3], ARGV[4]
local out = {}
local dead = 0
for i = 5, #ARGV, 8 do
  local id, token = ARGV[i], ARGV[i + 1]
  local lease = held_lease(G, id, token)
  if not lease then
    out[#out + 1] = CODE.LEASE_LOST; out[#out + 1] = NO_TIME
  else
    local reject = ARGV[i + 7] == '1'
    local state, due = fail(tcfg, G, gcfg, group, id, lease, ts, {t = ARGV[i + 2], m = ARGV[i + 3], fp = ARGV[i + 4]},
      ARGV[i + 5], tonumber(ARGV[i + 6]), math.random(), actor, reject, reject and 'rejected' or 'nacked', ttl_fp)
    if state == 'dead' then dead = dead + 1 end
    out[#out + 1] = state; out[#out + 1] = due
  end
end
if dead > 0 then enforce_retention(tcfg, G, gcfg, group, ts, 100) end
if gcfg.mif > 0 or gcfg.mif_key > 0 then signal_workers(G, 1) end   -- an in-flight limit now has room
ev_flush(tcfg, ts, actor)
return batch_mark(out)   -- 'batch' last when a callback fired (includes/batch.lua)
