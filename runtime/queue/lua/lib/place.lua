-- place.lua: where a job lives for each state, and the moves between states.
--
--   waiting   a lane of its queue (lanes.lua)     scheduled  K.scheduled(queue)
--   running   K.running(queue), K.worker_jobs     depends    K.depends(queue)
--   failed    K.failed(group), K.failed_groups    complete   K.completed
--   cancelled K.cancelled (a tombstone)
--
-- Complete, failed and cancelled jobs are also listed in their queue's index
-- of that state (Stats.enter, Stats.leave).
--
-- The one writer. Nothing else writes a job's state (meta.s) or these
-- indexes (tests/unit/test_lua_one_writer.py greps for it): a move into a
-- state is Place.to_<state> (to_waiting, to_scheduled, to_depends,
-- to_running, to_complete, to_failed, to_cancelled), which sets the state,
-- enters the job in its index and lists its queue in K.queues where the state
-- needs it; a move out is Place.remove (Place.drop_lease for a running job).
-- Place.enqueue picks waiting, scheduled or depends for a job that has not
-- run; the operations call these, or the moves below made of them.
--
-- Every move into waiting first promotes the queue's due scheduled jobs, so
-- order tickets follow eligible time (Place.promote, with the other walks over
-- an index that find jobs to move: lib/sweep.lua).
--
-- A job failed for good (Place.fail, Place.corrupt) wakes its waiters
-- (lib/wait.lua) and fails the jobs waiting on it (Place.cascade: lib/deps.lua).
--
-- A record that does not decode becomes a failed job (Place.corrupt); the
-- walks drop entries whose job is corrupt, gone or no longer in that state
-- (Place.drop_stray, Place.unschedule), so no entry is met twice.
--
-- A job of a batch (meta.b) is counted by its batch in the move that changes
-- its state (Place.counted: lib/batch.lua): new, ended or running again; the
-- counts of a call's moves are written at its end, before the hand-off (which
-- then hands out the callbacks that put).
--
-- A scheduled job is scored by its due time (us, whole milliseconds) and keeps
-- its put ticket (the queue's counter sseq) in meta.o while scheduled; its member
-- is that ticket, fixed-order encoded, then the jid. Members of equal score sort
-- bytewise, so the set is in (due, put order) for any number of jobs, and a
-- promotion batch cut anywhere still takes the oldest first.

local Place = {}
-- Of call number place_call (CALL); `written`: whether it wrote any of them.
local woken, promoted, known, place_call, written = {}, {}, {}, 0, false

-- Starts this call's tables, at their first use in a call (callers test the
-- stamp first, so later uses pay no call; the hand-off's end step asks
-- every call, so each call runs this once, emptying only what was written).
local function fresh()
  if written then
    woken, promoted, known = emptied(woken), emptied(promoted), emptied(known)
    written = false
  end
  place_call = CALL
end

