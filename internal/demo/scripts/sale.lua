-- sale.lua: the atomic mode of the flash sale: check the stock and take one
-- item in one step inside Redis.
--
-- KEYS[1]  the stock: a number of items left
-- Returns  1 if an item was sold, 0 if the stock was empty
local n = tonumber(redis.call('GET', KEYS[1]) or '0')
if n <= 0 then return 0 end
redis.call('SET', KEYS[1], n - 1)
return 1
