-- now.lua: the deployment's time, as the scripts see it: what clients use to
-- compute schedules in Python (cron ticks), instead of their own clocks.
--
-- KEYS[1]  the namespace root
-- ARGV     (none)
-- Reply    the time in milliseconds since the epoch (integer)
-- Read-only (no-writes): runs while Redis is full, and on replicas.
-- Errors   none

return Clock.ms(Clock.now_us())
