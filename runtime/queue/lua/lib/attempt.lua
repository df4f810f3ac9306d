-- attempt.lua: what an attempt leaves on its job besides its state.
--
--   result    a complete job's JSON return value, kept at the end of its record
--             (meta.rl bytes after the data: lib/job.lua), at most
--             result-max-bytes; removed with the record
--   output    the output tail of the job's last attempt, in K.output (meta.ot),
--             at most output_max_bytes (its tail)
--   usage     what the attempt cost, as its child measured it: meta.u =
--             [cpu_s, max_rss_mb] (a third value 0: the peak is the child's since
--             it started, the kernel would not reset it), the last attempt's;
--             each ending attempt's is also on its history event (field u)
--   progress  the last progress the running attempt told, in K.progress
--             (meta.pg); while the job runs it is listed in K.progressing(queue).
--             A new attempt starts without (Attempt.restart); a job that ended
--             keeps its last one
--
-- Each is written only when there is one, so a job without them costs nothing.

local Attempt = {}

-- The result text to keep, or nil and a note saying why none is kept. "" and
-- "null" are no result (a job that returns None).
function Attempt.result(text)
  if text == '' or text == 'null' then
    return nil
  end
  local max = Config.get('result-max-bytes')
  if #text > max then
    return nil, 'result not stored: ' .. #text .. ' bytes, over result-max-bytes ('
      .. int(max) .. ')'
  end
  if not Text.utf8(text) then
    return nil, 'result not stored: not JSON (not valid UTF-8)'
  end
  local ok, value = Json.strict(text)
  if not ok then
    return nil, 'result not stored: not JSON (' .. (value == Json.DEEP and Json.DEEP
      or 'it does not decode') .. ')'
  end
  return text
end

-- A complete job's data with `result` (or none) kept after it; sets meta.rl.
function Attempt.keep_result(meta, data, result)
  local object = Job.split(meta, data)
  meta.rl = result and #result or nil
  local kept = result and object .. result or object
  if Json.vouched(data) then -- and the result was checked (Attempt.result)
    Json.vouch(kept)
  end
  return kept
end

-- The usage a report carries: "" (none measured: nil), or "<cpu_s> <max_rss_mb>"
-- with " c" after when the peak is the child's since it started. BAD_ARG else.
function Attempt.usage(text)
  if text == '' or text == nil then
    return nil
  end
  local cpu, rss, scope = string.match(text, '^(%d+%.?%d*) (%d+%.?%d*)( ?c?)$')
  cpu, rss = tonumber(cpu), tonumber(rss)
  if not cpu or cpu > 1e9 or rss > 1e9 then
    E.bad('usage must be "<cpu_s> <max_rss_mb>" (optionally " c"), numbers >= 0')
  end
  if scope == ' c' then
    return { cpu, rss, 0 }
  end
  return { cpu, rss }
end

-- Keeps the attempt's output tail ('' for none: the last attempt's goes).
function Attempt.output(jid, meta, output)
  if output ~= '' then
    redis.call('HSET', K.output, jid, Text.tail(output, LIMITS.output_max_bytes))
    meta.ot = 1
  elseif meta.ot then
    redis.call('HDEL', K.output, jid)
    meta.ot = nil
  end
end

-- Stores the running job's progress and tells the subscribers of a tracked
-- job (an event "progress"). Saves the record the first time in an attempt.
function Attempt.progress(jid, meta, data, done, total, message, now_ms)
  local value = Json.object({
    { 'done', cjson.encode(done) },
    { 'total', total and cjson.encode(total) or 'null' },
    { 'message', message and cjson.encode(message) or 'null' },
    { 'at_ms', int(now_ms) },
  })
  redis.call('HSET', K.progress, jid, value)
  redis.call('ZADD', K.progressing(meta.q), now_ms, jid)
  if not meta.pg then
    meta.pg = 1
    Job.save(jid, meta, data)
  end
  if meta.tr then
    redis.call('PUBLISH', K.events, cjson.encode({ event = 'progress', jid = jid,
      queue = meta.q, t = now_ms, done = done, total = total, message = message }))
  end
end

-- A new attempt begins: the last one's progress goes.
function Attempt.restart(jid, meta)
  if meta.pg then
    redis.call('HDEL', K.progress, jid)
    meta.pg = nil
  end
end

-- The job's lease ends: it is no longer listed as running with progress.
function Attempt.stopped(jid, meta)
  if meta.pg then
    redis.call('ZREM', K.progressing(meta.q), jid)
  end
end

-- The job is deleted: its output and progress go with it.
function Attempt.forget(jid, meta)
  if meta.ot then
    redis.call('HDEL', K.output, jid)
  end
  if meta.pg then
    redis.call('HDEL', K.progress, jid)
    redis.call('ZREM', K.progressing(meta.q), jid)
  end
end

-- A note for a job's history: free text cut to note_max_bytes; nil for none.
function Attempt.note(...)
  local parts = {}
  for i = 1, select('#', ...) do
    local part = select(i, ...)
    if part and part ~= '' then
      parts[#parts + 1] = part
    end
  end
  if #parts == 0 then
    return nil
  end
  return Text.head(table.concat(parts, '; '), LIMITS.note_max_bytes)
end
