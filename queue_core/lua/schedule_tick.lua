--@include base, state
--@wraps publish
--[[
  schedule_tick: decide, by Redis TIME, whether a schedule's tick fires now, and publish it in the
  same atomic call through publish.lua's own code (the loader places it above as publish_script).
  Backs DelayQueue.tick_schedule() (the scheduler loop) and run_schedule_now().

  Exactly once: the tick fired is the schedule's stored next tick (a compare-and-set on ARGV[3]),
  it is never at or before the last tick fired (last_tick), and it is published with the dedup key
  "schedule:<name>:<tick ms>". Any number of schedulers may call at once; one fires, the others
  get 'stale' or 'not_due' and write nothing.

  KEYS: publish.lua's keys (the partition's, then one block per group), the schedule keys
        (P.schedules, P.schedule_due, P.schedule_runs) among the partition's.
  ARGV[1] name    ARGV[2] mode: 'tick' | 'now' (run now: publish a tick at Redis now, no checks)
  ARGV[3] the next tick (ms) the caller computed from (the stored one, or the call is 'stale')
  ARGV[4] layout signature (publish.lua refuses a stale one; nothing is written then)
  ARGV[5] the new message's id    ARGV[6] index of the default group's key block (0 = no such group)
  ARGV[7] ticks the caller skipped after ARGV[3] as older than the catch-up window (counted missed)
  ARGV[8] the last of those (checked against the window here; '0' when none)
  ARGV[9] actor   ARGV[10] '1' when the schedule has more ticks after the ones listed, else '0'
  ARGV[11] the topic's indexed fields and ARGV[12] the tick message's entries, as publish.lua's
           ARGV[13] and ARGV[14] (the caller computes them from the schedule's payload and headers)
  ARGV[13..] the fire times that follow (after the skipped ones), ascending, at most a few dozen

  Returns {outcome, tick, message id or '', next tick or NO_TIME, missed}; outcome is one of
    fired, skipped (overlap), buffered (overlap buffer_one), waiting (buffered tick still blocked),
    behind (every listed tick was too old: call again from "next"), missed (no tick fired),
    not_due (tick = when to look again), stale (next = the stored next tick), idle (paused or
    ended), gone (no such schedule), ended (no more ticks), refused (publish.lua's code in tick).
]]
local name, mode = ARGV[1], ARGV[2]
local BUFFER_RECHECK_MS = 250
local HISTORY = 20
local now = now_ms()
if redis.call('HEXISTS', P.schedules, name) == 0 then return {'gone', 0, '', NO_TIME, 0} end
local function field(f) return name .. '|' .. f end
local function get_num(f) return tonumber(redis.call('HGET', P.schedule_runs, field(f))) end
-- The definition is decoded only once the call is known to act: when several schedulers race for
-- a burst of ticks, the losers' calls ('stale', 'not_due') stay a few lookups each.
local d = nil
local function definition() return cjson.decode(redis.call('HGET', P.schedules, name)) end

-- Recent ticks are written only once the call is sure to succeed (a refused publish writes nothing).
local lines = {}
local function remember(tick, outcome, id, late, count)
  lines[#lines + 1] = tick .. ' ' .. outcome .. ' ' .. (id ~= '' and id or '-') .. ' ' .. late .. ' ' .. (count or 1)
end
local function save_ticks()
  if #lines == 0 then return end
  local newest = {}
  for i = #lines, 1, -1 do newest[#newest + 1] = lines[i] end
  local old = redis.call('HGET', P.schedule_runs, field('ticks'))
  local text = table.concat(newest, '\n') .. (old and ('\n' .. old) or '')
  local cut, pos = 0, 0
  for _ = 1, HISTORY do
    pos = string.find(text, '\n', pos + 1, true)
    if not pos then break end
    cut = pos
  end
  if pos then text = string.sub(text, 1, cut - 1) end
  redis.call('HSET', P.schedule_runs, field('ticks'), text)
end

-- The previous tick's message still waits or runs in the topic's default group (not acked, not dead).
local function busy()
  local idx = tonumber(ARGV[6])
  local last_id = redis.call('HGET', P.schedule_runs, field('last_id'))
  if idx == 0 or not last_id then return false end
  local state = state_of(group_keys(idx), last_id)
  return state ~= nil and state ~= 'dead'
end

-- Publish one tick through publish.lua. Returns the message id, or nil and publish's reply.
local function publish_tick(tick, key)
  local due = tick
  if (d.jitter_ms or 0) > 0 then
    -- The same delay for every scheduler that might fire this tick: a hash of name and tick.
    due = tick + tonumber(string.sub(redis.sha1hex(name .. ':' .. tick), 1, 8), 16) % (d.jitter_ms + 1)
  end
  local headers = d.headers and cjson.decode(d.headers) or {}
  headers['delayq-schedule'] = name
  headers['delayq-tick'] = tostring(tick)
  -- publish.lua's ARGV: layout, mode, time, actor, strict, ttl, key, okey, headers, max_attempts,
  -- fairness key, priority, indexed fields, index entries, batch (none), then id and payload.
  local reply = publish_script({ARGV[4], 'at', tostring(due), ARGV[9], '0', '0', key, '', cjson.encode(headers),
                                tostring(d.max_attempts or 0), '', '0', ARGV[11], ARGV[12], '', ARGV[5],
                                redis.call('HGET', P.schedules, field('payload')) or ''})
  if reply[1] ~= CODE.OK then return nil, reply end
  return reply[2], nil
end

if mode == 'now' then
  d = definition()
  local id, refusal = publish_tick(now, 'schedule:' .. name .. ':now:' .. now)
  if not id then return {'refused', refusal[1], '', NO_TIME, 0} end
  redis.call('HSET', P.schedule_runs, field('last_id'), id)
  remember(now, 'run-now', id, 0)
  save_ticks()
  return {'fired', now, id, get_num('next') or NO_TIME, 0}
end

local look = redis.call('ZSCORE', P.schedule_due, name)
local nxt = get_num('next')
if not look or not nxt then return {'idle', 0, '', NO_TIME, 0} end
if tostring(nxt) ~= ARGV[3] then return {'stale', tonumber(look), '', nxt, 0} end
look = tonumber(look)
if look > now then return {'not_due', look, '', nxt, 0} end
d = definition()

-- A tick buffered by overlap=buffer_one fires as soon as the previous tick's message is done.
local buffered = get_num('buffered')
if buffered then
  if busy() then
    redis.call('ZADD', P.schedule_due, math.min(nxt, now + BUFFER_RECHECK_MS), name)
    if nxt > now then return {'waiting', buffered, '', nxt, 0} end
  else
    local id, refusal = publish_tick(buffered, 'schedule:' .. name .. ':' .. buffered)
    if not id then return {'refused', refusal[1], '', nxt, 0} end
    redis.call('HDEL', P.schedule_runs, field('buffered'))
    redis.call('HSET', P.schedule_runs, field('last_id'), id)
    redis.call('HINCRBY', P.schedule_runs, field('runs'), 1)
    remember(buffered, 'fired', id, now - buffered)
    save_ticks()
    redis.call('ZADD', P.schedule_due, nxt, name)
    return {'fired', buffered, id, nxt, 0}
  end
end

local catchup = tonumber(d.catchup_ms)
local last_tick = get_num('last_tick') or NO_TIME
local missed = 0
local skipped = tonumber(ARGV[7])
if skipped > 0 then
  if now - tonumber(ARGV[8]) <= catchup then return {'stale', look, '', nxt, 0} end
  missed = skipped
  remember(tonumber(ARGV[8]), 'missed', '', now - tonumber(ARGV[8]), skipped)   -- one line for the block
end
local list = {nxt}
for i = 13, #ARGV do list[#list + 1] = tonumber(ARGV[i]) end
local more = ARGV[10] == '1'

local fire, new_next = nil, nil
for i, t in ipairs(list) do
  if t > now then new_next = t; break end
  if t > last_tick then
    if now - t <= catchup then
      fire = t
      new_next = list[i + 1] or (more and t) or nil   -- t itself when the list ends here: look again
      break
    end
    if i == #list and more then new_next = t; break end   -- 'behind': the caller lists from t
    missed = missed + 1
    remember(t, 'missed', '', now - t)
  end
end
if not fire and not new_next and more then new_next = list[#list] end

local outcome, id = 'missed', ''
if fire then
  local runs = get_num('runs') or 0
  if (d.max_runs or 0) > 0 and runs >= d.max_runs then
    fire, new_next = nil, nil
    outcome = 'ended'
  elseif d.overlap ~= 'allow' and busy() then
    if d.overlap == 'buffer_one' and not buffered then
      redis.call('HSET', P.schedule_runs, field('buffered'), fire)
      outcome = 'buffered'
    else
      redis.call('HINCRBY', P.schedule_runs, field('skipped'), 1)
      outcome = 'skipped'
    end
    remember(fire, outcome, '', now - fire)
    redis.call('HSET', P.schedule_runs, field('last_tick'), fire)
  else
    local refusal
    id, refusal = publish_tick(fire, 'schedule:' .. name .. ':' .. fire)
    if not id then return {'refused', refusal[1], '', nxt, 0} end   -- publish wrote nothing; neither do we
    outcome = 'fired'
    redis.call('HSET', P.schedule_runs, field('last_tick'), fire, field('last_id'), id)
    remember(fire, 'fired', id, now - fire)
    if redis.call('HINCRBY', P.schedule_runs, field('runs'), 1) >= (d.max_runs or 0) and (d.max_runs or 0) > 0 then
      new_next = nil   -- that was the last run
    end
  end
elseif not new_next then
  outcome = 'ended'
elseif new_next <= now and more and new_next == list[#list] then
  outcome = 'behind'
end
if outcome == 'missed' and missed == 0 then outcome = 'not_due' end   -- nothing was due after all
if missed > 0 then redis.call('HINCRBY', P.schedule_runs, field('missed'), missed) end
save_ticks()
if new_next then
  redis.call('HSET', P.schedule_runs, field('next'), new_next)
  local look_at = new_next
  if outcome == 'buffered' or get_num('buffered') then look_at = math.min(new_next, now + BUFFER_RECHECK_MS) end
  redis.call('ZADD', P.schedule_due, look_at, name)
else
  redis.call('HDEL', P.schedule_runs, field('next'))
  redis.call('ZREM', P.schedule_due, name)
end
if outcome == 'not_due' then return {outcome, new_next, '', new_next, 0} end
return {outcome, fire or nxt, id, new_next or NO_TIME, missed}
