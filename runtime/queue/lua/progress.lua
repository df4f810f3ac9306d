-- progress.lua: the lease holder tells how far its running jobs are (many in one step).
--
-- KEYS[1]  the namespace root
-- ARGV     worker, then per job: jid, token, done, total, message
--          done: a number >= 0; total: a number >= 0, or "" for none;
--          message: text ("" for none), kept to its first
--          progress_message_max_bytes
-- Stored on the job (lib/attempt.lua: job.progress {"done", "total", "message",
-- "at_ms"}) and published on K.events for a tracked job (event "progress").
-- A job keeps the last progress of its last attempt; a new attempt starts
-- without one.
-- Reply    JSON list, one entry per job: {"jid", "ok": true, "state": "running"}
--          or {"jid", "error": code, "message"}
-- Errors   per job: LEASE_LOST (not running under this worker and token, or its
--          lease expired), NO_SUCH_JOB, BAD_ARG; BAD_ARG for malformed ARGV

local worker = Check.token('worker', ARGV[1], LIMITS.worker_max)
if #ARGV % 5 ~= 1 then
  E.bad('progress takes a worker, then groups of jid, token, done, total and message')
end
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)

local function progress(jid, token, done_arg, total_arg, message)
  local done = Check.number('done', done_arg, 0, 1e15, true)
  local total = total_arg ~= '' and Check.number('total', total_arg, 0, 1e15, true) or nil
  local meta, data = Job.must(jid)
  if not (meta.s == RUNNING and meta.w == worker and meta.l == token
      and Lease.live(jid, meta, now_us)) then
    E.raise('LEASE_LOST', jid .. ' is not running under worker ' .. worker .. ' with that token')
  end
  message = message ~= '' and Text.head(message, LIMITS.progress_message_max_bytes) or nil
  Attempt.progress(jid, meta, data, done, total, message, now_ms)
  return meta.s
end

local out = {}
for i = 2, #ARGV, 5 do
  out[#out + 1] = E.item(ARGV[i],
    E.attempt(progress, ARGV[i], ARGV[i + 1], ARGV[i + 2], ARGV[i + 3], ARGV[i + 4]))
end
return '[' .. table.concat(out, ',') .. ']'
