--@include common
--[[
  replay_edited: replace a dead letter's payload and replay it, in one step. Compare-and-set: the
  message must still be dead and its payload must still be what the operator edited (ARGV[3]),
  so two operators editing at once cannot overwrite each other. Backs DelayQueue.replay_edited().

  KEYS: the topic's keys in TopicKeys order (keys.py).
  ARGV[1] id   ARGV[2] new payload   ARGV[3] sha1 hex of the payload the operator saw   ARGV[4] actor

  Returns 0 replayed, -4 not found, -5 no longer dead or payload changed meanwhile, -1 too large.
]]
local cfg = load_config()
local ts = now_ms()
local id, payload, seen_sha, actor = ARGV[1], ARGV[2], ARGV[3], ARGV[4]
if not redis.call('ZSCORE', K.dead, id) then
  return redis.call('HEXISTS', K.meta, id) == 1 and -5 or -4
end
local current = redis.call('HGET', K.payloads, id)
if not current or redis.sha1hex(current) ~= seen_sha then return -5 end
if #payload > cfg.max_payload_bytes then return -1 end
redis.call('HSET', K.payloads, id, payload)
if not replay_one(cfg, id, ts, 0, actor) then
  redis.call('HSET', K.payloads, id, current)
  return -5
end
local meta = load_meta(id)
push_history(cfg, meta, ts, 'edited', actor, 'payload edited before replay')
save_meta(id, meta)
signal_workers(1)
return 0
