-- tag.lua: adds or removes tags of a job.
--
-- KEYS[1]  the namespace root
-- ARGV     jid, "add" | "remove", tag_1, tag_2, ...
-- Reply    JSON list of the job's tags after the change
-- Errors   NO_SUCH_JOB, BAD_ARG (a bad verb or tag, more than tags_max tags). A
--          job whose record does not decode is failed first (runtime.CorruptJob,
--          lib/job.lua); the change applies to that record.

local jid, verb = ARGV[1], ARGV[2]
if verb ~= 'add' and verb ~= 'remove' then
  E.bad('tag takes "add" or "remove", got ' .. tostring(verb))
end
local tags = {}
for i = 3, #ARGV do
  tags[#tags + 1] = Check.token('tag', ARGV[i], LIMITS.tag_max)
end
local meta, data = Job.must(jid)
local now_ms = Clock.ms(Clock.now_us())
local current, has = meta.g or {}, {}
for _, tag in ipairs(current) do
  has[tag] = true
end
if verb == 'add' then
  local new = {}
  for _, tag in ipairs(tags) do
    if not has[tag] then
      has[tag] = true
      new[#new + 1] = tag
    end
  end
  if #current + #new > LIMITS.tags_max then
    E.bad('a job has at most ' .. LIMITS.tags_max .. ' tags')
  end
  for _, tag in ipairs(new) do
    current[#current + 1] = tag
    redis.call('ZADD', K.tag(tag), now_ms, jid)
  end
else
  local drop = {}
  for _, tag in ipairs(tags) do
    drop[tag] = true
    redis.call('ZREM', K.tag(tag), jid)
  end
  local kept = {}
  for _, tag in ipairs(current) do
    if not drop[tag] then
      kept[#kept + 1] = tag
    end
  end
  current = kept
end
meta.g = #current > 0 and current or nil
Job.save(jid, meta, data)
return Json.array(current)
