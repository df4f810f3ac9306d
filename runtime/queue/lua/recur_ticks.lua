-- recur_ticks.lua: adds precomputed ticks to a cron recurrence running low (a
-- pop asked for them in its reply). Ticks at or before the newest stored one are
-- ignored, so a refill repeated or raced by two masters adds each tick once.
--
-- KEYS[1]  the namespace root
-- ARGV     id, cron (the expression the ticks were computed for), tick_1, ...
-- Reply    how many ticks were added (0 when the recurrence is gone or changed)
-- Errors   BAD_ARG

local id = Check.token('id', ARGV[1], LIMITS.recur_id_max)
local def = Recur.load(id)
if not def or def.cron ~= ARGV[2] then
  return 0
end
local key = K.recur_ticks(id)
local added = 0
for i = 3, #ARGV do
  local tick = Check.int('tick', ARGV[i], 0, 1e15)
  if tick > def.ticks_to and redis.call('ZCARD', key) < LIMITS.recur_ticks_max then
    redis.call('ZADD', key, tick, int(tick))
    def.ticks_to = tick
    added = added + 1
  end
end
if added > 0 then
  def.next = tonumber(redis.call('ZRANGE', key, 0, 0)[1])
  Recur.save(def)
end
return added
