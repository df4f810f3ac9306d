-- job.lua: the job record, its history, and its reply form.
--
-- A record is one field of the hash K.jobs: meta JSON, "\n", data JSON. Data is
-- the caller's JSON text, stored and returned byte for byte (decoded only to
-- check it).
-- Meta uses short names to keep a queued job small (runtime/queue/job.py maps
-- them to the public names):
--
--   k klass          q queue           s state           p priority (absent: 0)
--   g tags           r retries         m remaining       a attempts (pops so far)
--   o order ticket (waiting: lane ticket; scheduled: put ticket)
--   d due time (ms)   dm domain
--   uk unique key    uf unique_for (s)  rq run once more when done (requeue_if_running)
--   w worker (holder, or last holder)   l lease token
--   lr what the holder of lease l last did: complete | fail | retry | release
--   qt when it last became eligible (ms; absent: its put time)   pt when popped (ms)
--   f failure {g group, m message, t time, w worker}
--   bo backoff [min s, max s]          to timeout (s)    tr tracked (1)
--   h history: [{e event, t time (ms), w worker, q queue, g group, ...}]; h[1] is
--     the put, so its time is the put time (the history keeps its first event);
--     a corrupt record whose meta was lost starts at its failure instead
--   cr the stored record did not decode and was replaced by this failed one (1)
--   rl a complete job's result: the last rl bytes of the record, after its data
--   ot its last attempt's output is in K.output (1)    pg its progress is in K.progress (1)
--   wt someone waits for it to end until then (ms)    wn how many registered (lib/wait.lua)
--   h events may carry: n a note, c a count and j jids (puts), b the job that put it
--
-- Every read checks the record (Job.decode): one that does not decode, or that
-- Python could not decode in a reply, is corrupt. Job.load fails it at once,
-- as group runtime.CorruptJob (Place.corrupt), before the call writes anything
-- about it, so no script meets it again; loops that walk an index (a lane, the
-- running set ...) drop such entries, and entries whose job is gone or
-- elsewhere, from that index as they meet them.

local Job = {}

local STATES = { scheduled = true, waiting = true, running = true, complete = true,
  failed = true, depends = true }
-- The optional fields whose type the scripts rely on.
local TYPES = { p = 'number', g = 'table', a = 'number', o = 'number', d = 'number',
  dm = 'string', uk = 'string', uf = 'number', rq = 'number', w = 'string', l = 'string',
  lr = 'string', qt = 'number', pt = 'number', f = 'table', bo = 'table', to = 'number',
  tr = 'number', cr = 'number', rl = 'number', ot = 'number', pg = 'number', wt = 'number',
  wn = 'number' }

local function strings(list)
  for i = 1, #list do
    if type(list[i]) ~= 'string' then
      return false
    end
  end
  return true
end

-- The parts of a meta that are more than a typed field; nil, or what is wrong.
local function structure_problem(meta)
  local h, f = meta.h, meta.f
  if #h == 0 then
    return 'has no history'
  end
  for i = 1, #h do
    local ev = h[i]
    if type(ev) ~= 'table' or type(ev.e) ~= 'string' or type(ev.t) ~= 'number' then
      return 'has a bad history event'
    end
  end
  if f and (type(f.g) ~= 'string' or type(f.m) ~= 'string' or type(f.t) ~= 'number') then
    return 'has a bad failure'
  end
  if (meta.g and not strings(meta.g))
      or (meta.bo and (type(meta.bo[1]) ~= 'number' or type(meta.bo[2]) ~= 'number')) then
    return 'has bad tags or backoff'
  end
  local s = meta.s
  if ((s == 'waiting' or s == 'scheduled') and not meta.o)
      or (s == 'running' and not (meta.w and meta.l)) or (s == 'failed' and not f) then
    return 'lacks what a ' .. s .. ' job needs'
  end
  return nil
end

