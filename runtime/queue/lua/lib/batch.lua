-- batch.lua: batches, sets of jobs tracked together, with a callback job put
-- when every job has ended (on_complete) and one when every job has completed
-- (on_success). docs/writing-jobs.md, "Batches", says what is guaranteed.
--
-- A batch lives in K.batch(bid): total, completed, failed, cancelled, sealed,
-- the callbacks (spec JSON, "\n", data JSON) and, once put, their jids.
-- pending = total - completed - failed, never stored. A job of a batch names
-- it in its meta (b). Its batch counts it in the very call (one atomic step)
-- that moves it (Batch.moved, called by place.lua's moves as Place.counted;
-- written once a call, at its end: Batch.flush): a new job adds to total; one that completes, fails for good or is cancelled leaves
-- pending; one that runs again (unfail, requeue, a batch's retry, a job failed
-- as runtime.DependencyFailed whose parent runs again) returns to pending. So
-- the counts are those of the jobs' states after every step, whoever ends
-- them and whatever dies. Cancelled jobs count as failed (and in cancelled);
-- the failed ones that still exist are in K.batch_failed(bid).
--
-- The callbacks fire in the step that leaves a sealed batch with nothing
-- pending (or seals it so): on_complete once ever; on_success once, when no
-- job failed. A batch is open (K.batches) until then; settled, it expires
-- jobs-history seconds later, unless a job of it runs again first.

local Batch = {}
do -- this file's own locals end with it: a library's main chunk holds at most 200

-- The data fields a callback gets, which its own data may not hold.
local GIVEN = { bid = true, total = true, completed = true, failed = true }
local KINDS = { 'complete', 'success' } -- on_complete first: it fires in every case

-- The count a state adds to: pending for any state a job runs again from.
local function class_of(state)
  if state == COMPLETE then
    return 'completed'
  elseif state == FAILED then
    return 'failed'
  end
  return state and 'pending' or nil
end

