-- release.lua: delete a legacy lock we own (compare-and-delete) and wake the
-- dlock waiters. This is the old recipe's "check before DEL, or you delete someone
-- else's lock", made atomic: instead of comparing clocks, compare the value.
-- Uses owner_check (dlock's internal/lualib/owner.lua, prepended).
--
-- KEYS[1]  the lock key
-- ARGV[1]  the timestamp we wrote last (acquire or latest renewal)
-- ARGV[2]  the wake-up channel of the key ('' publishes nothing)
--
-- Returns  1  released (and "released" published on ARGV[2])
--          0  the key is gone
--         -1  the key holds another value: left untouched
--         -2  the key exists but is not a string: left untouched
local code = owner_check(KEYS[1], ARGV[1])
if code ~= 1 then
  return code
end
redis.call('DEL', KEYS[1])
if ARGV[2] ~= '' then
  redis.call('PUBLISH', ARGV[2], 'released')
end
return 1
