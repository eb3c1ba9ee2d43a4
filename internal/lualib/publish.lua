-- publish.lua: the one way dlock's scripts PUBLISH.

-- pcall_publish publishes msg on channel ch by redis.pcall, and ignores
-- a refusal: a Redis user whose ACL does not grant the channel (Redis 7's
-- acl-pubsub-default resetchannels, no &pattern) or PUBLISH itself loses
-- the wake-up only. Redis does not roll back a script whose command
-- fails, so a refused redis.call('PUBLISH') would end the script after
-- its writes, with an error reply that says nothing was done.
local function pcall_publish(ch, msg)
  redis.pcall('PUBLISH', ch, msg)
end
