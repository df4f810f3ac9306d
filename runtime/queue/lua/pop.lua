-- pop.lua: leases up to `count` jobs from one or more queues in one step.
--
-- KEYS[1]  the namespace root
-- ARGV     worker, count, seed, order, ahead_us, idle, queue_1, queue_2, ...
--          worker  the caller's worker id ("host-pid")
--          count   most jobs to lease, 0..pop_max
--          seed    random text from the caller; lease tokens derive from it
--          order   "ordered": drain queue_1, then queue_2 ...;
--                  "round-robin": one job from each queue in turn (the caller
--                  rotates the list between calls)
--          ahead_us  0..ahead_max_us: with room left, also lease jobs whose turn
--                  comes within this many us (a scheduled job due then, a
--                  throttled domain's next start); each carries start_in_us and
--                  the caller starts it then, not before. Masters pop a little
--                  ahead of what they wait for, so such jobs start on time.
--          idle    1: the caller is a master that will wait for work when this
--                  pop comes back short (see below); 0: any other caller
-- Before taking, each served queue (paused ones are skipped) reclaims jobs
-- whose lease expired (not those post-outage grace holds: lib/lease.lua),
-- promotes due scheduled jobs and frees throttled lanes. A job whose record
-- does not decode, met on the way, is failed (runtime.CorruptJob) and taken
-- out of its lane, and the pop goes on with the jobs behind it (lib/job.lua).
-- Reply    {"jobs": [job, ...], "wake_in_ms": n, "refill": [recurrence, ...]}
--          job: as Lease.hand replies it (lease.lua), with the lease in meta (w,
--          l); jobs handed to this worker while it waited (handoff.lua) come
--          first, marked "handed";
--          wake_in_ms: in how many ms (to the microsecond) something next
--          comes due in these queues (a scheduled job, a throttled domain, a
--          lease expiry or the end of its post-outage grace), -1 for never
--          or for a pop that got all it asked for (count 0 only asks this);
--          0 when a queue still has ready jobs but this pop set aside its
--          pop_skips lanes, or dropped drop_batch corrupt entries (lanes.lua):
--          ask again at once;
--          refill: cron recurrences low on ticks, {id, cron, tz, after (ms)}: the
--          caller computes more with croniter (recur_ticks.lua);
--          now_us: Redis's clock when the pop ran (expires_us is on it)
-- A master's (idle 1) pop that comes back short with count > 0 registers it as idle on
-- its (unpaused) queues: jobs that become ready are handed to it (handoff.lua)
-- until its next pop, which withdraws that first.
-- Due recurrences of the served queues spawn their jobs first (lib/recur.lua).
-- Errors   BAD_ARG

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
local count = Check.int('count', ARGV[2], 0, LIMITS.pop_max)
local seed = Check.token('seed', ARGV[3], 64)
local order = ARGV[4]
if order ~= 'ordered' and order ~= 'round-robin' then
  E.bad('order must be "ordered" or "round-robin", got ' .. tostring(order))
end
local ahead_us = Check.int('ahead_us', ARGV[5], 0, LIMITS.ahead_max_us)
local idle = Check.int('idle', ARGV[6], 0, 1) == 1
local queues = {}
for i = 7, #ARGV do
  queues[#queues + 1] = Check.queue('queue', ARGV[i])
end

local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
Lease.seen(worker, now_ms) -- at most once a second

local active, refill = {}, {}
for _, queue in ipairs(queues) do
  if redis.call('HGET', K.queue(queue), 'paused') ~= '1' then
    for _, low in ipairs(Recur.spawn(queue, now_us)) do
      refill[#refill + 1] = low
    end
    Place.reclaim(queue, now_us, LIMITS.reclaim_batch)
    Place.promote(queue, now_us)
    -- enough freed lanes to fill this pop; a backlog goes with the next pops
    Lanes.release(queue, now_us, math.min(LIMITS.release_batch, LIMITS.pop_skips + 2 * count),
      ahead_us)
    active[#active + 1] = queue
  end
end
Retention.trim(now_us, LIMITS.retention_pop_batch) -- old completed jobs go even when none complete

Handoff.withdraw(worker, queues)
local out = Handoff.collect(worker)
local function take(jid, meta, data, start_us)
  out[#out + 1] = Lease.hand(jid, meta, data, worker, seed, now_us, start_us)
end

local stopped_short = false -- a queue set aside pop_skips lanes and has more
if order == 'ordered' then
  for _, queue in ipairs(active) do
    if #out >= count or stopped_short then
      break
    end
    local _, short = Lanes.pop(queue, count - #out, now_us, take, ahead_us)
    stopped_short = short
  end
else
  local live = active
  while #out < count and #live > 0 do
    local still = {}
    for _, queue in ipairs(live) do
      if #out < count then
        local taken, short = Lanes.pop(queue, 1, now_us, take, ahead_us)
        stopped_short = stopped_short or short
        if taken == 1 then
          still[#still + 1] = queue
        end
      end
    end
    live = still
  end
end
-- Room left: scheduled jobs whose due time comes within ahead_us, in queue order.
if ahead_us > 0 and not stopped_short then
  for _, queue in ipairs(active) do
    if #out >= count then
      break
    end
    Place.take_soon(queue, now_us, ahead_us, count - #out, take)
  end
end

-- every start may leave a TAT behind: forget passed ones at least as fast
Domains.prune(now_us, LIMITS.prune_batch + 2 * #out)

-- When something next comes due in the queue (us): a scheduled job (whole
-- milliseconds), a throttled lane's domain, a lease expiry (for an expired
-- lease that post-outage grace holds: the end of its grace).
local function next_due_us(queue)
  local due
  local keys = { K.scheduled(queue), K.throttled(queue), K.running(queue), K.recurring(queue) }
  for i, key in ipairs(keys) do
    local first = tonumber(redis.call('ZRANGE', key, '0', '0', 'WITHSCORES')[2])
    if first and i == 1 then
      first = math.floor(first / 1000) * 1000
    elseif first and i == 3 and first <= now_us then
      first = Grace.until_us(queue, first, now_us) or first
    end
    if first and (not due or first < due) then
      due = first
    end
  end
  return due
end

-- A full pop leaves a wake-up for another master when work is left; a pop that
-- came back short tells this master when to look again.
local wake_at
for _, queue in ipairs(active) do
  if count > 0 and #out >= count then
    if redis.call('EXISTS', K.prios(queue)) == 1 then
      Place.wake(queue)
    end
  else
    local due = next_due_us(queue)
    if due and (not wake_at or due < wake_at) then
      wake_at = due
    end
  end
end
if idle and count > 0 and #out < count and not stopped_short then
  Handoff.register(worker, active, now_ms)
end
Stats.flush()
if stopped_short then
  wake_at = now_us
end
local wake_in_ms = '-1'
if wake_at then
  wake_in_ms = string.format('%.3f', math.max(0, wake_at - now_us) / 1000)
end
-- the reply made in one piece (each string made is hashed whole: a reply's
-- jobs are its bulk)
local reply = { '{"jobs":[' }
for i, job in ipairs(out) do
  reply[2 * i], reply[2 * i + 1] = job, ','
end
reply[2 * #out + (#out > 0 and 1 or 2)] = '],"now_us":' .. int(now_us) .. ',"wake_in_ms":'
  .. wake_in_ms .. ',"refill":' .. Json.array(refill) .. '}'
return table.concat(reply)
