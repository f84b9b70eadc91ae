--@include common
--[[
  nack: unacked -> retrying (by the topic's retry policy) or dead (attempts exhausted, or reject).
  Backs DelayQueue.nack() and DelayQueue.reject().

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] id            ARGV[2] token
  ARGV[3] error type    ARGV[4] error message (<= 1 KiB)   ARGV[5] fingerprint
  ARGV[6] traceback (<= 8 KiB, '' = none)
  ARGV[7] retry_in_ms   (-1 = by policy)
  ARGV[8] seed          random float in [0, 1) for jitter
  ARGV[9] actor
  ARGV[10] '1' = dead-letter now (reject)

  Returns {0, state ('retrying'|'dead'), due_ms or -1} or {-3} lease lost.
]]
local cfg = load_config()
local ts = now_ms()
local id, token = ARGV[1], ARGV[2]
local lease = held_lease(id, token)
if not lease or not redis.call('ZSCORE', K.unacked, id) then return {-3} end
local meta = load_meta(id)
if not meta then
  -- Metadata vanished or was overwritten while the handler ran: dead-letter it as corrupt.
  redis.call('ZREM', K.unacked, id)
  redis.call('HDEL', K.leases, id)
  quarantine(cfg, id, ts, 'metadata unreadable at nack', ARGV[5])
  return {0, 'dead', -1}
end
local reject = ARGV[10] == '1'
local state = fail(cfg, id, meta, ts, {t = ARGV[3], m = ARGV[4], fp = ARGV[5]}, ARGV[6], tonumber(ARGV[7]),
  tonumber(ARGV[8]), ARGV[9], reject, reject and 'rejected' or 'nacked', lease.ct)
if state == 'dead' then enforce_retention(cfg, ts, 100) end
return {0, state, state == 'retrying' and meta.due or -1}
