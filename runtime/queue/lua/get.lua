-- get.lua: reads jobs with their whole history.
--
-- KEYS[1]  the namespace root
-- ARGV     jid_1, jid_2, ...
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Reply    JSON list, per jid: null, or {"jid", "meta", "data", "state",
--          "lease_expires_ms" (running jobs), "depends" [jids it waits on],
--          "dependents" [jids waiting on it], "result" (complete jobs with
--          one: the JSON as stored), "output" (text: its last attempt's
--          output tail, when it has one), "progress" ({"done", "total",
--          "message", "at_ms"}, when it told one: lib/attempt.lua)}
--          state is meta.s except "throttled" for a waiting job whose domain
--          is over its limit right now. A jid that a running job's duplicate
--          put was given answers the job it was folded into (its own jid in
--          "jid"; lib/unique.lua). A record that does not decode answers as
--          the failed record it becomes (runtime.CorruptJob; the next
--          operation that writes and meets it fails it: lib/job.lua).
-- Errors   BAD_ARG for more than get_max jids

if #ARGV > LIMITS.get_max then
  E.bad('get takes at most ' .. LIMITS.get_max .. ' jids per call')
end
local out = {}
for i, jid in ipairs(ARGV) do
  local meta, data = Job.view(jid, true)
  if not meta then
    jid = Unique.folded_into(jid) or jid
    meta, data = Job.view(jid, true)
  end
  if meta then
    local expiry = meta.s == RUNNING and Lease.expiry(jid, meta)
    local extra = {
      { 'state', cjson.encode(Job.visible_state(meta)) },
      { 'lease_expires_ms', expiry and int(Clock.ms(expiry)) or 'null' },
      { 'depends', Json.array(redis.call('SMEMBERS', K.deps(jid))) },
      { 'dependents', Json.array(redis.call('SMEMBERS', K.dependents(jid))) },
    }
    local output = meta.ot and redis.call('HGET', K.output, jid)
    if output then
      extra[#extra + 1] = { 'output', cjson.encode(output) }
    end
    local progress = meta.pg and redis.call('HGET', K.progress, jid)
    if progress then
      extra[#extra + 1] = { 'progress', progress }
    end
    out[i] = Job.reply(jid, meta, data, extra)
  else
    out[i] = 'null'
  end
end
return '[' .. table.concat(out, ',') .. ']'
