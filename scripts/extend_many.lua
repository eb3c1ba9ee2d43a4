-- extend_many.lua: the watchdog's bulk renewal: extend.lua for many
-- single-key locks in one call, each lease judged and extended on its own.
--
-- KEYS     pairs: KEYS[2i-1] lease i's lock key, KEYS[2i] its fence counter.
--          On a Cluster every key of one call is in one slot (the engine
--          groups leases by slot; on a Ring, by shard).
-- ARGV     triples: ARGV[3i-2] lease i's token, ARGV[3i-1] its new TTL in
--          milliseconds, ARGV[3i] its fence counter's TTL in milliseconds,
--          or 0 to leave the counter's TTL alone (the engine pushes it out
--          every few seconds, not at every renewal: see lualib/owner.lua)
--
-- Returns  an array: element i is lease i's reply, as extend.lua's:
--           1  extended (the key held the lease's token)
--           0  the key is gone: that lease is lost
--          -1  the key holds another owner's token: that lease is lost
--          -2  the key exists but is not a string
-- One lease's reply never depends on another's. Running the same call
-- again (the Redis client re-sends it after a lost reply) only extends
-- again from that moment: the holder counts its validity from the first
-- send, so it never counts on more than it has.
local out = {}
for i = 1, #KEYS / 2 do
  local k = KEYS[2 * i - 1]
  local code = owner_check(k, ARGV[3 * i - 2])
  if code == 1 then
    ext_apply(k, KEYS[2 * i], ARGV[3 * i - 1], ARGV[3 * i])
  end
  out[i] = code
end
return out
