-- due.lua: when something next comes due in a queue, kept so that a pop with
-- nothing due skips its scans.
--
-- A pop looks at four time-scored sets of each queue it serves: scheduled
-- (promotions), throttled (lanes whose domain frees), running (expired leases)
-- and recurring (ticks). K.queue(queue) keeps, in field `due`, a time (us; or
-- 'never') at most the earliest score of the four: every write of a score into
-- one of them (ZADD, at its call site) lowers it first (Due.lower), and a pop
-- that scanned stores the true earliest (Due.store). Removing a score leaves
-- `due` early, which costs one scan when it passes, never a late job. A missing
-- field (a queue this release never scanned) means "unknown": pops scan.
--
-- Field `due_chk` (us): a pop skips the scans only before it as well. It lies
-- due_recheck_ms after the last scan, so writers that do not keep `due` (an
-- older release's scripts during a rolling upgrade) delay a job by at most that.
--
-- Due.paused(queue): whether the queue is paused (read in the same command).
-- Due.quiet(queue, now_us, horizon_us): true when nothing of the four sets
--   comes due by horizon_us (>= now_us): the pop may skip reclaim, promote,
--   release, recurrence spawn, take_soon and the next-due scans.
-- Due.get(queue): the kept time (us; Due.NEVER for never; nil if unknown).

local Due = {}
local NEVER = 1 / 0 -- (math is not bound while the library loads)
Due.NEVER = NEVER
-- The score of a throttled lane that waits for something other than a time (a
-- free slot of its domain's concurrency cap, or its domain's resume): beyond
-- any clock, never released by time, and never kept as a due time.
Due.HELD = 9e15
local known, known_call = {}, 0 -- queue -> {paused, due, chk}: what call known_call read or wrote

-- What this call knows: `known` made afresh by the first call that asks (a
-- call that never asks pays nothing).
local function knowing()
  if known_call ~= CALL then
    known, known_call = {}, CALL
  end
  return known
end

local function load(queue)
  local k = knowing()[queue]
  if not k then
    local got = redis.call('HMGET', K.queue(queue), 'paused', 'due', 'due_chk')
    k = {
      paused = got[1] == '1',
      due = got[2] == 'never' and NEVER or tonumber(got[2]),
      chk = tonumber(got[3]),
    }
    known[queue] = k
  end
  return k
end

function Due.paused(queue)
  return load(queue).paused
end

function Due.quiet(queue, now_us, horizon_us)
  local k = load(queue)
  return k.due ~= nil and k.chk ~= nil and horizon_us < k.due and now_us < k.chk
end

function Due.get(queue)
  return load(queue).due
end

-- A score at_us (us) enters (or moves within) one of the queue's four sets.
function Due.lower(queue, at_us)
  if at_us >= Due.HELD then
    return
  end
  local k = load(queue)
  if k.due and at_us < k.due then
    k.due = at_us
    redis.call('HSET', K.queue(queue), 'due', int(math.floor(at_us)))
  end
end

-- A pop scanned the four sets after its writes: due_us is their earliest
-- score (nil: all empty).
function Due.store(queue, due_us, now_us)
  local k = load(queue)
  local due = due_us and math.floor(due_us) or NEVER
  if k.due == due and k.chk and now_us < k.chk then
    return -- kept already (a short pop of a quiet queue): the next recheck stays
  end
  local chk = now_us + LIMITS.due_recheck_ms * 1000
  k.due, k.chk = due, chk
  redis.call('HSET', K.queue(queue), 'due', due_us and int(due) or 'never', 'due_chk', int(chk))
end

-- The queue's hash was deleted (queue_forget): nothing is known.
function Due.forget(queue)
  knowing()[queue] = { paused = false }
end
