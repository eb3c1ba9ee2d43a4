-- limit.lua: the atomic mode of the rate limit: count a request if its IP
-- is below the limit in the current fixed window.
--
-- KEYS[1]  the IP's request count in this window
-- ARGV[1]  the limit: requests allowed per window
-- ARGV[2]  the window in seconds (the count's TTL)
-- Returns  1 if the request is allowed (and counted), 0 if over the limit
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n >= tonumber(ARGV[1]) then return 0 end
redis.call('SET', KEYS[1], n + 1, 'EX', ARGV[2])
return 1
