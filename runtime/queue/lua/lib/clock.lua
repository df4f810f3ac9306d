-- clock.lua: the only source of time. Redis TIME, in microseconds.
--
-- The one test seam: when the key K.test_clock holds a number, that is the
-- time. Only tests set it (tests/unit/test_clock_seam.py proves the package
-- never writes it), and with it the field test-clock of the config hash, which
-- every call reads anyway (config.lua): a call reads the key only then, not a
-- GET for every call of a deployment that never has one.

-- Read once per call: a call is one atomic step, and its parts (the
-- operation, then what runs at its end: handoff.lua) see one time.

local Clock = {}
local now, now_call -- the time (us) read by call number now_call (CALL)

function Clock.now_us()
  if now_call == CALL then
    return now
  end
  local frozen = Config.get('test-clock') and redis.call('GET', K.test_clock)
  if frozen then
    now = tonumber(frozen)
  else
    local t = redis.call('TIME')
    now = tonumber(t[1]) * 1000000 + tonumber(t[2])
  end
  now_call = CALL
  return now
end

function Clock.ms(us)
  return math.floor(us / 1000)
end
