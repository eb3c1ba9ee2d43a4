-- lib/extend.lua: the compare-and-expire step every renewal of a token
-- lock shares (prepended to extend.lua and extend_many.lua).

-- ext_check returns what extending lock key k for token would reply:
-- 1 it holds token, 0 gone, -1 another owner's token, -2 not a string.
local function ext_check(k, token)
  local v = redis.pcall('GET', k)
  if type(v) == 'table' and v.err then
    return -2
  end
  if not v then
    return 0
  end
  if v ~= token then
    return -1
  end
  return 1
end

-- ext_apply sets k's TTL to ms and pushes its fence counter f's TTL out to
-- fms ('0': leave it, the counter outlives the key by more than the
-- caller needs). GT: the counter's TTL is never shortened (holders with
-- longer TTLs share it), and a key without a TTL (not one of our
-- counters) is left alone.
local function ext_apply(k, f, ms, fms)
  redis.call('PEXPIRE', k, ms)
  if fms ~= '0' then
    redis.call('PEXPIRE', f, fms, 'GT')
  end
end
