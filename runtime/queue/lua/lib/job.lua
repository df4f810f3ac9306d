-- job.lua: the job record, its history, and its reply form.
--
-- A record is one field of the hash K.jobs: meta JSON, "\n", data JSON. Data is
-- the caller's JSON text, stored and returned byte for byte, never decoded here.
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
--     the put, so its time is the put time (the history keeps its first event)

local Job = {}

function Job.load(jid)
  local raw = redis.call('HGET', K.jobs, jid)
  if not raw then
    return nil
  end
  local nl = string.find(raw, '\n', 1, true)
  return cjson.decode(string.sub(raw, 1, nl - 1)), string.sub(raw, nl + 1)
end

function Job.must(jid)
  local meta, data = Job.load(jid)
  if not meta then
    E.raise('NO_SUCH_JOB', 'no job ' .. jid)
  end
  return meta, data
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

-- Appends an event; the history keeps its first event and the newest ones.
function Job.event(jid, meta, now_ms, event, fields)
  local ev = fields or {}
  ev.e = event
  ev.t = now_ms
  local h = meta.h
  h[#h + 1] = ev
  if #h > LIMITS.history_max then
    table.remove(h, 2)
  end
  Job.publish(jid, meta, ev)
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
function Job.reply(jid, meta, data, extra, encoded)
  local fields = { { 'jid', cjson.encode(jid) }, { 'meta', encoded or cjson.encode(meta) },
    { 'data', data } }
  for _, f in ipairs(extra or {}) do
    fields[#fields + 1] = f
  end
  return Json.object(fields)
end

-- Cuts a failure message to the cap, keeping its tail (where a traceback ends).
function Job.cap_message(message)
  local cap = LIMITS.message_max_bytes
  if #message <= cap then
    return message
  end
  local marker = '[... cut ' .. (#message - cap) .. ' bytes ...]\n'
  local start = #message - cap + #marker + 1
  -- never start inside a UTF-8 sequence (continuation bytes are 0x80-0xBF)
  while start <= #message and string.byte(message, start) >= 128
      and string.byte(message, start) < 192 do
    start = start + 1
  end
  return marker .. string.sub(message, start)
end
