-- counter_add.lua: add to one segment of a segmented counter (a take, or
-- units put back), only while the caller holds that segment's lock, only
-- if the counter's recorded segment count is the caller's, and never
-- below zero. Each call carries a fresh operation id: a call that applies
-- leaves a marker under it, so the same call run a second time (the Redis
-- client re-sends a command whose reply a broken connection lost)
-- reports what the first did instead of adding again. A call that lands
-- after its caller's lock ended (released, expired, or force-released
-- and taken by another) writes nothing.
-- Uses internal/lualib (prepended).
--
-- KEYS[1]  the segment's lock key (holds the caller's token while held)
-- KEYS[2]  the segment's count (a string integer; absent = 0; no TTL)
-- KEYS[3]  the operation's marker: the segment lock's queue name plus ':'
--          and the operation id (a waiter-lease name); it outlives every
--          run of the operation that can still pass the lock check: it
--          expires 10 s after the later of the lock's expiry as it stands
--          and the end of ARGV[4], and never sooner than in 10 s
-- KEYS[4]  the counter's segment count, recorded beside the segment (a
--          string integer; no TTL)
-- ARGV[1]  the caller's lock token
-- ARGV[2]  the amount to add (negative: take)
-- ARGV[3]  the caller's segment count (decimal)
-- ARGV[4]  the ms from now within which the caller may still send this
--          call (it sends no copy later)
--
-- Returns {1, count}   done (now or by an earlier run of this operation);
--                      count = the segment's value
--         {0, count}   not enough: the segment holds only count
--         {-1, 0}      the caller does not hold the segment's lock
--         {-2, 0}      KEYS[2] or KEYS[4] is not an integer string
--         {-3, n}      the counter's recorded segment count is n, not ARGV[3]
--         {-4, 0}      no segment count is recorded in KEYS[4] yet
--         Nothing is written unless the reply is {1, count}.
local c = ctr_count(KEYS[2])
if not c then
  return {-2, 0} -- not a count: another program's key under our name
end
if redis.pcall('GET', KEYS[3]) == '~applied' then
  return {1, c} -- this operation already ran
end
local bad = ctr_guard(KEYS[4], ARGV[3], KEYS[1], ARGV[1])
if bad then
  return bad
end
local d = tonumber(ARGV[2])
if c + d < 0 then
  return {0, c}
end
local keep = math.max(redis.call('PTTL', KEYS[1]), tonumber(ARGV[4]), 0) + 10000
redis.call('SET', KEYS[3], '~applied', 'PX', keep)
return {1, redis.call('INCRBY', KEYS[2], d)}
