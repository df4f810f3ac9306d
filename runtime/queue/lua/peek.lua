-- peek.lua: the next jobs a pop of this queue would take, without taking them.
-- Due scheduled jobs that a pop would promote first are listed where it would
-- put them: after the jobs waiting at their priority, earliest due first.
--
-- KEYS[1]  the namespace root
-- ARGV     queue, count (1..peek_max)
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Reply    JSON list of jobs {"jid", "meta", "data", "state"}. A job whose
--          record does not decode is listed as the failed record it becomes
--          (runtime.CorruptJob, lib/job.lua), in the place a pop would meet
--          (and fail) it.
-- Errors   BAD_ARG

local queue = Check.queue('queue', ARGV[1])
local count = Check.int('count', ARGV[2], 1, LIMITS.peek_max)
local now_us = Clock.now_us()

-- Due scheduled jobs by priority ({prio -> {jid, ...}}), as Place.promote takes them.
local due = {}
local bound = int(Clock.ms(now_us) * 1000) -- due times are whole milliseconds
for _, member in ipairs(redis.call('ZRANGEBYSCORE', K.scheduled(queue), '-inf', bound, 'LIMIT',
    '0', int(math.min(count, LIMITS.promote_batch)))) do
  local jid = Place.scheduled_jid(member)
  local meta = Job.read(jid)
  local prio = meta and meta.p or 0
  due[prio] = due[prio] or {}
  table.insert(due[prio], jid)
end

local out = {}
local jids, from = Lanes.peek(queue, count, due)
for _, jid in ipairs(jids) do
  local meta, data, raw, sound_meta = Job.read(jid, true)
  local failed_now = meta == false
  if failed_now then
    meta, data = Job.corrupt_view(jid, data, raw, sound_meta, queue)
  end
  if failed_now or (meta and (meta.s == WAITING or (meta.s == SCHEDULED and not from[jid]))) then
    local state = (failed_now or meta.s == WAITING) and meta.s or WAITING
    out[#out + 1] = Job.reply(jid, meta, data, { { 'state', cjson.encode(state) } })
  end
end
return '[' .. table.concat(out, ',') .. ']'
