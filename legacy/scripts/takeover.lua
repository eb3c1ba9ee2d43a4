-- takeover.lua: take over an expired legacy lock by compare-and-set, in
-- place of the older clients' GETSET.
--
-- The caller's GET read ARGV[1], a timestamp that has expired. Set the key
-- to ARGV[2] only if it still holds ARGV[1], or is gone (then like SETNX),
-- so a takeover that lands late (after another contender took the key
-- over) or runs twice writes nothing over a newer value: GETSET cannot
-- refuse, this can.
--
-- ARGV[2] is not ours alone: every client taking over in the same unit
-- with the same timeout writes the same timestamp, so finding it says
-- nothing about who wrote it. So a takeover runs at most once: its first
-- run leaves a tombstone under the attempt's own random id, holding its
-- reply, and a repeat (the Redis client re-sending it after a broken
-- connection) answers that reply and writes nothing else.
-- Uses is_err (dlock's internal/lualib, prepended).
--
-- KEYS[1]  the lock key
-- KEYS[2]  the attempt's tombstone: the key's wait-queue name, ':', the
--          attempt's id (a waiter-lease name no waiter uses)
-- ARGV[1]  the expired timestamp the caller's GET read
-- ARGV[2]  the caller's timestamp: now + timeout + 1
-- ARGV[3]  how long the tombstone lives, in ms: until ARGV[2] has passed
--
-- Returns  {1}        taken over: the key held ARGV[1] or was gone, and
--                     now holds ARGV[2]
--          {0, found} the key holds found, another value: left untouched
--          {-2}       the key exists but is not a string: left untouched
--          a repeat returns the first run's reply
local done = redis.pcall('GET', KEYS[2])
if type(done) == 'string' and string.sub(done, 1, 1) == '~' then
  local code = tonumber(string.sub(done, 2, 3))
  if code == 0 then
    return {0, string.sub(done, 4)}
  end
  return {code}
end
local cur = redis.pcall('GET', KEYS[1])
local reply
if is_err(cur) then
  reply = {-2}
elseif cur and cur ~= ARGV[1] then
  reply = {0, cur}
else
  redis.call('SET', KEYS[1], ARGV[2])
  reply = {1}
end
local rec = string.format('~%2d', reply[1])
if reply[2] then
  rec = rec .. reply[2]
end
redis.call('SET', KEYS[2], rec, 'PX', ARGV[3])
return reply
