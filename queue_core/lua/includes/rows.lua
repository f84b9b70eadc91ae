--@include base, record
-- One message as peek.lua and search.lua return it, appended to `out`: id, score, then record,
-- info, attempts, lease, traceback, dispatch and holder ('' for each that is absent). The holder
-- is only looked up for a held row (pending behind its ordering key: the score is HELD_BASE plus
-- its place, and no other state scores there): one HGET of the group's `active` hash, so a page
-- that lists held messages says who holds each without a round trip per row.

local function append_row(out, id, score)
  local n = #out
  out[n + 1] = id; out[n + 2] = score
  out[n + 3] = redis.call('HGET', P.msgs, id) or ''
  out[n + 4] = redis.call('HGET', G.info, id) or ''
  out[n + 5] = redis.call('HGET', G.att, id) or ''
  out[n + 6] = redis.call('HGET', G.leases, id) or ''
  out[n + 7] = redis.call('HGET', G.tracebacks, id) or ''
  out[n + 8] = redis.call('HGET', P.dispatch, id) or ''
  local holder, s = '', tonumber(score)
  if s and s >= HELD_BASE and s < WAITING_SCORE then
    local h = parse_header(out[n + 3] ~= '' and out[n + 3] or nil)
    if h and h.okey ~= '' then holder = redis.call('HGET', G.active, h.okey) or '' end
  end
  out[n + 9] = holder
end
