-- failed.lua: failed jobs by group.
--
-- KEYS[1]  the namespace root
-- ARGV     group, start, count
--          group '' : the groups and how many failed jobs each holds
--          else     : that group's jobs, newest first, from start, at most count
-- Reply    {"groups": {"<group>": n, ...}} or {"total": n, "jobs": [job, ...]}
--          A listed job whose record does not decode is failed again, as
--          runtime.CorruptJob (lib/job.lua), and listed as that record.
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
      redis.call('LREM', key, 1, jid)
      if redis.call('ZINCRBY', K.failed_groups, -1, group) + 0 <= 0 then
        redis.call('ZREM', K.failed_groups, group)
      end
      meta, data = Job.corrupt(jid, data, raw, sound_meta, '')
    end
    if meta then
      jobs[#jobs + 1] = Job.reply(jid, meta, data, { { 'state', cjson.encode(meta.s) } })
    end
  end
end
return '{"total":' .. redis.call('LLEN', key) .. ',"jobs":[' .. table.concat(jobs, ',') .. ']}'
