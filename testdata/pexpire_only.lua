-- pexpire_only.lua: the floor of a per-lock renewal, for
-- BenchmarkRenewalFloor only (never run by the library): PEXPIRE every key,
-- with no ownership check and no token sent, the least Redis can do to
-- renew one key from a script.
--
-- KEYS     the keys to renew
-- ARGV[1]  the new TTL in milliseconds
--
-- Returns  the number of keys
local ms, call = ARGV[1], redis.call
for i = 1, #KEYS do
  call('PEXPIRE', KEYS[i], ms)
end
return #KEYS
