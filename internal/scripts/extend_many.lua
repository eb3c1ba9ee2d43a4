-- extend_many.lua: the watchdog's bulk renewal: extend.lua for many
-- single-key locks renewed for one TTL, in one call, each lease judged
-- and extended on its own. Its arguments and reply are lean: Redis turns
-- every argument into a string for the script, and the client reads every
-- reply element, so each lease sends its key and token only, and only the
-- leases not extended get a reply element.
--
-- KEYS     KEYS[i] lease i's lock key (i = 1..n); when ARGV[2] is not '0',
--          KEYS[n+i] is lease i's fence counter. On a Cluster every key of
--          one call is in one slot (the engine groups leases by slot; on a
--          Ring, by shard).
-- ARGV[1]  the TTL in milliseconds, of every lease of the call: each key
--          extended expires ARGV[1] ms from now at the earliest (GT: an
--          expiry is never moved earlier, see ext_apply)
-- ARGV[2]  the fence counters' TTL in milliseconds, or '0': leave them (the
--          engine pushes a counter out every few seconds, not at every
--          renewal: see lualib/owner.lua)
-- ARGV[2+i] lease i's token; n = #ARGV - 2
--
-- Returns  {n, i, code, j, code, ...}: n, the number of leases judged, then
--          a pair for each lease not extended, with extend.lua's reply:
--           0  the key is gone: that lease is lost
--          -1  the key holds another owner's token: that lease is lost
--          -2  the key exists but is not a string
--          A lease not named was extended (its key held its token: 1).
-- One lease's reply never depends on another's. Running the same call
-- again (the Redis client re-sends it after a lost reply) only extends
-- again from that moment: the holder counts its validity from the first
-- send, so it never counts on more than it has. A call that lands late,
-- after a longer renewal of the same lease (an Extend), leaves that
-- expiry alone (GT).
-- One MGET reads every key (one command instead of one GET each: a
-- command run from a script costs more than the rest of a lease's work);
-- a key that does not hold its token is then judged on its own by
-- owner_check (MGET reads a key of another type as missing). Each lease
-- extended is ext_apply (lualib/owner.lua) inlined: this loop is the
-- watchdog's hottest. Uses lualib/owner.lua (prepended).
local n = #ARGV - 2
local ms, fms = ARGV[1], ARGV[2]
local call = redis.call
local out = {n}
local vs = redis.pcall('MGET', unpack(KEYS, 1, n))
if type(vs) ~= 'table' or vs.err then
  vs = {}
end
for i = 1, n do
  local k, token = KEYS[i], ARGV[2 + i]
  local code = 1
  if vs[i] ~= token then
    code = owner_check(k, token)
  end
  if code == 1 then
    call('PEXPIRE', k, ms, 'GT')
    if fms ~= '0' then
      call('PEXPIRE', KEYS[n + i], fms, 'GT')
    end
  else
    out[#out + 1] = i
    out[#out + 1] = code
  end
end
return out
