-- wait.lua: waiting for a job to end without polling (client.wait).
--
-- A waiter registers with wait.lua: the record keeps until when someone waits
-- (meta.wt, ms) and how many registered since the job last ended (meta.wn).
-- The script that ends the job (complete, failed for good, cancelled) pushes
-- one token per registration (the end: "complete", "failed" or "cancelled",
-- at most waiters_max) on K.waited(jid), which expires wait_linger_ms after
-- the last registered wait is over; each waiter, blocked on that list, wakes
-- and reads the job. Jobs nobody waits for cost nothing.

local Wait = {}

-- Someone waits for the job for `for_ms` more; the caller saves the record.
function Wait.register(meta, now_ms, for_ms)
  meta.wt = math.max(meta.wt or 0, now_ms + for_ms)
  meta.wn = math.min((meta.wn or 0) + 1, LIMITS.waiters_max)
end

-- The job ended (`how`): its waiters are woken; the caller saves the record
-- (or deletes it).
function Wait.notify(jid, meta, how, now_ms)
  local until_ms, count = meta.wt, meta.wn or 1
  if not until_ms then
    return
  end
  meta.wt, meta.wn = nil, nil
  if until_ms < now_ms then
    return -- every waiter has given up
  end
  local tokens = {}
  for i = 1, count do
    tokens[i] = how
  end
  local key = K.waited(jid)
  redis.call('RPUSH', key, unpack(tokens))
  redis.call('PEXPIRE', key, until_ms - now_ms + LIMITS.wait_linger_ms)
end
