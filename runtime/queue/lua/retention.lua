-- retention.lua: deletes completed jobs and tombstones of cancelled jobs past
-- retention (lib/retention.lua), as completions, pops and cancels do; for a
-- Redis that is full (maxmemory), where those are refused and this is not
-- (allow-oom: it only frees).
--
-- KEYS[1]  the namespace root
-- ARGV     batch  most jobs to delete, 1..retention_batch, of each kind
-- Reply    how many completed jobs and tombstones were deleted (integer)
-- Errors   BAD_ARG

local batch = Check.int('batch', ARGV[1], 1, LIMITS.retention_batch)
local now_us = Clock.now_us()
return Retention.trim(now_us, batch) + Retention.trim_cancelled(now_us, batch)
