-- counter_segments.lua: record a segmented counter's segment count beside
-- one of its segments, unless one is recorded there already, and return
-- the count recorded. It only ever writes a key that is absent, with the
-- caller's count: run twice, or landing after another caller recorded
-- one, it writes nothing.
--
-- KEYS[1]  the segment count recorded beside the segment (a string
--          integer; no TTL)
-- ARGV[1]  the caller's segment count (decimal, >= 1)
--
-- Returns the recorded count (ARGV[1] if this call recorded it), or -2 if
-- KEYS[1] is not an integer string (nothing was written).
local r = redis.pcall('GET', KEYS[1])
if type(r) == 'table' or (r and not string.match(r, '^%d+$')) then
  return -2
end
if r then
  return tonumber(r)
end
redis.call('SET', KEYS[1], ARGV[1])
return tonumber(ARGV[1])
