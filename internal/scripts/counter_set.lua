-- counter_set.lua: set one segment of a segmented counter to a value, only
-- while the caller holds that segment's lock and only if the counter's
-- recorded segment count is the caller's. A call that lands after its
-- caller's lock ended (released, expired, or force-released and taken by
-- a taker) writes nothing, so it never puts back units sold meanwhile. A
-- second run of the same call (re-sent by the Redis client) under the same
-- lock writes the same value again: nothing else writes the segment while
-- the caller holds its lock.
-- Uses internal/lualib (prepended).
--
-- KEYS[1]  the segment's lock key (holds the caller's token while held)
-- KEYS[2]  the segment's count (a string integer; no TTL)
-- KEYS[3]  the counter's segment count, recorded beside the segment (a
--          string integer; no TTL)
-- ARGV[1]  the caller's lock token
-- ARGV[2]  the segment's new count (>= 0)
-- ARGV[3]  the caller's segment count (decimal)
--
-- Returns {1, 0}   done
--         {-1, 0}  the caller does not hold the segment's lock
--         {-2, 0}  KEYS[2] or KEYS[3] is not an integer string
--         {-3, n}  the counter's recorded segment count is n, not ARGV[3]
--         {-4, 0}  no segment count is recorded in KEYS[3] yet
--         Nothing is written unless the reply is {1, 0}.
if not ctr_count(KEYS[2]) then
  return {-2, 0} -- not a count: another program's key under our name
end
local bad = ctr_guard(KEYS[3], ARGV[3], KEYS[1], ARGV[1])
if bad then
  return bad
end
redis.call('SET', KEYS[2], ARGV[2])
return {1, 0}
