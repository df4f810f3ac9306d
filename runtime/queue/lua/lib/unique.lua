-- unique.lua: de-duplication. A job put with a unique key holds K.unique(key)
-- (its jid) while it is waiting, scheduled, depending or running, and for
-- unique_for seconds after it completes (the key's TTL); a put with a held key
-- creates nothing and answers the holder's jid. With requeue_if_running, a
-- duplicate put while the holder runs marks it (rq) for exactly one more run.
--
-- A running job's put (ctx.put: with its completion, or at once) hands its jid
-- back to the job before the put happens. When that put is a duplicate, the jid
-- it was given is folded into the holder: K.folded(jid) names the holder for
-- jobs-history seconds, and reads of the jid (get.lua, wait.lua, dependencies
-- of later puts) answer for the holder. Other puts answer the holder's jid
-- themselves and leave nothing behind.

local Unique = {}
local ACTIVE = { waiting = true, scheduled = true, running = true, depends = true }

-- The jid holding `key` now, or nil (a stale key is ignored and overwritten).
function Unique.holder(key, requeue)
  local jid = redis.call('GET', K.unique(key))
  if not jid then
    return nil
  end
  local meta, data = Job.load(jid)
  if meta and ACTIVE[meta.s] then
    if requeue and meta.s == RUNNING and not meta.rq then
      meta.rq = 1
      Job.save(jid, meta, data)
    end
    return jid
  end
  if meta and meta.s == COMPLETE and redis.call('PTTL', K.unique(key)) > 0 then
    return jid
  end
  return nil
end

function Unique.claim(key, jid)
  redis.call('SET', K.unique(key), jid)
end

-- The job lets go of its key: now, or after keep_s seconds.
function Unique.release(jid, meta, keep_s)
  if not meta.uk then
    return
  end
  local key = K.unique(meta.uk)
  if redis.call('GET', key) ~= jid then
    return
  end
  if keep_s and keep_s > 0 then
    redis.call('PEXPIRE', key, math.floor(keep_s * 1000))
  else
    redis.call('DEL', key)
  end
end

-- A running job's duplicate put, given `jid`, was folded into `holder`.
function Unique.fold(jid, holder)
  local keep_ms = math.max(1, math.floor(Config.get('jobs-history') * 1000))
  redis.call('SET', K.folded(jid), holder, 'PX', keep_ms)
end

-- The jid of the job that `jid` was folded into, or nil (callers ask when there
-- is no job `jid`).
function Unique.folded_into(jid)
  return redis.call('GET', K.folded(jid)) or nil
end