-- What the scripts and the Python side need of a meta: nil, or what is wrong.
local function meta_problem(meta)
  if type(meta.k) ~= 'string' or type(meta.q) ~= 'string' or not STATES[meta.s]
      or type(meta.r) ~= 'number' or type(meta.m) ~= 'number' or type(meta.h) ~= 'table' then
    return 'lacks a field (k, q, s, r, m or h) or has it of the wrong type'
  end
  for name, value in pairs(meta) do
    local want = TYPES[name]
    if want and type(value) ~= want then
      return 'has a bad ' .. name
    end
  end
  return structure_problem(meta)
end

-- Splits and checks a stored record: meta, data; or nil, nil, what is wrong,
-- and the meta when that part is sound. Every read checks what the scripts
-- use: the newline, the meta (strict JSON, the fields they need). A read for a
-- reply (`for_reply`) also checks what Python decodes: the whole record is
-- UTF-8 and the data a strict JSON object, nested at most data_depth_max
-- levels. Only such reads look at the data, so a call that does not reply
-- with it does not pay for decoding it (a heartbeat of jobs with big data).
function Job.decode(raw, for_reply)
  local nl = string.find(raw, '\n', 1, true)
  if not nl then
    return nil, nil, 'no newline between meta and data'
  end
  local ok, meta = Json.strict(string.sub(raw, 1, nl - 1))
  if not ok or type(meta) ~= 'table' then
    return nil, nil, 'meta not a JSON object'
  end
  local problem = meta_problem(meta)
  if problem then
    return nil, nil, 'meta ' .. problem
  end
  local data = string.sub(raw, nl + 1)
  if meta.rl and (meta.rl < 1 or meta.rl % 1 ~= 0 or meta.rl > #data - 2) then
    return nil, nil, 'meta has a bad rl'
  end
  if for_reply then
    if not Text.utf8(raw) then
      return nil, nil, 'not valid UTF-8', meta
    end
    local object, result = Job.split(meta, data)
    local _, data_problem = Json.checked(object, true) -- the whole record is UTF-8
    if data_problem then
      return nil, nil, 'data ' .. data_problem, meta
    end
    if result and not Json.strict(result) then
      return nil, nil, 'result not valid JSON', meta
    end
  end
  return meta, data
end

-- A record's data part and its result (the last meta.rl bytes; nil when none).
-- The scripts carry both together as `data`: only a reply tells them apart.
function Job.split(meta, data)
  local rl = meta.rl
  if not rl then
    return data, nil
  end
  return string.sub(data, 1, #data - rl), string.sub(data, #data - rl + 1)
end

-- The record of `jid`, checked (Job.decode), without writing: meta, data;
-- nil when there is none; or false, what is wrong with it, the raw record,
-- and its meta when that part is sound (for Job.corrupt).
function Job.read(jid, for_reply)
  local raw = redis.call('HGET', K.jobs, jid)
  if not raw then
    return nil
  end
  local meta, data, problem, sound_meta = Job.decode(raw, for_reply)
  if not meta then
    return false, problem, raw, sound_meta
  end
  return meta, data
end

-- The meta of a record, decoded leniently and checked for nothing; nil when the
-- record is gone or its meta does not decode. For reads that only look (the
-- script that takes the job checks the rest).
function Job.glance(jid)
  local raw = redis.call('HGET', K.jobs, jid)
  local nl = raw and string.find(raw, '\n', 1, true)
  if not nl then
    return nil
  end
  local ok, meta = Json.lenient(string.sub(raw, 1, nl - 1))
  return ok and type(meta) == 'table' and meta or nil
end

-- The order ticket (meta.o) of a waiting job, all lanes.lua reads of a record
-- to order lanes; nil when the record is gone, does not decode or is not
-- waiting. Cheaper than Job.read: the pop that takes the job checks the rest.
function Job.ticket(jid)
  local meta = Job.glance(jid)
  if meta and meta.s == 'waiting' and type(meta.o) == 'number' then
    return meta.o
  end
  return nil
end

-- Job.corrupt(jid, problem, raw, sound_meta, out): fails a corrupt record and
-- returns its new meta and data (Place.corrupt in place.lua, bound there);
-- Job.corrupt_view(...) the same meta and data, writing nothing.

-- The record of `jid`: meta, data, or nil. A corrupt one is failed first
-- (Job.corrupt): the caller gets the failed record.
function Job.load(jid, for_reply)
  local meta, data, raw, sound_meta = Job.read(jid, for_reply)
  if meta == false then
    return Job.corrupt(jid, data, raw, sound_meta)
  end
  return meta, data
end

-- The record of `jid` for a read-only operation (no-writes): meta, data, or nil.
-- A corrupt one answers as the failed record it becomes (Job.corrupt_view),
-- left for the next operation that writes to fail for good.
function Job.view(jid, for_reply)
  local meta, data, raw, sound_meta = Job.read(jid, for_reply)
  if meta == false then
    return Job.corrupt_view(jid, data, raw, sound_meta)
  end
  return meta, data
end

function Job.must(jid)
  local meta, data = Job.load(jid)
  if not meta then
    E.raise('NO_SUCH_JOB', 'no job ' .. jid)
  end
  return meta, data
end

-- Loops that drop corrupt or stray entries of an index share a budget per call.
local dropped = 0
per_call(function()
  dropped = 0
end)

-- True while this call may drop one more entry (and counts it).
function Job.may_drop()
  if dropped >= LIMITS.drop_batch then
    return false
  end
  dropped = dropped + 1
  return true
end

-- Stores the record; returns the meta as encoded, for a reply to reuse.
function Job.save(jid, meta, data)
  local encoded = cjson.encode(meta)
  redis.call('HSET', K.jobs, jid, encoded .. '\n' .. data)
  return encoded
end

-- Events a tracked job publishes on K.events.
local PUBLISHED = { put = true, popped = true, completed = true, retried = true, failed = true,
  ['lease-lost'] = true }

-- Tells subscribers of K.events about a tracked job: {"event","jid","queue","t",...}.
function Job.publish(jid, meta, ev)
  if meta.tr and PUBLISHED[ev.e] then
    local message = { event = ev.e, jid = jid, queue = meta.q, t = ev.t, worker = ev.w,
      group = ev.g }
    redis.call('PUBLISH', K.events, cjson.encode(message))
  end
end

-- Appends an event, unpublished; the history keeps its first event and the newest ones.
function Job.append(meta, now_ms, event, fields)
  local ev = fields or {}
  ev.e = event
  ev.t = now_ms
  local h = meta.h
  h[#h + 1] = ev
  if #h > LIMITS.history_max then
    table.remove(h, 2)
  end
  return ev
end

-- Appends an event and publishes it (a tracked job).
function Job.event(jid, meta, now_ms, event, fields)
  Job.publish(jid, meta, Job.append(meta, now_ms, event, fields))
end

-- The state a reader sees: a waiting job whose lane is over its limit is throttled.
function Job.visible_state(meta)
  if meta.s == 'waiting' and meta.dm then
    local lane = (meta.p or 0) .. '|' .. meta.dm
    if redis.call('ZSCORE', K.throttled(meta.q), lane) then
      return 'throttled'
    end
  end
  return meta.s
end

-- {"jid":..,"meta":{..},"data":{..}} plus any pre-encoded extra fields; `encoded`
-- is the meta already encoded (by Job.save), when at hand.
-- Extra field names are the scripts' own identifiers (nothing to escape); `tail`,
-- when given, is more fields already written as JSON (',"name":value...').
function Job.reply(jid, meta, data, extra, encoded, tail)
  local object, result = Job.split(meta, data)
  local text = '{"jid":' .. cjson.encode(jid) .. ',"meta":' .. (encoded or cjson.encode(meta))
    .. ',"data":' .. object
  if result then
    text = text .. ',"result":' .. result
  end
  if extra then
    for i = 1, #extra do
      text = text .. ',"' .. extra[i][1] .. '":' .. extra[i][2]
    end
  end
  return text .. (tail or '') .. '}'
end

-- Cuts a failure message to the cap, keeping its tail (where a traceback ends);
-- bytes that are not UTF-8 are escaped first.
function Job.cap_message(message)
  return Text.tail(message, LIMITS.message_max_bytes)
end
