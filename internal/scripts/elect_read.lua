-- elect_read.lua: read an election's leader history and whether its head
-- record's leader still holds the lock, in one step.
--
-- KEYS[1]  the election's lock key
-- KEYS[2]  the leader history (see elect_publish.lua for the record format)
-- ARGV[1]  how many records to return, newest first (at least 1)
--
-- Returns {1, now, live, r1, r2, ...}: now = the server's clock in ms;
--         live = 1 if KEYS[1] holds the token of r1's holder (r1 is the
--         leader now), 2 if KEYS[1] holds another token (a candidate that
--         has not published its record yet), 0 if KEYS[1] is not set
--         (nobody leads); r1... the newest records
--         {-2}  KEYS[1] or KEYS[2] is of another type
local cur = redis.pcall('GET', KEYS[1])
local recs = redis.pcall('LRANGE', KEYS[2], 0, tonumber(ARGV[1]) - 1)
if is_err(cur) or is_err(recs) then
  return {-2}
end
local t = redis.call('TIME')
local out = {1, tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000), 0}
if cur then
  out[3] = 2
  if recs[1] then
    local holder = string.match(recs[1], '^%d+:%d+:%d+:(%x+):')
    if holder == redis.sha1hex(cur) then
      out[3] = 1
    end
  end
end
for i = 1, #recs do
  out[#out + 1] = recs[i]
end
return out
