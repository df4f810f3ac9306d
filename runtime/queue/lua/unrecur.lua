-- unrecur.lua: removes a recurrence (jobs it already spawned stay).
--
-- KEYS[1]  the namespace root
-- ARGV     id
-- Reply    1 removed, 0 no such recurrence
--          (one that does not decode is removed too; a pop of its queue
--          drops it from that queue's schedule)
-- Errors   BAD_ARG

local id = Check.token('id', ARGV[1], LIMITS.recur_id_max)
local def = Recur.load(id)
if def == nil then
  return 0
end
if def then
  redis.call('ZREM', K.recurring(def.q), id)
end
redis.call('DEL', K.recur_ticks(id))
redis.call('HDEL', K.recur, id)
return 1
