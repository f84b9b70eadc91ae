--@include dispatch, lateness
--[[
  Ordered groups: one active message per ordering key; the others are held in pending (score
  HELD_BASE + sequence) and listed in publish order in `waiting`, a ZSET of members
  "<key>\0<place>\0<id>\0<due ms>" (place and due as 15 digits, all scores 0, read by lex range).
  A place is a message's sequence, or the one the hold path gave it for undo (includes/hold.lua:
  "one before the first waiting" may be another message's sequence): two messages of one line
  can have the same place, so the id follows it. A message is found by key, place and
  id, never by key and place alone, and a tie goes in id order (creation order) whatever the due
  times. A member written before the id followed the place ("<key>\0<place>\0<due>\0<id>") is
  still read (waiting_parts; includes/waiting.lua finds one).
]]

local function waiting_member(okey, seq, due, id)
  return okey .. '\0' .. string.format('%015d', seq) .. '\0' .. id .. '\0' .. string.format('%015d', due)
end

-- A member of `okey`'s line read: its place and due time (digits as written: a place written
-- before SEQ_BASE may have a sign) and its id. The old format's third part is 15 digits, which no
-- id is (ids.py: 26 characters, then a partition suffix).
local function waiting_parts(okey, m)
  local seq, a, b = string.match(string.sub(m, #okey + 2), '^(%-?%d+)%z([^%z]*)%z(.*)$')
  if #a == 15 and not string.find(a, '%D') then return seq, a, b end
  return seq, b, a
end

-- Hold `id` behind its key's active message (it stays pending, out of the promoter's range).
-- Its sequence starts at SEQ_BASE (keys.py): undo gives places below the first waiting one.
local function hold(gk, okey, id, due)
  local seq = SEQ_BASE + redis.call('HINCRBY', gk.stats, 'oseq', 1)
  redis.call('ZADD', gk.pending, HELD_BASE + seq, id)
  redis.call('ZADD', gk.waiting, 0, waiting_member(okey, seq, due, id))
end

-- The first message in `okey`'s line (publish order) becomes its active one and due (pending or
-- ready by its own due time); the key is free when none waits. Returns true when one was promoted.
-- `prev`: the message that held the key until now (nil: none, as after an undo).
-- The same HSET records the promoted one's place, its sequence, for undo (hold.lua's line_place):
-- whatever promoted it (an ack, a cancel without a hold), a later removal never has to guess it.
-- The sequence may be negative in a line written before SEQ_BASE: read, never refused here.
local function promote_key(gk, okey, ts, prev)
  local nxt = redis.call('ZRANGEBYLEX', gk.waiting, '[' .. okey .. '\0', '(' .. okey .. '\1', 'LIMIT', 0, 1)
  if #nxt == 0 then   -- the line is empty: the key and its recorded place go
    redis.call('HDEL', gk.active, okey, '\1' .. okey)
    return false
  end
  redis.call('ZREM', gk.waiting, nxt[1])
  local seq, due, next_id = waiting_parts(okey, nxt[1])
  due = tonumber(due)
  redis.call('HSET', gk.active, okey, next_id, '\1' .. okey, next_id .. '|' .. seq)
  redis.call('ZREM', gk.pending, next_id)
  if due <= ts then
    if prev then note_key_held(gk, next_id, prev, ts, due) end   -- why it is late, for its claim (lateness.lua)
    to_ready(gk, {next_id}, {due})
  else
    redis.call('ZADD', gk.pending, due, next_id)
  end
  return true
end

-- The active message of `okey` is done with it: the next one in publish order becomes active.
local function release_key(gk, okey, id, ts)
  if okey == nil or okey == '' or redis.call('HGET', gk.active, okey) ~= id then return false end
  return promote_key(gk, okey, ts, id)
end

-- Where a message (re)enters an ordered group: active for its key (true) or held behind another.
local function claim_key(gk, gcfg, okey, id)
  if gcfg.ordered ~= '1' or okey == nil or okey == '' then return true end
  local holder = redis.call('HGET', gk.active, okey)
  if not holder then redis.call('HSET', gk.active, okey, id); return true end
  return holder == id
end
