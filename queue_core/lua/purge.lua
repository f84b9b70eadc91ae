--@include base, config, dead, events, hold, info, record, removal
--[[
  purge: delete up to ARGV[2] messages of one state of one group (never unacked). Backs
  DelayQueue.purge(), which calls it until it returns less than the batch, so Redis is never
  blocked by a large purge.

  KEYS: the partition's keys, then the group's keys, then (undo) the operation's holding area.
  ARGV[1] state   ARGV[2] batch size   ARGV[3] actor   ARGV[4] cutoff ms: only members scored <= cutoff
  ARGV[5] group   ARGV[6] entered before (ms, or ''): keep messages that entered the state later
  ARGV[7] offset: how many kept messages to step over at the front of the range

  A message entered its state when it was published or at its latest failure or operator action
  (the last history entry), whichever is later. Promotion (pending or retrying -> ready when due)
  is not recorded: a message due before the confirmation counts as present in ready.

  Returns {deleted, kept, '1' when the holding area's byte cap per call stopped the batch early
  (includes/hold.lua: the caller calls again) else ''}.
]]
local tcfg = load_topic()
local gcfg = load_group()
local ts = now_ms()
hold_open()   -- undo: the holding area passed after the group's keys, if any (includes/hold.lua)
local state, batch, actor, cutoff, group = ARGV[1], tonumber(ARGV[2]), ARGV[3], ARGV[4], ARGV[5]
local entered_before, offset = tonumber(ARGV[6]), tonumber(ARGV[7]) or 0

local function entered_at(id)
  local h = parse_header(redis.call('HGET', P.msgs, id))
  local at = h and h.c or 0
  local info = load_info(G, id)
  if info and #info.h > 0 then at = math.max(at, tonumber(info.h[#info.h][1]) or 0) end
  return at
end

local rows = redis.call('ZRANGEBYSCORE', G[state], '-inf', cutoff, 'WITHSCORES', 'LIMIT', offset, batch)
local n, kept, spent = 0, 0, ''
for i = 1, #rows, 2 do
  local id = rows[i]
  if hold_spent() then
    spent = '1'
    break
  elseif not redis.call('ZSCORE', G[state], id) then
    -- Gone from the state since the read: a parent purged earlier in this call made it a dead
    -- letter (ParentGone, includes/chain.lua); its record is no longer this row's to free.
  elseif entered_before and entered_at(id) > entered_before then
    kept = kept + 1
  else
    local att = attempts_of(G, id)
    hold_take(G, id, state, ts)
    local info = remove_from(G, gcfg, id, state, tonumber(rows[i + 1]), ts, group)
    ev_add('deleted', group, id, {att = att, from = state, fp = fp_of(info)})
    n = n + 1
  end
end
if n > 0 then redis.call('HINCRBY', G.stats, 'deleted', n) end
hold_save()
ev_flush(tcfg, ts, actor)
return {n, kept, spent}
