-- owner.lua: the owner check every compare-and-expire and
-- compare-and-delete makes before it writes (used by the extend and
-- release scripts of dlock, dlock/legacy and dlock/redlock), and the
-- expire step of a token lock's renewal.

-- owner_of compares v, a lock key's GET (pcall) reply, with token, the
-- caller's value, and returns the reply every extend and release script
-- shares: 1 the key holds token, 0 it is gone, -1 it holds another
-- owner's value, -2 it is not a string (another program's key under our
-- name: write nothing).
local function owner_of(v, token)
  if is_err(v) then
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

-- owner_check reads lock key k and compares it with token (owner_of).
local function owner_check(k, token)
  return owner_of(redis.pcall('GET', k), token)
end

-- ext_apply pushes k's expiry out to ms from now and its fence counter f's
-- TTL out to fms ('0': leave it, the counter outlives the key by more than
-- the caller needs). GT on both: a renewal never moves an expiry earlier.
-- For k, a renewal that lands late (after a later, longer renewal of the
-- same lock confirmed its expiry to the holder) or runs twice cannot cut
-- the lock short; a renewal for a shorter TTL than k has left does
-- nothing. For f, holders with longer TTLs share the counter, and a key
-- without a TTL (not one of our counters) is left alone.
local function ext_apply(k, f, ms, fms)
  redis.call('PEXPIRE', k, ms, 'GT')
  if fms ~= '0' then
    redis.call('PEXPIRE', f, fms, 'GT')
  end
end
