package benchkit

import (
	"context"
	"slices"
	"strings"
	"sync/atomic"

	"github.com/redis/go-redis/v9"
)

// RoundTripCounter counts client round trips. As a go-redis hook
// (redis.Client.AddHook) it counts one per command sent on its own (a
// script's EVALSHA and its EVAL fallback are two) and one per pipeline or
// transaction. The handshake of a new connection (HELLO, AUTH, SELECT,
// CLIENT SETINFO/SETNAME/MAINT_NOTIFICATIONS) is not counted: it is paid
// once per connection, not per lock operation. Neither are pub/sub
// messages a client receives.
// Clients of other libraries can count with Add. Share one counter among
// all clients of a run and pass its Load as Config.RoundTrips.
//
// The zero value is ready to use; it is safe for concurrent use.
type RoundTripCounter struct {
	n atomic.Int64
}

var _ redis.Hook = (*RoundTripCounter)(nil)

// Add counts n round trips.
func (c *RoundTripCounter) Add(n int64) { c.n.Add(n) }

// Load returns the round trips counted so far.
func (c *RoundTripCounter) Load() int64 { return c.n.Load() }

// DialHook implements redis.Hook; dialling is not counted.
func (c *RoundTripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

// ProcessHook implements redis.Hook: one round trip per command.
func (c *RoundTripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if !handshake(cmd) {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

// ProcessPipelineHook implements redis.Hook: one round trip per pipeline.
func (c *RoundTripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		// A handshake pipeline holds handshake commands only.
		if slices.ContainsFunc(cmds, func(cmd redis.Cmder) bool { return !handshake(cmd) }) {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}

// handshake reports whether cmd is one go-redis sends to set up a new
// connection.
func handshake(cmd redis.Cmder) bool {
	switch strings.ToLower(cmd.Name()) {
	case "hello", "auth", "select":
		return true
	case "client":
		args := cmd.Args()
		if len(args) < 2 {
			return false
		}
		sub, _ := args[1].(string)
		switch strings.ToLower(sub) {
		case "setinfo", "setname", "maint_notifications":
			return true
		}
	}
	return false
}
