-- counter.lua: the checks every write to a segment of a dlock Counter
-- makes before it writes (scripts counter_add.lua and counter_set.lua).

-- ctr_count reads a segment's count key C: its value as a number (absent:
-- 0), or nil if C is not an integer string (another program's key under
-- our name: write nothing).
local function ctr_count(C)
  local c = redis.pcall('GET', C)
  if is_err(c) or (c and not string.match(c, '^%-?%d+$')) then
    return nil
  end
  return tonumber(c or '0')
end

-- ctr_segments compares the segment count recorded in R with n, the
-- caller's (a decimal string), and returns nil if they are equal, else the
-- reply the script returns: {-2, 0} R is not a count, {-3, recorded} it
-- records another count, {-4, 0} it records none yet (the caller records
-- one for every segment, then runs the script again).
local function ctr_segments(R, n)
  local r = redis.pcall('GET', R)
  if is_err(r) or (r and not string.match(r, '^%d+$')) then
    return {-2, 0}
  end
  if not r then
    return {-4, 0}
  end
  if r ~= n then
    return {-3, tonumber(r)}
  end
  return nil
end

-- ctr_guard returns nil if the caller may write a segment: R records n as
-- the counter's segment count (see ctr_segments) and the segment's lock
-- key K holds the caller's token; else the reply the script returns
-- ({-1, 0}: the lock is not the caller's).
local function ctr_guard(R, n, K, token)
  local bad = ctr_segments(R, n)
  if bad then
    return bad
  end
  if redis.pcall('GET', K) ~= token then
    return {-1, 0}
  end
  return nil
end
