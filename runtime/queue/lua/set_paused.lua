-- set_paused.lua: pauses a queue (pops skip it) or resumes it.
--
-- KEYS[1]  the namespace root
-- ARGV     queue, paused ("1" pause, "0" resume)
-- Reply    1
-- Errors   BAD_ARG

local queue = Check.queue('queue', ARGV[1])
local paused = ARGV[2]
if paused ~= '0' and paused ~= '1' then
  E.bad('paused must be 0 or 1')
end
redis.call('ZADD', K.queues, 'NX', Clock.ms(Clock.now_us()), queue)
if paused == '1' then
  redis.call('HSET', K.queue(queue), 'paused', '1')
else
  redis.call('HDEL', K.queue(queue), 'paused')
  Place.wake(queue)
end
return 1
