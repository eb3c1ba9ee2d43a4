-- release.lua: release a lock we own and hand it to the first live waiter;
-- or take a waiter out of the queue (it gave up), passing on a hand-off
-- that reached it too late; or (an operator's steal) release whoever holds it.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the wait queue (see acquire.lua; lease keys KEYS[2]..':'..token)
-- ARGV[1]  the caller's token
-- ARGV[2]  the key's wake-up channel: 'released' is published on it when
--          the key is freed with nobody queued (barging waiters listen)
-- ARGV[3]  the pickup time in ms: a hand-off not confirmed by then lapses
-- ARGV[4]  '0': the caller holds the lock; '1': the caller is a waiter
--          leaving the queue; 'force': release whatever token the key holds
--
-- The hand-off: the key is set to the next live waiter's token with a PX of
-- ARGV[3], and that token is published on the waiter's own channel (read
-- from its lease key). Waiters whose lease expired are skipped.
--
-- Returns  1  released (freed, or handed off)
--          0  the key is gone, or (leaving) was not ours: nothing released
--         -1  the key holds another owner's token: left untouched
--         -2  the key exists but is not a string: left untouched
local token = ARGV[1]
local v = redis.pcall('GET', KEYS[1])
if type(v) == 'table' and v.err then
  return -2
end
if ARGV[4] == '1' then
  redis.call('LREM', KEYS[2], 0, token)
  redis.call('DEL', KEYS[2] .. ':' .. token)
  if v ~= token then
    return 0
  end
elseif not v then
  return 0
elseif v ~= token and ARGV[4] ~= 'force' then
  return -1
end
while true do
  local nxt = redis.call('LPOP', KEYS[2])
  if not nxt then
    break
  end
  local ch = redis.call('GET', KEYS[2] .. ':' .. nxt)
  if ch then
    redis.call('SET', KEYS[1], nxt, 'PX', ARGV[3])
    redis.call('PUBLISH', ch, nxt)
    return 1
  end
end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1
