--@include base, chain_release, config, dead, dedup, dispatch, events, fail, lateness, lease, minutes, record, retention, state, ttl
--[[
  claim: ready -> unacked for up to ARGV[1] messages of one group, after bounded upkeep. Backs
  DelayQueue.claim().

  Upkeep first, so a bare claim() loop sees everything that is due and no scheduler is needed:
  promote due pending and retrying messages to ready, expire messages whose TTL ran out, reap
  expired leases (as a failed attempt), evict dead letters past their retention, and drop closed
  dedup windows of the partition (includes/dedup.lua: up to 64, so the window index stays bounded
  by time even when no keyed publish comes). Each step is bounded by ARGV[4].

  The hot path reads and writes each structure once per batch and never touches JSON: attempts
  come from G.att (absent until an attempt failed), the lease is a fixed-format string, and the
  event is one stream entry for the whole batch.

  KEYS: the partition's keys, then the group's keys.
  ARGV[1] count          max messages to claim (0 = upkeep only; at most 1,000: engine/consume.py's
                         CALL_MOST keeps z_args and lease_args under Lua's unpack limit)
  ARGV[2] seed           random float in [0, 1) from the client, for retry jitter of reaped leases
  ARGV[3] actor          worker id, recorded in history and events
  ARGV[4] upkeep_limit   max messages promoted / expired / reaped / evicted per call
  ARGV[5] expired_fp     error fingerprint for "lease expired"
  ARGV[6] corrupt_fp     error fingerprint for quarantined corrupt messages
  ARGV[7] group          the group's name (for events)
  ARGV[8] ttl_fp         error fingerprint for "time to live ran out"
  ARGV[9] partition      this partition's number (its share of the group's limits, dispatch.lua)

  Dispatch control (includes/dispatch.lua): the group's limits cut the count first; while ready
  messages carry fairness keys they are taken by key, in turns; what a limit holds back stays
  ready, and next_due_ms is then the time the limits allow more (no time: in-flight limits,
  which an ack lifts and signals).

  Returns {now ("<ms>.<µs>", Redis TIME), next_due_ms (NO_TIME = nothing scheduled), paused (0|1; 2: not paused, but a
           dispatch limit held messages back), n, token, lease_deadline_ms, the topic's layout
           ("<partitions>|<groups>"; nil when never set: a worker that reads another partition
           count than it knows reads the layout again at once, worker/base.py _fetching),
           then n times: id, due_ms, record (header + payload);
           then, for each of them that is not a first delivery or has a delivery record (most have
           neither, and a value a message costs the claim and the worker's reading of its reply):
           its place among the n (1-based), attempt, info or ''}
]]
local tcfg = load_topic()
local gcfg = load_group()
-- TIME once: whole milliseconds for every decision here, and the reply's now with its microseconds,
-- so a worker can tell Redis's clock from its own to better than a millisecond (rules.py
-- FetchSchedule.claimed: a whole-ms now reads up to 1 ms early, and a worker waiting for a due
-- time on that estimate claims up to 1 ms late).
local clock = redis.call('TIME')
local ts = tonumber(clock[1]) * 1000 + math.floor(tonumber(clock[2]) / 1000)
local count, limit, actor, group = tonumber(ARGV[1]), tonumber(ARGV[4]), ARGV[3], ARGV[7]
local ttl_fp = ARGV[8]
local DIGIT = {}
for c = 48, 57 do DIGIT[c] = true end
math.randomseed(math.floor(tonumber(ARGV[2]) * 2147483647))

-- Children of acked parents that the ack's budget left waiting (includes/chain.lua): one EXISTS.
release_children(G, {}, ts)

