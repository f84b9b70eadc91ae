--@include base, config, events, info, signal, state
--[[
  reschedule: a pending or retrying message gets a new due time and stays in its state (a time
  already past makes it due now). Backs DelayQueue.reschedule(). Compare-and-set on the states the
  caller saw; a message held behind its ordering key is refused (its turn comes from the key).

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] actor   ARGV[2] group   ARGV[3] due (Redis ms), or "each", or "later"   ARGV[4] allowed
  states "pending,retrying"
  ARGV[5..] ids; with "each" they come in pairs, id then its own due time (DelayQueue.spread spaces
  a backlog over a window this way); "later" is "each" that never moves a message earlier than its
  due time as it is now (spread with not_before: a publish or reschedule racing the spread's read
  of the due times is not undone)

  Returns one code per id: CODE.OK moved, CODE.NOT_FOUND, CODE.STATE_CONFLICT, CODE.DELAY_TOO_LONG
  (due time beyond the topic's max_delay).
]]
local tcfg = load_topic()
local ts = now_ms()
local actor, group = ARGV[1], ARGV[2]
local later = ARGV[3] == 'later'
local each = later or ARGV[3] == 'each'
local step = each and 2 or 1
local allowed = {}
for s in string.gmatch(ARGV[4], '[^,]+') do allowed[s] = true end
local out = {}
local now_due = 0
for i = 5, #ARGV, step do
  local id = ARGV[i]
  local due = tonumber(each and ARGV[i + 1] or ARGV[3])
  if due < ts then due = ts end   -- never earlier than now by Redis's clock
  local state, score = state_of(G, id)
  if not state then
    out[#out + 1] = CODE.NOT_FOUND
  elseif not allowed[state] or (state ~= 'pending' and state ~= 'retrying') or score >= HELD_BASE then
    out[#out + 1] = CODE.STATE_CONFLICT
  elseif due - ts > tcfg.max_delay_ms then
    out[#out + 1] = CODE.DELAY_TOO_LONG
  else
    if later and due < score then due = score end
    redis.call('ZADD', G[state], due, id)
    local att = attempts_of(G, id)
    local info = load_info(G, id)
    if info then
      push_history(tcfg, info, ts, 'rescheduled', att, actor, 'due ' .. due .. ' (was ' .. score .. ')')
      save_info(G, id, info)
    end
    ev_add('rescheduled', group, id, {att = att, due = due, from = state})
    if due <= ts then now_due = now_due + 1 end
    out[#out + 1] = CODE.OK
  end
end
if now_due > 0 then signal_workers(G, now_due) end
ev_flush(tcfg, ts, actor)
return out
