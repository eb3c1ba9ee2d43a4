-- release.lua: delete a legacy lock we own (compare-and-delete) and wake the
-- dlock waiters. This is the old recipe's "check before DEL, or you delete someone
-- else's lock", made atomic: instead of comparing clocks, compare the value.
-- Uses owner_check and pcall_publish (dlock's internal/lualib, prepended): a
-- refused PUBLISH (ACL) loses the wake-up, never the DEL.
--
-- The value is not ours alone: every client locking in the same unit with
-- the same timeout writes the same timestamp. So a release runs at most
-- once: its first run leaves a tombstone under the release's own random
-- id, holding its reply, and a repeat (the Redis client re-sending it after
-- a broken connection, or Unlock retrying it) answers that reply and
-- writes nothing, even if another client has taken the key since with the
-- same timestamp.
--
-- KEYS[1]  the lock key
-- KEYS[2]  the release's tombstone: the key's wait-queue name, ':', the
--          release's id (a waiter-lease name no waiter uses)
-- ARGV[1]  the timestamp we wrote last (acquire or latest renewal)
-- ARGV[2]  the wake-up channel of the key ('' publishes nothing)
-- ARGV[3]  how long the tombstone lives, in ms: until ARGV[1] has passed
--
-- Returns  1  released (and "released" published on ARGV[2])
--          0  the key is gone
--         -1  the key holds another value: left untouched
--         -2  the key exists but is not a string: left untouched
--          a repeat returns the first run's reply
local done = redis.pcall('GET', KEYS[2])
if type(done) == 'string' and string.sub(done, 1, 1) == '~' then
  return tonumber(string.sub(done, 2))
end
local code = owner_check(KEYS[1], ARGV[1])
redis.call('SET', KEYS[2], '~' .. code, 'PX', ARGV[3])
if code ~= 1 then
  return code
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
  pcall_publish(ARGV[2], 'released')
end
return 1
