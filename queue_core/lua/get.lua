--@include base, record, state
--[[
  get: one message as one group sees it, with its state and score. Read only; O(1). Backs
  DelayQueue.get().

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] id
  Returns {state or '', score or NO_TIME, record or '', info or '', attempts or '', lease or '',
           traceback or '', held-by id or '', "<priority>|<fairness key>" or '',
           "<parent>|<delay ms>|<group>" or '' (waiting for its parent: includes/chain.lua)}: a ready score is the
           due time less the priority's head start (includes/dispatch.lua), undone by the caller.
]]
local id = ARGV[1]
local state, score = state_of(G, id)
local record = redis.call('HGET', P.msgs, id)
local holder = ''
local h = parse_header(record)
if h and h.okey ~= '' then holder = redis.call('HGET', G.active, h.okey) or '' end
-- The score as a string: a Lua number would reach the caller as an integer, without the fraction
-- that says a ready message's priority (includes/dispatch.lua).
return {state or '', score and string.format('%.4f', score) or NO_TIME, record or '', redis.call('HGET', G.info, id) or '', redis.call('HGET', G.att, id) or '',
  redis.call('HGET', G.leases, id) or '', redis.call('HGET', G.tracebacks, id) or '', holder,
  redis.call('HGET', P.dispatch, id) or '', redis.call('HGET', G.chain_parent, id) or ''}