-- The scheduled-set member of a job: one hex digit saying how many hex digits
-- the ticket has, the ticket in hex, then the jid (so shorter tickets sort first).
local function scheduled_member(jid, ticket)
  local hex = string.format('%x', ticket)
  return string.format('%x', #hex) .. hex .. jid
end

local function scheduled_jid(member)
  local digits = tonumber(string.sub(member, 1, 1), 16)
  return digits and string.sub(member, digits + 2) or member
end
Place.scheduled_jid = scheduled_jid

at_end(function()
  Place.batch_flush() -- lib/batch.lua
end)

-- Jobs of the queue may be ready: at the end of the call they go to masters
-- idling on it, and a wake-up token stays for the rest if any are left
-- (handoff.lua). Nothing happens before every write of the call is done, so a
-- batch hands out its queue's head in order, whatever it put last.
function Place.wake(queue)
  if place_call ~= CALL then
    fresh()
  end
  woken[queue], written = woken[queue] or 'work', true
end

-- Idle masters of the queue must look again even if no job is ready (an
-- earlier due time, a new recurrence tick, a domain freeing sooner).
function Place.nudge(queue)
  if place_call ~= CALL then
    fresh()
  end
  woken[queue], written = 'always', true
end

-- The queues woken in this call: {queue = 'work' | 'always'}.
function Place.woken()
  if place_call ~= CALL then
    fresh()
  end
  return woken
end

-- Lists the queue in K.queues (once a call). A queue leaves the list only
-- empty (queue_forget.lua), so a job entering a lane that holds jobs already
-- need not list it again.
local function list_queue(queue, now_ms)
  if place_call ~= CALL then
    fresh()
  end
  if not known[queue] then
    known[queue], written = true, true
    redis.call('ZADD', K.queues, 'NX', int(now_ms), queue)
  end
end

-- Into waiting: at the tail of its lane with a new ticket, or back at its head
-- (`at_head`: a job given back or reclaimed goes before younger jobs).
-- `list_ms`: the time to list its queue at when its lane was empty (nil: the
-- queue is known to be listed: it held the job already). The caller wakes the
-- queue (Place.wake) when its masters should learn of the job.
function Place.to_waiting(jid, meta, now_us, at_head, list_ms)
  meta.s, meta.d = WAITING, nil
  if Lanes.push(meta.q, jid, meta, now_us, at_head) and list_ms then
    list_queue(meta.q, list_ms) -- a lane with jobs already: the queue is listed
  end
end

-- Into scheduled until due_ms, after the jobs put before it with the same due
-- time; an idle master is nudged when it is due before all others.
function Place.to_scheduled(jid, meta, due_ms, now_ms)
  local queue = meta.q
  list_queue(queue, now_ms)
  meta.s, meta.d = SCHEDULED, due_ms
  meta.o = redis.call('HINCRBY', K.queue(queue), 'sseq', 1) -- put order among equal dues
  local member = scheduled_member(jid, meta.o)
  Due.lower(queue, due_ms * 1000)
  redis.call('ZADD', K.scheduled(queue), int(due_ms * 1000), member)
  if redis.call('ZRANGE', K.scheduled(queue), '0', '0')[1] == member then
    Place.nudge(queue) -- due before all others: an idle master must learn the new time
  end
end

-- Into depends: it waits on the jobs of K.deps(jid), then until due_ms (nil: none).
function Place.to_depends(jid, meta, due_ms, now_ms)
  list_queue(meta.q, now_ms)
  meta.s, meta.d = DEPENDS, due_ms
  redis.call('SADD', K.depends(meta.q), jid)
end

-- Lists a job failed for good in its group's list, counted in K.failed_groups.
local function list_failed(jid, group)
  redis.call('LPUSH', K.failed(group), jid)
  redis.call('ZINCRBY', K.failed_groups, '1', group)
end

-- Puts a job into its queue (meta.q) and saves it: depends while it waits on
-- other jobs (only looked up when `may_depend`), scheduled while due_ms lies
-- ahead, else waiting. `put_ms`: its put time, when the caller knows it (a
-- new job); else its history says.
function Place.enqueue(jid, meta, data, due_ms, now_us, may_depend, put_ms)
  local queue, was = meta.q, meta.s
  local now_ms = Clock.ms(now_us)
  local eligible = (due_ms and due_ms > now_ms) and due_ms or now_ms
  meta.qt = eligible ~= (put_ms or Job.put_ms(meta)) and eligible or nil
  if may_depend and redis.call('SCARD', K.deps(jid)) > 0 then
    Place.to_depends(jid, meta, due_ms, now_ms)
  elseif due_ms and due_ms > now_ms then
    Place.to_scheduled(jid, meta, due_ms, now_ms)
  else
    Place.promote(queue, now_us)
    Place.to_waiting(jid, meta, now_us, false, now_ms)
    Place.wake(queue)
  end
  Job.save(jid, meta, data)
  if meta.b then
    Place.counted(jid, meta, was, now_us)
  end
end

-- A debounced put (lib/unique.lua) for a job that has not started: the job
-- takes the put's data and waits until due_ms (a job in depends keeps waiting
-- for its jobs, then until due_ms). Its deadline, if it has one, moves along:
-- expires_in_ms (the put's, else its own) after due_ms. The record is saved.
function Place.debounce(jid, meta, data, due_ms, expires_in_ms, now_us)
  Job.event(jid, meta, Clock.ms(now_us), 'debounced', { dl = due_ms - Clock.ms(now_us) })
  expires_in_ms = expires_in_ms or meta.xi
  if expires_in_ms then
    meta.x, meta.xi = due_ms + expires_in_ms, expires_in_ms
  end
  if meta.s == DEPENDS then
    meta.d = due_ms
    Job.save(jid, meta, data)
    return
  end
  Place.remove(jid, meta)
  Place.enqueue(jid, meta, data, due_ms, now_us, false)
end

-- The lease holder gives the job back unfinished: to the head of its lane, its
-- attempt not counted unless it `started`. The caller checked the lease; the
-- record is saved.
function Place.release(jid, meta, data, worker, now_us, started)
  Place.drop_lease(jid, meta)
  meta.lr = 'release'
  if not started then
    meta.a = math.max(0, (meta.a or 1) - 1)
  end
  Job.event(jid, meta, Clock.ms(now_us), 'released', { w = worker })
  Place.to_waiting(jid, meta, now_us, true)
  Place.wake(meta.q)
  Job.save(jid, meta, data)
end

-- Into failed, for good: it joins its group's list and its queue's index, and
-- its waiters wake (lib/wait.lua); the jobs waiting on it are left as they are
-- (Place.fail fails them too). `usage`: the ending attempt's, when measured
-- (lib/attempt.lua), for its event. The caller saves the record.
function Place.to_failed(jid, meta, group, message, worker, now_us, usage)
  local now_ms, was = Clock.ms(now_us), meta.s
  Stats.count(meta.q, 'failed', now_us)
  Unique.release(jid, meta)
  meta.s, meta.o = FAILED, nil
  meta.f = { g = group, m = Job.cap_message(message), t = now_ms, w = worker }
  Stats.enter(jid, meta, now_us)
  Job.event(jid, meta, now_ms, 'failed',
    { w = worker, g = group, n = Job.failure_note(group, message), u = usage })
  list_failed(jid, group)
  Wait.notify(jid, meta, FAILED, now_ms)
  if meta.b then
    Place.counted(jid, meta, was, now_us)
  end
end

-- Into complete (its holder reported it done): listed in its queue's index;
-- its entry of K.completed (for retention) is added to `completed` (time us,
-- jid, ...), which Place.list_completed writes once a call. The caller saves
-- the record.
function Place.to_complete(jid, meta, now_us, completed)
  local was = meta.s
  meta.s, meta.o = COMPLETE, nil
  Stats.enter(jid, meta, now_us)
  completed[#completed + 1] = int(now_us)
  completed[#completed + 1] = jid
  if meta.b then
    Place.counted(jid, meta, was, now_us)
  end
end

-- A job that failed as runtime.DependencyFailed waits again on the jobs it
-- depends on (Deps.restore); the caller saves the record.
function Place.depend_again(jid, meta, now_us)
  local was = meta.s
  Place.remove(jid, meta, true)
  meta.f, meta.lr = nil, nil
  Place.to_depends(jid, meta, meta.d, Clock.ms(now_us))
  if meta.b then
    Place.counted(jid, meta, was, now_us)
  end
end

-- A job that did not start by its deadline (meta.x, ms: expires_in after its
-- due time) fails as runtime.Expired without running, counted, and the jobs
-- waiting on it fail (runtime.DependencyFailed). The caller took it out of the
-- index it sat in; the record is saved.
function Place.expire(jid, meta, data, now_us)
  local late_ms = Clock.ms(now_us) - meta.x
  meta.x, meta.xi, meta.af, meta.db = nil, nil, nil, nil
  Stats.count(meta.q, 'expired', now_us)
  Place.fail(jid, meta, GROUP.EXPIRED, 'not started by its deadline (expires_in): '
    .. int(late_ms) .. ' ms late; it did not run', nil, now_us)
  Job.save(jid, meta, data)
end
Job.expire = Place.expire

-- Final failure: Place.to_failed, then the jobs waiting on it fail too
-- (Deps.fail_dependents, bound here by deps.lua). The caller saves the record.
function Place.fail(jid, meta, group, message, worker, now_us, usage)
  Place.to_failed(jid, meta, group, message, worker, now_us, usage)
  Place.cascade(jid, group, now_us)
end

-- Takes a job out of the structure its state keeps it in; the record stays.
-- `oldest_first`: a failed job is looked for from the old end of its group's list.
function Place.remove(jid, meta, oldest_first)
  Stats.leave(jid, meta)
  local state, queue = meta.s, meta.q
  if state == WAITING then
    Lanes.remove(queue, jid, meta)
  elseif state == SCHEDULED then
    redis.call('ZREM', K.scheduled(queue), scheduled_member(jid, meta.o))
  elseif state == RUNNING then
    Place.drop_lease(jid, meta)
  elseif state == DEPENDS then
    redis.call('SREM', K.depends(queue), jid)
  elseif state == FAILED then
    local group = meta.f.g
    redis.call('LREM', K.failed(group), oldest_first and -1 or 1, jid)
    if redis.call('ZINCRBY', K.failed_groups, '-1', group) + 0 <= 0 then
      redis.call('ZREM', K.failed_groups, group)
    end
  elseif state == COMPLETE then
    redis.call('ZREM', K.completed, jid)
  elseif state == CANCELLED then
    redis.call('ZREM', K.cancelled, jid)
  end
end

-- Removes a job and every trace of it.
function Place.delete(jid, meta)
  Place.remove(jid, meta)
  Unique.release(jid, meta)
  for _, tag in ipairs(meta.g or {}) do
    redis.call('ZREM', K.tag(tag), jid)
  end
  if meta.tr then
    redis.call('ZREM', K.tracked, jid)
  end
  for _, dep in ipairs(redis.call('SMEMBERS', K.deps(jid))) do
    redis.call('SREM', K.dependents(dep), jid)
  end
  redis.call('DEL', K.deps(jid), K.dependents(jid))
  Attempt.forget(jid, meta)
  redis.call('HDEL', K.jobs, jid)
end

-- The meta of `jid`'s tombstone (a job cancelled before it ended), or nil
-- when its record is none (or a job). Cheap: the meta is glanced at only.
function Place.tombstone(jid)
  local meta = Job.glance(jid)
  if meta and meta.s == CANCELLED and type(meta.cn) == 'table' then
    return meta
  end
  return nil
end

do -- this part's own locals end with it: a library's main chunk holds at most 200

local ZADD_ARGS = 2000 -- score and member pairs of one ZADD, counted as values

local function append_entry(entries, score, member)
  entries[#entries + 1] = int(score)
  entries[#entries + 1] = member
end

-- Whether Redis has room for `bytes` more below its maxmemory (none set: room),
-- as INFO memory tells it now, counted as Redis counts for its out-of-memory
-- refusals (without mem_not_counted_for_evict). A user whose ACL refuses INFO
-- (it is optional: runtime/queue/acl.py) is told there is room.
local function has_room(bytes)
  local info = redis.pcall('INFO', 'memory')
  if type(info) ~= 'string' then
    return true
  end
  local max = tonumber(string.match(info, '\nmaxmemory:(%d+)'))
  local used = tonumber(string.match(info, '\nused_memory:(%d+)'))
  if not (max and used) or max == 0 then
    return true
  end
  local uncounted = tonumber(string.match(info, '\nmem_not_counted_for_evict:(%d+)')) or 0
  return used - uncounted + bytes <= max
end

-- Cancels jobs: `found` lists jids (found[jid] = the meta each was read
-- with), `sound[jid]` is true for a record that decoded. Each is deleted with
-- every trace of it (Place.delete): a cancel frees its memory at once. Then
-- the jobs cancelled before they ended (waiting, scheduled, running, depends)
-- that decoded get a tombstone, where memory allows (room for each one's
-- tombstone_bytes left below maxmemory, after the deletes): a record in state
-- cancelled of their klass, queue, retries and attempts, meta.cn {t: now (ms),
-- b: `by`} and a history of their put and their cancel (event cancelled, b
-- `by`, w the holder of a running job), data {}. Tombstones are listed in
-- K.cancelled (us) and in their queue's index; retention deletes them as it
-- does completed jobs (lib/retention.lua), and counted in the day's statistics
-- of their queue (field cancelled; the caller flushes them). Returns how many
-- were written.
function Place.to_cancelled(found, sound, by, now_us)
  local tombs = {}
  for _, jid in ipairs(found) do
    local meta = found[jid]
    Place.delete(jid, meta)
    local s = meta.s
    if sound[jid] and (s == WAITING or s == SCHEDULED or s == RUNNING or s == DEPENDS)
        and Text.utf8(meta.k) and Text.utf8(meta.q) then
      tombs[#tombs + 1] = jid
    end
  end
  if #tombs == 0 or not has_room(#tombs * LIMITS.tombstone_bytes) then
    return 0
  end
  local now_ms = Clock.ms(now_us)
  local listed = { [K.cancelled] = {} } -- index -> {score, jid, ...}
  for _, jid in ipairs(tombs) do
    local meta = found[jid]
    local tomb = { k = meta.k, q = meta.q, s = CANCELLED, r = meta.r, m = meta.m, a = meta.a,
      cn = { t = now_ms, b = by }, h = Job.first_event('put', Job.put_ms(meta)) }
    Job.append(tomb, now_ms, 'cancelled', { b = by, w = meta.s == RUNNING and meta.w or nil })
    Job.save(jid, tomb, '{}')
    Stats.count(meta.q, CANCELLED, now_us) -- the day's statistics (written by Stats.flush)
    local index = K.cancelled_index(meta.q)
    listed[index] = listed[index] or {}
    append_entry(listed[index], now_ms, jid)
    append_entry(listed[K.cancelled], now_us, jid)
  end
  for index, entries in pairs(listed) do
    for first = 1, #entries, ZADD_ARGS do -- unpack takes at most ~8000 values
      redis.call('ZADD', index, unpack(entries, first, math.min(#entries, first + ZADD_ARGS - 1)))
    end
  end
  return #tombs
end
end -- of the tombstones' own locals

-- The failed record that replaces a corrupt one: its sound meta, unless that
-- holds text Python could not decode; else a minimal one.
local function corrupt_meta(sound_meta, queue)
  local meta = sound_meta
  if meta then
    meta.o, meta.d, meta.rq, meta.lr, meta.rl, meta.ot, meta.pg = nil, nil, nil, nil, nil, nil, nil
    if Text.utf8(Job.encode(meta)) then
      return meta
    end
    queue = Text.utf8(meta.q) and meta.q or queue
  end
  return { k = '', q = queue or '', r = 0, m = 0, h = '' }
end

-- The failed record that replaces a corrupt one (see Place.corrupt), and its
-- failed event: meta, event. Writes nothing.
local function corrupt_record(jid, problem, raw, sound_meta, out, now_ms)
  local meta = corrupt_meta(sound_meta, out)
  meta.s, meta.cr = FAILED, 1
  local kept = string.sub(raw, 1, LIMITS.corrupt_kept_bytes)
  local message = 'the stored record of ' .. Text.escape(jid) .. ' does not decode ('
    .. problem .. '); it was taken out of its queue. The record, ' .. #raw .. ' bytes'
    .. (#kept < #raw and (', the first ' .. #kept) or '')
    .. ', other than printable ASCII as \\xHH:\n' .. Text.escape(kept)
  meta.f = { g = GROUP.CORRUPT_JOB, m = message, t = now_ms }
  return meta, Job.append(meta, now_ms, 'failed', { g = GROUP.CORRUPT_JOB })
end

-- What a read-only operation answers for a corrupt record: the failed record
-- Place.corrupt would make of it now (meta, '{}'), without writing it. The
-- next operation that writes and meets the record fails it for good.
function Place.corrupt_view(jid, problem, raw, sound_meta, out)
  local meta = corrupt_record(jid, problem, raw, sound_meta, out, Clock.ms(Clock.now_us()))
  return meta, '{}'
end

-- A record that does not decode (Job.read: `problem`, the `raw` bytes, the
-- meta if that part is sound) becomes a failed job of group runtime.CorruptJob:
-- data '{}', meta the sound one (or a minimal one: klass '', queue `out` or
-- ''), marked cr, with the raw record (its first corrupt_kept_bytes, escaped)
-- in the failure message. `out`: nil when the job is still where it sat (a
-- sound meta says where: it is taken out); else the queue (or '') whose
-- index the caller takes it out of. Returns the new meta and data.
function Place.corrupt(jid, problem, raw, sound_meta, out)
  local was = sound_meta and sound_meta.s
  if sound_meta then
    Stats.leave(jid, sound_meta)
  end
  local now_us = Clock.now_us()
  local now_ms = Clock.ms(now_us)
  if sound_meta and out == nil then
    Place.remove(jid, sound_meta)
  elseif sound_meta and sound_meta.s == RUNNING then
    Place.drop_lease(jid, sound_meta)
  end
  if sound_meta then
    Unique.release(jid, sound_meta)
  end
  redis.call('HDEL', K.output, jid)
  redis.call('HDEL', K.progress, jid)
  local meta, event = corrupt_record(jid, problem, raw, sound_meta, out, now_ms)
  Job.publish(jid, meta, event)
  if meta.q ~= '' then
    Stats.enter(jid, meta, now_us)
    Stats.count(meta.q, 'failed', now_us)
  end
  list_failed(jid, GROUP.CORRUPT_JOB)
  Wait.notify(jid, meta, FAILED, now_ms)
  Job.save(jid, meta, '{}')
  if meta.b then
    Place.counted(jid, meta, was, now_us)
  end
  Place.cascade(jid, GROUP.CORRUPT_JOB, now_us) -- its data is lost: it can never complete
  return meta, '{}'
end
Job.corrupt = Place.corrupt
Job.corrupt_view = Place.corrupt_view

-- A slot of a capped domain came back (Place.drop_lease): its lanes held for
-- one are readied (or wait for its rate), and the masters idling on their
-- queues are handed the jobs.
local function slot_freed(domain)
  for _, queue in ipairs(Lanes.rescore_domain(domain, Clock.now_us())) do
    Place.wake(queue)
  end
end

-- A worker's set of the jobs it holds (K.worker_jobs), written once per call
-- and worker for a call's run of leases or reports (Place.gather_holders, then
-- Place.write_holders: a pop's batch, a completion's): one SADD or SREM for
-- the run instead of one per job. Gathered: worker -> {jid -> true (held),
-- false (no longer)}, the last change of a jid winning, as the set's would.
-- Outside such a run (a hand-off at the end of a call, a single move)
-- each change is written at once.
local holders, gathering = {}, 0 -- the call gathering (CALL), 0: none

function Place.gather_holders()
  holders, gathering = {}, CALL
end

local function hold(worker, jid, held)
  if gathering ~= CALL then
    redis.call(held and 'SADD' or 'SREM', K.worker_jobs(worker), jid)
    return
  end
  local jids = holders[worker]
  if not jids then
    jids = {}
    holders[worker] = jids
  end
  jids[jid] = held
end

function Place.write_holders()
  if gathering ~= CALL then
    return
  end
  gathering = 0
  for worker, jids in pairs(holders) do
    local added, removed = {}, {}
    for jid, held in pairs(jids) do
      if held then
        added[#added + 1] = jid
      else
        removed[#removed + 1] = jid
      end
    end
    local key, most = K.worker_jobs(worker), 2000 -- unpack takes at most ~8000 values
    for first = 1, #added, most do
      redis.call('SADD', key, unpack(added, first, math.min(#added, first + most - 1)))
    end
    for first = 1, #removed, most do
      redis.call('SREM', key, unpack(removed, first, math.min(#removed, first + most - 1)))
    end
  end
  holders = {}
end

-- Into running, leased to `worker` until now + lease_s (nil: the queue's
-- heartbeat): a new attempt, its token sha1(seed .. jid .. attempt), listed in
-- K.running(queue) by expiry and in the worker's K.worker_jobs; a job of a
-- capped domain takes a slot (meta.sl). Returns the expiry (us). The caller
-- saves the record (Lease.hand, which lease.lua calls Lease.grant).
function Place.to_running(jid, meta, worker, seed, now_us, lease_s)
  local expires_us = now_us + (lease_s or Config.get('heartbeat', meta.q)) * 1000000
  meta.a = (meta.a or 0) + 1
  meta.s, meta.w, meta.lr, meta.pt = RUNNING, worker, nil, Clock.ms(now_us)
  Attempt.restart(jid, meta)
  meta.l = string.sub(redis.sha1hex(seed .. jid .. int(meta.a)), 1, 24)
  meta.x, meta.xi = nil, nil -- it started: its deadline (expires_in) is met
  Due.lower(meta.q, expires_us)
  if redis.call('ZADD', K.running(meta.q), int(expires_us), jid) == 1 and meta.dm then
    Domains.take_slot(meta.dm) -- its domain's slot, held with the lease (domains.lua)
    meta.sl = 1
  end
  hold(worker, jid, true)
  return expires_us
end
Lease.grant = Place.to_running

-- Out of running (whatever ended the lease): the job leaves its running set
-- and its worker's jobs, and the slot it took (meta.sl: a lease of an earlier
-- release took none) goes back to its domain; a slot that makes room under the
-- domain's cap readies its lanes. The caller moves the job on (or leaves it
-- in no state, for a move made in parts) and saves the record.
function Place.drop_lease(jid, meta)
  if redis.call('ZREM', K.running(meta.q), jid) == 1 and meta.sl then
    meta.sl = nil
    if Domains.give_slot(meta.dm) then
      slot_freed(meta.dm)
    end
  end
  Attempt.stopped(jid, meta)
  if meta.w then
    hold(meta.w, jid, false)
  end
end

-- The jobs a call completed enter K.completed (one ZADD): `completed` as
-- Place.to_complete filled it. True when there were any.
function Place.list_completed(completed)
  if #completed == 0 then
    return false
  end
  redis.call('ZADD', K.completed, unpack(completed))
  return true
end

-- An entry of an index (K.running(queue), K.completed, K.cancelled) whose
-- job is gone, elsewhere, was put anew or does not decode goes (a walk over
-- the index met it: lib/sweep.lua, lib/retention.lua).
function Place.drop_stray(key, jid)
  redis.call('ZREM', key, jid)
end

-- Members of the queue's scheduled set leave it: jobs a walk takes out to move
-- them on (lib/sweep.lua), or strays.
function Place.unschedule(queue, ...)
  redis.call('ZREM', K.scheduled(queue), ...)
end

-- True the first time a call asks for the queue: its promotion (Place.promote,
-- lib/sweep.lua) runs once a call.
function Place.promoting(queue)
  if place_call ~= CALL then
    fresh()
  end
  if promoted[queue] then
    return false
  end
  promoted[queue], written = true, true
  return true
end

-- A waiting job's priority changes: it moves to its new priority's lane, at
-- the place its ticket gives it there. `note(meta)` writes the change's event.
function Place.reprioritize(jid, meta, priority, now_us, note)
  local waiting = meta.s == WAITING
  if waiting then
    Lanes.remove(meta.q, jid, meta)
  end
  meta.p = priority ~= 0 and priority or nil
  note(meta)
  if waiting then
    Lanes.insert_by_ticket(meta.q, jid, meta, now_us)
  end
end

-- Failed jobs of `group` leave it, oldest first, at most `count`: each sound
-- failed one is taken out of its queue's index and given to
-- `each(jid, meta, data)`, which moves it on (Place.enqueue); one that does
-- not decode is failed as runtime.CorruptJob; entries whose job is gone or not
-- failed are dropped. Returns how many were given.
function Place.unfail(group, count, each)
  local key = K.failed(group)
  local moved, left = 0, 0 -- jobs moved; entries that left the group's list
  for _ = 1, count do
    local jid = redis.call('RPOP', key)
    if not jid then
      break
    end
    left = left + 1
    local meta, data, raw, sound_meta = Job.read(jid)
    if meta and meta.s == FAILED then
      Stats.leave(jid, meta)
      each(jid, meta, data)
      moved = moved + 1
    elseif meta == false then
      Job.corrupt(jid, data, raw, sound_meta, '')
    end
  end
  if left > 0 and redis.call('ZINCRBY', K.failed_groups, -left, group) + 0 <= 0 then
    redis.call('ZREM', K.failed_groups, group)
  end
  return moved
end
