--@include base
-- One message as peek.lua and search.lua return it, appended to `out`: id, score, then record,
-- info, attempts, lease, traceback and dispatch ('' for each that is absent).

local function append_row(out, id, score)
  local n = #out
  out[n + 1] = id; out[n + 2] = score
  out[n + 3] = redis.call('HGET', P.msgs, id) or ''
  out[n + 4] = redis.call('HGET', G.info, id) or ''
  out[n + 5] = redis.call('HGET', G.att, id) or ''
  out[n + 6] = redis.call('HGET', G.leases, id) or ''
  out[n + 7] = redis.call('HGET', G.tracebacks, id) or ''
  out[n + 8] = redis.call('HGET', P.dispatch, id) or ''
end
