-- retention.lua: completed jobs are kept jobs-history seconds, at most
-- jobs-history-count of them; older ones are deleted a batch at a time, by
-- calls that completed a job (complete.lua) and by every pop (pop.lua), so
-- they also go away when nothing completes any more. A corrupt record met
-- there is not deleted but failed (Job.corrupt), like anywhere else.
--
-- Tombstones of cancelled jobs (Place.cancel) are kept the same way, counted
-- apart (jobs-history-count of each): every cancel trims them, and so does a
-- pop that scans its queues (Retention.sweep: at most once a second for the
-- library of a server, FCALL; a script run by EVALSHA remembers nothing, so
-- sweeps every time it scans). A pop scans at least every due_recheck_ms
-- (lib/due.lua), so they go away when nothing is cancelled any more.

local Retention = {}
do -- this file's own locals end with it: a library's main chunk holds at most 200
local SWEEP_US = 1000000 -- tombstones are looked at this often by pops (Retention.sweep)
local swept_us, swept_ns = nil, nil

-- The jids of `key` (a zset scored by time, us) past retention: the too old,
-- then the oldest over the count (a fractional count, stored by other means
-- than runtime config, rounds down); at most `batch`.
local function past(key, now_us, batch)
  local cutoff = now_us - Config.get('jobs-history') * 1000000
  local doomed = redis.call('ZRANGEBYSCORE', key, '-inf', int(cutoff), 'LIMIT', '0', int(batch))
  local keep = math.max(0, math.floor(Config.get('jobs-history-count')))
  local excess = redis.call('ZCARD', key) - #doomed - keep
  if excess > 0 and #doomed < batch then
    local more = redis.call('ZRANGE', key, #doomed, #doomed + math.min(excess, batch - #doomed) - 1)
    for _, jid in ipairs(more) do
      doomed[#doomed + 1] = jid
    end
  end
  return doomed
end

-- Deletes at most `batch` tombstones past retention. Returns how many.
function Retention.trim_cancelled(now_us, batch)
  swept_us, swept_ns = now_us, NS
  local doomed = past(K.cancelled, now_us, batch)
  for _, jid in ipairs(doomed) do
    local tomb = Place.tombstone(jid)
    if tomb then
      Place.delete(jid, tomb)
    else -- the jid was put anew (Create.job took it out) or is gone
      Place.drop_stray(K.cancelled, jid)
    end
  end
  return #doomed
end

-- Deletes at most `batch` tombstones past retention, unless this library did
-- within the last second (then nothing). Returns how many.
function Retention.sweep(now_us, batch)
  if swept_ns == NS and now_us >= swept_us and now_us - swept_us < SWEEP_US then
    return 0
  end
  return Retention.trim_cancelled(now_us, batch)
end

-- Deletes at most `batch` completed jobs past retention. Returns how many.
function Retention.trim(now_us, batch)
  local doomed = past(K.completed, now_us, batch)
  for _, jid in ipairs(doomed) do
    local meta, problem, raw, sound_meta = Job.read(jid)
    if meta then
      Place.delete(jid, meta)
    else
      Place.drop_stray(K.completed, jid)
      if meta == false then -- corrupt: failed and kept, for a person to look at
        Job.corrupt(jid, problem, raw, sound_meta, '')
      end
    end
  end
  return #doomed
end
end -- of retention.lua's own locals
