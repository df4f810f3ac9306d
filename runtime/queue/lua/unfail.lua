-- unfail.lua: moves failed jobs of a group back to a queue, oldest first, with
-- their retries renewed.
--
-- KEYS[1]  the namespace root
-- ARGV     group, queue, count (1..unfail_max)
-- Reply    how many jobs moved
-- Errors   BAD_ARG

local group = Check.token('group', ARGV[1], LIMITS.group_max)
local queue = Check.queue('queue', ARGV[2])
local count = Check.int('count', ARGV[3], 1, LIMITS.unfail_max)
local now_us = Clock.now_us()
local now_ms = Clock.ms(now_us)
local key = K.failed(group)
local moved = 0
for _ = 1, count do
  local jid = redis.call('RPOP', key)
  if not jid then
    break
  end
  local meta, data = Job.load(jid)
  if meta then
    Job.event(jid, meta, now_ms, 'unfailed', { q = queue, fq = meta.q })
    meta.q, meta.m, meta.a, meta.f, meta.o = queue, meta.r, nil, nil, nil
    Place.enqueue(jid, meta, data, nil, now_us, false)
    moved = moved + 1
  end
end
if moved > 0 and redis.call('ZINCRBY', K.failed_groups, -moved, group) + 0 <= 0 then
  redis.call('ZREM', K.failed_groups, group)
end
return moved
