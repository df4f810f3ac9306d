-- retention.lua: completed jobs are kept jobs-history seconds, at most
-- jobs-history-count of them; older ones are deleted a batch at a time, by
-- calls that completed a job (complete.lua) and by every pop (pop.lua), so
-- they also go away when nothing completes any more. A corrupt record met
-- there is not deleted but failed (Job.corrupt), like anywhere else.

local Retention = {}

-- Deletes at most `batch` completed jobs: the too old, then the oldest over the
-- count (a fractional count, stored by other means than runtime config, rounds
-- down). Returns how many.
function Retention.trim(now_us, batch)
  local cutoff = now_us - Config.get('jobs-history') * 1000000
  local doomed = redis.call('ZRANGEBYSCORE', K.completed, '-inf', int(cutoff), 'LIMIT', '0',
    int(batch))
  local keep = math.max(0, math.floor(Config.get('jobs-history-count')))
  local excess = redis.call('ZCARD', K.completed) - #doomed - keep
  if excess > 0 and #doomed < batch then
    local more = redis.call('ZRANGE', K.completed, #doomed,
      #doomed + math.min(excess, batch - #doomed) - 1)
    for _, jid in ipairs(more) do
      doomed[#doomed + 1] = jid
    end
  end
  for _, jid in ipairs(doomed) do
    local meta, problem, raw, sound_meta = Job.read(jid)
    if meta then
      Place.delete(jid, meta)
    else
      redis.call('ZREM', K.completed, jid)
      if meta == false then -- corrupt: failed and kept, for a person to look at
        Job.corrupt(jid, problem, raw, sound_meta, '')
      end
    end
  end
  return #doomed
end
