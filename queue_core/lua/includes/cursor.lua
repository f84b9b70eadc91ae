-- Where a page cursor (score, id) splits a state's ZSET: `first` is the rank of the first member
-- above it (ascending walks start there), `below` the number of members under it (descending
-- walks end there). When the cursor's message is still there with that score, its rank says both;
-- otherwise (it moved on, or it lives in another partition) the split is found by binary search
-- among the members sharing the score: O(log^2 n), never a scan.
local function split_at(key, after_score_text, after_id)
  local rank = redis.call('ZRANK', key, after_id)
  if rank and tonumber(redis.call('ZSCORE', key, after_id)) == tonumber(after_score_text) then
    return rank + 1, rank
  end
  local lo = redis.call('ZCOUNT', key, '-inf', '(' .. after_score_text)
  local hi = lo + redis.call('ZCOUNT', key, after_score_text, after_score_text)
  while lo < hi do
    local mid = math.floor((lo + hi) / 2)
    if redis.call('ZRANGE', key, mid, mid)[1] <= after_id then lo = mid + 1 else hi = mid end
  end
  -- Not a member: no member equals after_id, so "above" and "not below" split at the same rank.
  return lo, lo
end
