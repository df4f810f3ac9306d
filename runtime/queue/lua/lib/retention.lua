-- retention.lua: completed jobs are kept jobs-history seconds, at most
-- jobs-history-count of them; older ones are deleted a batch at a time.

local Retention = {}

function Retention.trim(now_us)
  local cutoff = now_us - Config.get('jobs-history') * 1000000
  local doomed = redis.call('ZRANGEBYSCORE', K.completed, '-inf', int(cutoff), 'LIMIT', 0,
    LIMITS.retention_batch)
  local excess = redis.call('ZCARD', K.completed) - #doomed - Config.get('jobs-history-count')
  if excess > 0 then
    local more = redis.call('ZRANGE', K.completed, #doomed,
      #doomed + math.min(excess, LIMITS.retention_batch) - 1)
    for _, jid in ipairs(more) do
      doomed[#doomed + 1] = jid
    end
  end
  for _, jid in ipairs(doomed) do
    local meta = Job.load(jid)
    if meta then
      Place.delete(jid, meta)
    else
      redis.call('ZREM', K.completed, jid)
    end
  end
  return #doomed
end
