-- failed.lua: failed jobs by group.
--
-- KEYS[1]  the namespace root
-- ARGV     group, start, count
--          group '' : the groups and how many failed jobs each holds
--          else     : that group's jobs, newest first, from start, at most count
-- Reply    {"groups": {"<group>": n, ...}} or {"total": n, "jobs": [job, ...]}
--          A listed job whose record does not decode is listed as the
--          record it becomes, failed as runtime.CorruptJob (lib/job.lua),
--          where it is (unfail, cancel or requeue of it fail it for good).
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   BAD_ARG

local group = ARGV[1] or ''
local start = Check.int('start', ARGV[2] or 0, 0, 1e12)
local count = Check.int('count', ARGV[3] or 25, 0, LIMITS.get_max)
if group == '' then
  local pairs_ = redis.call('ZRANGE', K.failed_groups, 0, -1, 'WITHSCORES')
  local parts = {}
  for i = 1, #pairs_, 2 do
    parts[#parts + 1] = cjson.encode(pairs_[i]) .. ':' .. int(tonumber(pairs_[i + 1]))
  end
  return '{"groups":{' .. table.concat(parts, ',') .. '}}'
end
local key = K.failed(group)
local jobs = {}
if count > 0 then
  for _, jid in ipairs(redis.call('LRANGE', key, start, start + count - 1)) do
    local meta, data, raw, sound_meta = Job.read(jid, true)
    if meta == false then
      meta, data = Job.corrupt_view(jid, data, raw, sound_meta, '')
    end
    if meta then
      jobs[#jobs + 1] = Job.reply(jid, meta, data, { { 'state', cjson.encode(meta.s) } })
    end
  end
end
return '{"total":' .. redis.call('LLEN', key) .. ',"jobs":[' .. table.concat(jobs, ',') .. ']}'
