-- batch_open.lua: creates a batch (lib/batch.lua), open and not sealed, with
-- no jobs yet.
--
-- KEYS[1]  the namespace root
-- ARGV     bid, description (text, at most note_max_bytes; '' for none),
--          on_success spec, on_success data, on_complete spec, on_complete data
--          a callback: put.lua's spec JSON (with its jid; no batch, depends or
--          by) and data JSON, or '' and '' for none. Its data may not hold
--          bid, total, completed or failed: the batch adds them when it fires.
-- Reply    1 (also for the same open again: a retry after a lost reply)
-- Errors   BAD_ARG (a malformed argument, a bad callback, the bid taken)

if #ARGV ~= 6 then
  E.bad('batch_open takes a bid, a description and two callbacks (spec and data each)')
end
local now_ms = Clock.ms(Clock.now_us())
Batch.open(ARGV[1], ARGV[2], { ARGV[3], ARGV[4] }, { ARGV[5], ARGV[6] }, now_ms)
return 1