for _, zkey in ipairs({G.pending, G.retrying}) do
  local due = redis.call('ZRANGEBYSCORE', zkey, '-inf', ts, 'WITHSCORES', 'LIMIT', 0, limit)
  if #due > 0 then
    local ids, dues = {}, {}
    for i = 1, #due, 2 do
      ids[#ids + 1] = due[i]; dues[#dues + 1] = due[i + 1]
    end
    redis.call('ZREM', zkey, unpack(ids))
    to_ready(G, ids, dues)
  end
end

local has_ttl = redis.call('ZCARD', G.expiry) > 0
if has_ttl then
  for _, id in ipairs(redis.call('ZRANGEBYSCORE', G.expiry, '(0', ts, 'LIMIT', 0, limit)) do
    local state = state_of(G, id)
    if state == 'unacked' then
      redis.call('ZADD', G.expiry, 0, id)   -- ran out while handled: the attempt finishes first
    elseif state == 'pending' or state == 'ready' or state == 'retrying' then
      ttl_expire(tcfg, G, gcfg, group, id, state, ts, ttl_fp)
    else
      redis.call('ZREM', G.expiry, id)
    end
  end
end

for _, id in ipairs(redis.call('ZRANGEBYSCORE', G.unacked, '-inf', ts, 'LIMIT', 0, limit)) do
  local lease = parse_lease(redis.call('HGET', G.leases, id))
  if lease then
    fail(tcfg, G, gcfg, group, id, lease, ts, {t = 'LeaseExpired', m = 'lease expired before ack', fp = ARGV[5]}, '',
      -1, math.random(), 'delayq', false, 'expired', ttl_fp)
  else
    redis.call('ZREM', G.unacked, id)
    quarantine(tcfg, G, gcfg, group, id, ts, 'lease record missing', ARGV[6], nil)
  end
end

enforce_retention(tcfg, G, gcfg, group, ts, math.min(limit, 100))
trim_windows(ts, math.min(limit, 64))   -- one ZRANGEBYSCORE when nothing closed (dedup.lua)
prune_minutes(G, ts)

local paused = gcfg.paused == '1' and 1 or 0
-- The reply: seven head values (set at the end), then three a claimed message, then the attempt
-- and info of those that have them (odd), built in place.
local out, odd = {'', 0, 0, 0, '', '', ''}, {}
local token, deadline_s = '', ''
local n_out = 0
local throttled, throttle_next = false, NO_TIME
-- What held messages back, for lateness.lua: .group the group limit's reason, .keys the fairness
-- keys whose own limits held them ({key = reason}). One table, not two locals: a script's main
-- function holds at most 200 locals.
local limited = {}
if paused == 0 and count > 0 then
  -- The ready messages this claim may take (the group's limits, fairness, then the rest by score),
  -- in a function of its own so that its locals end with it: a script's main function holds at
  -- most 200 locals at once, and the include functions it reaches take many of them.
  local ids, dues, fkeys = (function()
    local want, reason, charge = count, nil, nil
    if gcfg.mif > 0 or gcfg.rate_n > 0 then
      want, reason, charge = group_allowance(G, gcfg, tcfg, tonumber(ARGV[9]) or 0, count, ts)
    end
    local ids, dues, fkeys = {}, {}, nil
    local fair = want > 0 and redis.call('EXISTS', G.fring) == 1
    local key_limits = gcfg.mif_key > 0 or gcfg.key_rate_n > 0
    local started = false
    if want > 0 and not fair and key_limits and redis.call('EXISTS', G.fsolo) == 1 then
      -- Every ready message has one key (dispatch.lua: no index for one key), but that key's own
      -- limits are the claim's to apply: the index starts, for that key alone.
      fair_fill(G, nil)
      fair, started = redis.call('EXISTS', G.fring) == 1, true
    end
    if fair then
      local fill = not started and redis.call('HGET', G.fkst, FILL_CURSOR)
      if fill then fair_fill(G, fill) end
      local held, knext
      ids, dues, fkeys, held, knext, limited.keys = fair_take(G, gcfg, want, ts)
      for why, n in pairs(held) do
        redis.call('HINCRBY', G.stats, 'throttled:' .. why, n)
        throttled = true
      end
      throttle_next = knext
      fair = redis.call('EXISTS', G.fring) == 1   -- gone when every listed entry was stale
    end
    -- The ring gone while a fill still has a solo key's messages to list (a claim larger than what
    -- was listed): under per-key limits those wait for the next claim's fill, never a plain pop.
    if #ids < want and not fair and not (key_limits and redis.call('HEXISTS', G.fkst, FILL_CURSOR) == 1
        and redis.call('EXISTS', G.fsolo) == 1) then
      -- Scores stay strings: formatting a Lua number (a double) costs more than the rest of a claim.
      local popped = redis.call('ZPOPMIN', G.ready, want - #ids)
      for i = 1, #popped, 2 do ids[#ids + 1] = popped[i]; dues[#dues + 1] = popped[i + 1] end
    end
    if reason then
      redis.call('HINCRBY', G.stats, 'throttled:' .. reason, 1)
      limited.group = reason
      throttled = true
    end
    if charge then
      local at = charge(#ids)
      if at >= 0 and (throttle_next < 0 or at < throttle_next) then throttle_next = at end
    end
    return ids, dues, fkeys
  end)()
  -- A ready score is the due time less the priority's head start (dispatch.lua): undone here.
  -- Only a message with a priority has one, and each such message has a P.dispatch entry (as has
  -- one with a fairness key): with none in the partition (one HLEN), the scores are the due times.
  if #ids > 0 and redis.call('HLEN', P.dispatch) > 0 then
    for j = 1, #ids do dues[j] = ready_due(dues[j]) end
  end
  if #ids > 0 then
    -- One read and one write per structure for the whole batch: each redis.call from Lua has a
    -- fixed cost, which per message would dominate the claim.
    local records = redis.call('HMGET', P.msgs, unpack(ids))
    -- Attempts and delivery records exist only for messages that failed or were acted on: skip
    -- the reads when the group has none (the healthy case).
    local atts = redis.call('HLEN', G.att) > 0 and redis.call('HMGET', G.att, unpack(ids)) or {}
    local infos = redis.call('HLEN', G.info) > 0 and redis.call('HMGET', G.info, unpack(ids)) or {}
    local lives = has_ttl and redis.call('ZMSCORE', G.expiry, unpack(ids)) or nil
    local ordered = gcfg.ordered == '1'
    -- One fencing token per claim call, from a per-group sequence: checked together with the id,
    -- it still tells this delivery from every earlier or later claim of the same message. The
    -- random part (seeded by the client) keeps that true across a failover that lost the last
    -- claims: the promoted replica's sequence repeats numbers, never whole tokens.
    token = redis.call('HINCRBY', G.stats, 'seq', 1) .. '.' .. string.format('%x', math.random(1, 2147483646))
    deadline_s = tostring(ts + gcfg.visibility_timeout_ms)
    local ts_s = tostring(ts)
    local z_args, lease_args, ev_list, ev_att, ev_due = {}, {}, {}, {}, {}
    -- The lateness histogram of this claim, by bucket. A plain claim's messages come in due order
    -- (priority and fairness claims need not), so one's bucket starts the next one's search, down
    -- or up (a walk up all 15 bounds a message was ~6 % of a backlog's claim + ack in Redis
    -- instructions).
    local late_n, n_bounds, b = {}, #LATE_BOUNDS, 1
    local why, causes, ev_cause = late_facts(G, gcfg, ids), {}, nil   -- why late (lateness.lua)
    -- why's one cause for a backlog, read into locals (why.of sets them on its first late message)
    -- and counted in a local: the per-message table reads and writes were ~5 % of the claim.
    local w_floor, w_kind, w_ending, n_backlog = why.floor, why.kind, why.ending, 0
    local lease_head, lease_mid = token .. '|', '|' .. ts_s .. '|'
    local nz, nl, ne, no = 0, 0, 0, 7   -- explicit lengths: Lua's # is a search, paid per append
    for j = 1, #ids do   -- a numeric for: ipairs calls its iterator function once a message
      local id = ids[j]
      local life = lives and tonumber(lives[j])
      local rec = records[j]
      if not rec then
        quarantine(tcfg, G, gcfg, group, id, ts, 'message record missing (payload and header)', ARGV[6], nil)
      elseif not DIGIT[string.byte(rec, 1)] then   -- a record starts with its creation time
        quarantine(tcfg, G, gcfg, group, id, ts, 'message record is not valid delayq data: '
          .. string.sub(rec, 1, 200), ARGV[6], rec)
      elseif life and life > 0 and life <= ts then
        ttl_expire(tcfg, G, gcfg, group, id, nil, ts, ttl_fp)
      else
        local att_s = atts[j] and tostring(tonumber(atts[j]) + 1) or '1'
        local okey = ''
        if ordered then
          local h = parse_header(rec)
          okey = h and h.okey or ''
        end
        local due_n = tonumber(dues[j])
        local late = ts - due_n
        local cause, kind, ending
        ne = ne + 1
        if late > LATE_CAUSE_MS and due_n > w_floor then   -- a backlog's usual cause: no call
          cause, ending = w_kind, w_ending
          n_backlog = n_backlog + 1
        elseif late > LATE_CAUSE_MS or atts[j] then   -- on time, first attempt (most claims): no call
          cause, kind, ending = why.of(id, due_n, late, atts[j], fkeys and fkeys[j])
          w_floor, w_kind, w_ending = why.floor, why.kind, why.ending
          if cause then causes[kind] = (causes[kind] or 0) + 1 end
        end
        if cause then
          ev_cause = ev_cause or {}
          ev_cause[ne] = cause
        end
        z_args[nz + 1] = deadline_s; z_args[nz + 2] = id
        nz = nz + 2
        lease_args[nl + 1] = id
        lease_args[nl + 2] = lease_head .. att_s .. lease_mid .. dues[j] .. '|' .. okey .. (ending or '')
        nl = nl + 2
        ev_list[ne] = id; ev_att[ne] = att_s; ev_due[ne] = dues[j]
        while b > 1 and late <= LATE_BOUNDS[b - 1] do b = b - 1 end
        while b <= n_bounds and late > LATE_BOUNDS[b] do b = b + 1 end
        late_n[b] = (late_n[b] or 0) + 1
        out[no + 1] = id; out[no + 2] = dues[j]; out[no + 3] = rec
        no = no + 3
        n_out = n_out + 1
        if atts[j] or infos[j] then
          odd[#odd + 1] = n_out; odd[#odd + 1] = att_s; odd[#odd + 1] = infos[j] or ''
        end
      end
    end
    if n_backlog > 0 then causes[w_kind] = (causes[w_kind] or 0) + n_backlog end
    if n_out > 0 then
      ev_ids('claimed', group, ev_list, {att = ev_att, due = ev_due, cause = ev_cause})
      zadd_many(G.unacked, z_args)
      hashtable(G.leases)
      redis.call('HSET', G.leases, unpack(lease_args))
      redis.call('HINCRBY', G.stats, 'claimed', n_out)
      -- A few fields per call, not per message: the alerts' lateness p99 (DelayQueue.lateness()).
      for b, n in pairs(late_n) do count_minute(G, ts, 'late' .. (b - 1), n) end
      count_causes(G, ts, causes)
    end
  end
end
note_claim(G, count, ts, limited.group, limited.keys)
ev_flush(tcfg, ts, actor)

-- The next moment something becomes actionable, so an idle worker can sleep exactly until then.
local next_due = NO_TIME
if paused == 0 and redis.call('ZCARD', G.ready) > 0 then
  if not throttled then next_due = ts
  elseif throttle_next >= 0 then next_due = math.max(ts + 1, throttle_next) end
end
for _, zkey in ipairs({G.pending, G.retrying, G.unacked}) do
  local head = redis.call('ZRANGE', zkey, 0, 0, 'WITHSCORES')
  if head[2] then
    local s = tonumber(head[2])
    if s < HELD_BASE and (next_due < 0 or s < next_due) then next_due = s end
  end
end
if has_ttl then
  local head = redis.call('ZRANGEBYSCORE', G.expiry, '(0', '+inf', 'WITHSCORES', 'LIMIT', 0, 1)
  if head[2] then
    local s = tonumber(head[2])
    if next_due < 0 or s < next_due then next_due = s end
  end
end
out[1], out[2], out[3] = string.format('%d.%03d', ts, tonumber(clock[2]) % 1000), next_due, throttled and 2 or paused
out[4], out[5], out[6] = n_out, n_out > 0 and token or '', n_out > 0 and deadline_s or ''
out[7] = tcfg.layout or false   -- nil: the default layout (TopicLayout.parse says which)
local base = #out
for i = 1, #odd do out[base + i] = odd[i] end
return out
