-- guard.lua: a fenced write. Apply a write to a resource only if the
-- caller's fencing token is newer than the last one the resource accepted;
-- record the new fence in the same step. This is the check a protected
-- resource must make itself: it is what stops a holder that paused past
-- its lease (or whose write was delayed) from overwriting a newer holder.
--
-- KEYS[1]  the resource: a string key, written with SET or removed with DEL
-- KEYS[2]  the guard record: a hash {fence = <decimal>, owner = <sha1 hex of
--          the owner>, seq = <decimal>} in KEYS[1]'s Cluster slot; seq is
--          the sequence of the last write applied (absent in a record
--          written before sequences were kept). It never expires: deleting
--          it forgets every fence the resource has seen.
-- ARGV[1]  the caller's fence: a decimal integer > 0 without leading zeros.
--          Fences are compared as decimal strings (length, then digit by
--          digit), so any uint64 compares exactly and no locale applies.
-- ARGV[2]  the caller's owner identity (unique per grant, e.g. the lock
--          token); only its SHA1 is stored
-- ARGV[3]  'set': SET KEYS[1] ARGV[4]; 'del': DEL KEYS[1]
-- ARGV[4]  the value ('set')
-- ARGV[5]  the write's sequence: a decimal integer > 0 without leading
--          zeros, larger for each later write of one owner (compared as
--          the fences are). A command sent again carries the same one.
--
-- Accepted: a fence newer than the recorded one; or equal to it from the
-- owner that recorded it, with a sequence not older than the recorded one
-- (a later write of the same grant, or the same write sent again: it is
-- applied again, writing what it wrote before), or with none recorded.
-- Rejected: an older fence, or an equal fence from another owner (two
-- grants carrying the same fence: the fence counter went back).
-- Superseded: an equal fence from the same owner with an older sequence:
-- a write of the grant that arrives after a later one was applied.
--
-- Returns {1, last}  applied; last = the fence recorded before ('' if none)
--         {0, last}  rejected, nothing written; last = the recorded fence
--         {-1, last} superseded, nothing written; last = the recorded fence
--         {-2, ''}   KEYS[2] exists but is not a hash: not a guard record
local fence, owner, seq = ARGV[1], redis.sha1hex(ARGV[2]), ARGV[5]

local rec = redis.pcall('HMGET', KEYS[2], 'fence', 'owner', 'seq')
if type(rec) == 'table' and rec.err then
  return {-2, ''}
end
local last, lastOwner, lastSeq = rec[1], rec[2], rec[3]

-- newer reports a > b for decimal strings without leading zeros.
local function newer(a, b)
  if #a ~= #b then
    return #a > #b
  end
  for i = 1, #a do
    local x, y = a:byte(i), b:byte(i)
    if x ~= y then
      return x > y
    end
  end
  return false
end

if last then
  if not (newer(fence, last) or (fence == last and owner == lastOwner)) then
    return {0, last}
  end
  if fence == last and lastSeq and newer(lastSeq, seq) then
    return {-1, last}
  end
else
  last = ''
end

if ARGV[3] == 'del' then
  redis.call('DEL', KEYS[1])
else
  redis.call('SET', KEYS[1], ARGV[4])
end
redis.call('HSET', KEYS[2], 'fence', fence, 'owner', owner, 'seq', seq)
return {1, last}
