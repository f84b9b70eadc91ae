--@include base, config, dead, events, index, info, leave, record, replay_one, signal, usage
--[[
  replay_edited: replace a dead letter's payload and replay it, in one step. Compare-and-set: the
  message must still be dead and its payload must still be what the operator edited (ARGV[3]),
  so two operators editing at once cannot overwrite each other. Backs DelayQueue.replay_edited().

  The payload is shared by the groups of a topic: when another group still holds the message, the
  edited copy is published to this group alone as a new message (same headers, key kept out) and
  the dead letter is deleted from this group, so no other group's delivery changes under it.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] id   ARGV[2] new payload   ARGV[3] sha1 hex of the payload the operator saw   ARGV[4] actor
  ARGV[5] group   ARGV[6] id for a copy (used only when other groups hold the message)
  ARGV[7] the topic's indexed fields the caller computed ARGV[8] for (a stale one: STALE_LAYOUT)
  ARGV[8] the edited payload's index log entries (indexes.entries_blob, for any id: they are
          written for the message replayed; '' = none)

  Returns {CODE.OK, id replayed}, {CODE.NOT_FOUND}, {CODE.STATE_CONFLICT} (no longer dead or
  payload changed meanwhile), {CODE.PAYLOAD_TOO_LARGE}.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
local id, payload, seen_sha, actor, group, copy_id = ARGV[1], ARGV[2], ARGV[3], ARGV[4], ARGV[5], ARGV[6]
if ARGV[7] ~= (tcfg.indexes or '') then return {CODE.STALE_LAYOUT} end
if not redis.call('ZSCORE', G.dead, id) then
  return {redis.call('HEXISTS', P.msgs, id) == 1 and CODE.STATE_CONFLICT or CODE.NOT_FOUND}
end
local record = redis.call('HGET', P.msgs, id)
local h = parse_header(record)
if not h then return {CODE.STATE_CONFLICT} end
local current = string.sub(record, h.body)
if redis.sha1hex(current) ~= seen_sha then return {CODE.STATE_CONFLICT} end
if #payload > tcfg.max_payload_bytes then return {CODE.PAYLOAD_TOO_LARGE} end
local info = load_info(G, id)
if not info or info.corrupt then return {CODE.STATE_CONFLICT} end
local target = id
if (tonumber(redis.call('HGET', P.refs, id)) or 1) > 1 then
  -- Shared with other groups: this group gets its own copy (no dedup key: the original keeps it);
  -- the original leaves this group.
  target = copy_id
  local copy = header_string(ts, h.max, h.ttl, '', h.okey, h.hdr) .. payload
  redis.call('HSET', P.msgs, target, copy)
  usage_add(record_cost(target, #copy))
  local disp = redis.call('HGET', P.dispatch, id)   -- the copy keeps its priority and fairness key
  if disp then redis.call('HSET', P.dispatch, target, disp) end
  local copy_info = {rc = info.rc or 0, h = info.h, err = info.err}
  unindex_dead(G, id, info)
  leave(G, gcfg, {id}, {h.okey}, ts)
  ev_add('deleted', group, id, {att = 0, from = 'dead', fp = fp_of(info)})
  -- Re-enter as a dead letter of this group so replay_one applies the ordering rules.
  redis.call('ZADD', G.dead, ts, target)
  copy_info.da = nil
  save_info(G, target, copy_info)
else
  redis.call('HSET', P.msgs, id, string.sub(record, 1, h.body - 1) .. payload)
  usage_add(#payload - #current)
end
if not replay_one(tcfg, G, gcfg, group, target, ts, 0, actor) then
  if target == id then redis.call('HSET', P.msgs, id, record); usage_add(#current - #payload) end
  return {CODE.STATE_CONFLICT}
end
-- The edited payload's entries, for the message replayed (in place, its old ones stay: extra candidates).
local entries = index_pair(ARGV[8])
if target == id then index_rewritten(id, index_rehomed(entries, id)) else index_append(index_rehomed(entries, target)) end
info = load_info(G, target)
push_history(tcfg, info, ts, 'edited', 0, actor, 'payload edited before replay')
save_info(G, target, info)
signal_workers(G, 1)
ev_flush(tcfg, ts, actor)
return {CODE.OK, target}