-- A callback as given to Batch.open (spec JSON, data JSON), checked: the
-- text stored, or '' for none. BAD_ARG for a bad one.
local function callback(kind, spec_json, data_json, now_ms)
  if spec_json == '' and data_json == '' then
    return ''
  end
  local spec = Json.decode('on_' .. kind .. ' spec', spec_json)
  local null = cjson.null
  if (spec.batch ~= nil and spec.batch ~= null) or (spec.by ~= nil and spec.by ~= null)
      or (type(spec.depends) == 'table' and #spec.depends > 0) then
    E.bad('on_' .. kind .. ' cannot have a batch, depends or by of its own')
  end
  Create.parse(spec, data_json, now_ms)
  for name in pairs(Json.decode('on_' .. kind .. ' data', data_json)) do
    if GIVEN[name] then
      E.bad('on_' .. kind .. ' data cannot hold ' .. name .. ': the batch gives it')
    end
  end
  return spec_json .. '\n' .. data_json
end

-- Creates a batch (batch_open.lua); the same open again (a retry after a lost
-- reply) changes nothing. BAD_ARG when bid is another batch's or a callback
-- is bad.
function Batch.open(bid, description, success, complete, now_ms)
  Check.token('bid', bid, LIMITS.jid_max)
  if #description > LIMITS.note_max_bytes or not Text.utf8(description) then
    E.bad('description must be UTF-8 text of at most ' .. LIMITS.note_max_bytes .. ' bytes')
  end
  local on_success = callback('success', success[1], success[2], now_ms)
  local on_complete = callback('complete', complete[1], complete[2], now_ms)
  local was = redis.call('HMGET', K.batch(bid), 'desc', 'on_success', 'on_complete')
  if was[1] then
    if was[1] == description and was[2] == on_success and was[3] == on_complete then
      return
    end
    E.bad('a batch with bid ' .. bid .. ' already exists')
  end
  redis.call('HSET', K.batch(bid), 'total', 0, 'completed', 0, 'failed', 0, 'cancelled', 0,
    'sealed', 0, 'created_ms', int(now_ms), 'desc', description, 'on_success', on_success,
    'on_complete', on_complete)
  redis.call('ZADD', K.batches, int(now_ms), bid)
end

-- A put into a batch, checked before anything is written: the batch exists,
-- and is not sealed unless `by` (the job putting it) is a job of that batch
-- that has not ended (ctx.batch.put). BAD_ARG otherwise.
function Batch.check_put(bid, by)
  local sealed = redis.call('HGET', K.batch(bid), 'sealed')
  if not sealed then
    E.bad('no batch ' .. bid .. ' (it never was, or it ended and expired)')
  end
  if sealed == '1' then
    local meta = by and Job.load(by)
    if not (meta and meta.b == bid and class_of(meta.s) == 'pending') then
      E.bad('batch ' .. bid .. ' is sealed: only its own running jobs add to it')
    end
  end
end

-- The callback job of `kind` put now, with the batch's counts in its data:
-- its jid; or nil and why not (its spec no longer passes: a setting changed).
local function fire(bid, kind, stored, counts, now_us)
  local at = string.find(stored, '\n', 1, true)
  local spec = cjson.decode(string.sub(stored, 1, at - 1))
  local data = string.sub(stored, at + 1)
  local given = '"bid":' .. cjson.encode(bid) .. ',"total":' .. int(counts.total)
    .. ',"completed":' .. int(counts.completed) .. ',"failed":' .. int(counts.failed) .. '}'
  data = (data == '{}' and '{' or (string.sub(data, 1, -2) .. ',')) .. given
  if redis.call('HEXISTS', K.jobs, spec.jid) == 1 then -- taken since (by hand): another
    spec.jid = string.sub(redis.sha1hex(bid .. ':' .. kind .. ':' .. spec.jid), 1, 32)
  end
  local ok, job, why = E.attempt(Create.parse, spec, data, Clock.ms(now_us))
  if not ok then
    return nil, why
  end
  return Create.job(job, now_us)
end

-- A sealed batch with nothing pending: its callbacks that are due fire, and
-- it settles (leaves K.batches, expires jobs-history seconds from now).
local function settle(bid, key, counts, now_us)
  local h = redis.call('HMGET', key, 'on_complete', 'complete_jid', 'on_success', 'success_jid')
  for i, kind in ipairs(KINDS) do
    local stored, done = h[2 * i - 1], h[2 * i]
    if stored and stored ~= '' and not done and (kind == 'complete' or counts.failed == 0) then
      local jid, why = fire(bid, kind, stored, counts, now_us)
      if jid then
        redis.call('HSET', key, kind .. '_jid', jid)
      else
        redis.call('HSET', key, kind .. '_jid', '', kind .. '_error', why)
      end
    end
  end
  redis.call('HSET', key, 'settled_ms', int(Clock.ms(now_us)))
  redis.call('ZREM', K.batches, bid)
  local ttl_ms = int(Config.get('jobs-history') * 1000)
  redis.call('PEXPIRE', key, ttl_ms)
  redis.call('PEXPIRE', K.batch_failed(bid), ttl_ms)
end

-- What this call's moves add to each batch, written once for the call
-- (Batch.flush, at its end): a drain's report of many jobs of one batch writes
-- its counts once. Gathered by call number adds_call (CALL): bid -> {counts =
-- {field -> n}, failed = {jid -> true (now failed) | false (no longer)}}, and
-- the bids in the order first met.
local adds, order, adds_call = {}, {}, 0

local function adds_of(bid)
  if adds_call ~= CALL then
    adds, order, adds_call = {}, {}, CALL
  end
  local add = adds[bid]
  if not add then
    add = { counts = {}, failed = {} }
    adds[bid], order[#order + 1] = add, bid
  end
  return add
end

-- Writes one batch's gathered counts (its record read once, then one HINCRBY a
-- field), then settles it when it is sealed and nothing is pending, or opens it
-- again when a settled one has jobs pending once more. Nothing for a batch
-- that has expired.
local function write(bid, add, now_us)
  local key = K.batch(bid)
  local h = redis.call('HMGET', key, 'total', 'completed', 'failed', 'sealed', 'settled_ms')
  if not h[1] then
    return
  end
  local counts = { total = tonumber(h[1]), completed = tonumber(h[2]), failed = tonumber(h[3]) }
  for field, n in pairs(add.counts) do
    if n ~= 0 then
      redis.call('HINCRBY', key, field, int(n))
      counts[field] = (counts[field] or 0) + n
    end
  end
  local into, out = {}, {}
  for jid, failed in pairs(add.failed) do
    if failed then
      into[#into + 1] = jid
    else
      out[#out + 1] = jid
    end
  end
  if #into > 0 then
    redis.call('SADD', K.batch_failed(bid), unpack(into))
  end
  if #out > 0 then
    redis.call('SREM', K.batch_failed(bid), unpack(out))
  end
  local pending = counts.total - counts.completed - counts.failed
  if pending > 0 and h[5] then -- a settled batch runs again: open, and kept, once more
    redis.call('HDEL', key, 'settled_ms')
    redis.call('ZADD', K.batches, redis.call('HGET', key, 'created_ms'), bid)
    redis.call('PERSIST', key)
    redis.call('PERSIST', K.batch_failed(bid))
  elseif pending == 0 and h[4] == '1' and not h[5] then
    settle(bid, key, counts, now_us)
  end
end

-- Writes what this call's moves added to batches (at the end of the call:
-- registered by place.lua, so before the hand-off, which then hands out the
-- callbacks put here).
function Batch.flush()
  if adds_call ~= CALL then
    return
  end
  adds_call = 0 -- what a callback's put adds (nothing: no batch) starts afresh
  local now_us = Clock.now_us()
  for _, bid in ipairs(order) do
    write(bid, adds[bid], now_us)
  end
end

-- A job of a batch (meta.b) moved from state `was` (nil: it is new) to
-- meta.s: its batch counts it, at the end of the call.
function Batch.moved(jid, meta, was, now_us)
  local bid, from, to = meta.b, class_of(was), class_of(meta.s)
  if from == to or type(bid) ~= 'string' then
    return
  end
  local add = adds_of(bid)
  local counts = add.counts
  if from == nil then
    counts.total = (counts.total or 0) + 1
  elseif from ~= 'pending' then
    counts[from] = (counts[from] or 0) - 1
    if from == 'failed' then
      add.failed[jid] = false
    end
  end
  if to ~= 'pending' then
    counts[to] = (counts[to] or 0) + 1
    if to == 'failed' then
      add.failed[jid] = true
    end
  end
end

-- A job of a batch is cancelled (deleted): counted as failed, and cancelled,
-- unless it had ended (then it stays counted as it was).
function Batch.cancelled(jid, meta, now_us)
  local bid, from = meta.b, class_of(meta.s)
  if type(bid) ~= 'string' or from == 'completed' then
    return
  end
  local add = adds_of(bid)
  local counts = add.counts
  counts.cancelled = (counts.cancelled or 0) + 1
  if from == 'pending' then
    counts.failed = (counts.failed or 0) + 1
  else
    add.failed[jid] = false
  end
end

-- Seals a batch (batch_close.lua): no callback fires before. Sealing again
-- changes nothing. NO_SUCH_JOB when there is no such batch.
function Batch.close(bid, now_us)
  local key = K.batch(bid)
  local sealed = redis.call('HGET', key, 'sealed')
  if not sealed then
    E.raise('NO_SUCH_JOB', 'no batch ' .. bid)
  end
  if sealed ~= '1' then
    redis.call('HSET', key, 'sealed', 1, 'sealed_ms', int(Clock.ms(now_us)))
    adds_of(bid) -- nothing to add: its flush settles it if nothing is pending
    Batch.flush()
  end
end

-- Runs a failed job of a batch again (batch_retry.lua), as requeue.lua does:
-- its retries renewed, the jobs that failed as runtime.DependencyFailed
-- because of it back to depends.
function Batch.rerun(jid, meta, data, now_us)
  Place.remove(jid, meta)
  meta.m, meta.a, meta.f, meta.lr, meta.o, meta.d = meta.r, nil, nil, nil, nil, nil
  Job.event(jid, meta, Clock.ms(now_us), 'requeued', { q = meta.q, fq = meta.q,
    n = 'its batch was retried' })
  data = Attempt.keep_result(meta, data, nil)
  Deps.drop_failed(jid)
  Place.enqueue(jid, meta, data, nil, now_us, true)
  Deps.restore(jid, now_us)
end

-- A batch as get_batch answers it (JSON), or nil when there is none.
-- `failed_max`: at most that many failed jids listed.
function Batch.view(bid, failed_max)
  local key = K.batch(bid)
  local h = redis.call('HMGET', key, 'total', 'completed', 'failed', 'cancelled', 'sealed',
    'created_ms', 'sealed_ms', 'settled_ms', 'desc', 'on_success', 'on_complete',
    'success_jid', 'complete_jid', 'success_error', 'complete_error')
  if not h[1] then
    return nil
  end
  local total, completed, failed = tonumber(h[1]), tonumber(h[2]), tonumber(h[3])
  local jids = redis.call('SRANDMEMBER', K.batch_failed(bid), int(failed_max))
  table.sort(jids)
  local function text(v)
    return (v and v ~= '') and cjson.encode(v) or 'null'
  end
  local function number(v)
    return v and int(tonumber(v)) or 'null'
  end
  return Json.object({
    { 'bid', cjson.encode(bid) }, { 'description', cjson.encode(h[9] or '') },
    { 'total', int(total) }, { 'pending', int(total - completed - failed) },
    { 'completed', int(completed) }, { 'failed', int(failed) }, { 'cancelled', number(h[4]) },
    { 'sealed', h[5] == '1' and 'true' or 'false' }, { 'created_ms', number(h[6]) },
    { 'sealed_ms', number(h[7]) }, { 'settled_ms', number(h[8]) },
    { 'on_success', (h[10] or '') ~= '' and 'true' or 'false' },
    { 'on_complete', (h[11] or '') ~= '' and 'true' or 'false' },
    { 'success_jid', text(h[12]) }, { 'complete_jid', text(h[13]) },
    { 'success_error', text(h[14]) }, { 'complete_error', text(h[15]) },
    { 'failed_jids', Json.array(jids) },
    { 'ttl_ms', int(redis.call('PTTL', key)) },
  })
end

end
Place.counted = Batch.moved
Place.batch_flush = Batch.flush
Create.check_batch = Batch.check_put
