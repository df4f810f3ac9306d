-- retention.lua: deletes completed jobs past retention (lib/retention.lua), as
-- completions and pops do; for a Redis that is full (maxmemory), where those
-- are refused and this is not (allow-oom: it only frees).
--
-- KEYS[1]  the namespace root
-- ARGV     batch  most jobs to delete, 1..retention_batch
-- Reply    how many completed jobs were deleted (integer)
-- Errors   BAD_ARG

local batch = Check.int('batch', ARGV[1], 1, LIMITS.retention_batch)
return Retention.trim(Clock.now_us(), batch)
