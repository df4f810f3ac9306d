-- clock.lua: the only source of time. Redis TIME, in microseconds.
--
-- The one test seam: when the key K.test_clock holds a number, that is the
-- time. Only tests set it (tests/unit/test_clock_seam.py proves the package
-- never writes it).

local Clock = {}

function Clock.now_us()
  local frozen = redis.call('GET', K.test_clock)
  if frozen then
    return tonumber(frozen)
  end
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000000 + tonumber(t[2])
end

function Clock.ms(us)
  return math.floor(us / 1000)
end
