// Package admin owns the operator's view of dlock's keys: inspecting what a
// lock key holds without taking it, listing the locks under a prefix,
// force-releasing a key or releasing one holder by its token, and naming
// and recognising the auxiliary keys dlock derives from a lock key: what an
// operator, or the dlock command, does by hand. Programs that take and
// release locks use package dlock; this package is for tools beside them.
//
// A Client of this package works on the keys of the dlock Clients that
// share its Redis and its Prefix. Its calls read and write the same keys
// and run the same scripts as theirs, so its releases are as safe against
// late delivery as a holder's own (see ForceRelease).
package admin

import (
	"fmt"
	"reflect"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/defaults"
	"github.com/dlock-go/dlock/internal/keyrules"
	"github.com/dlock-go/dlock/internal/keyspace"
	"github.com/dlock-go/dlock/internal/rexec"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Options configures a Client. The zero value is valid: every field's
// default is stated next to it. Set each as the dlock Clients whose locks
// it handles set theirs (dlock.Client.Options returns their values).
type Options struct {
	// Prefix is the dlock Clients' Options.Prefix: the start of every
	// auxiliary key's name. Default: "dlock".
	Prefix string

	// PickupTimeout is the dlock Clients' Options.PickupTimeout: how long
	// a lock a release hands to a queued waiter waits for that waiter to
	// confirm it. Default: 1s.
	PickupTimeout time.Duration
}

// Client inspects, lists and releases the locks under one prefix. It is
// safe for concurrent use, holds no connection of its own and needs no
// Close.
type Client struct {
	rdb    redis.UniversalClient
	exec   *rexec.Exec
	prefix string
	pickup time.Duration
}

// New returns a Client over rdb (a *redis.Client, also from
// redis.NewFailoverClient for Sentinel, *redis.ClusterClient or
// *redis.Ring) for the locks under opts.Prefix. It makes no Redis call.
// A nil rdb is dlock.ErrNilClient, a Prefix that dlock.New refuses or a
// negative PickupTimeout dlock.ErrInvalidOpts.
func New(rdb redis.UniversalClient, opts Options) (*Client, error) {
	if rdb == nil || reflect.ValueOf(rdb).Kind() == reflect.Pointer && reflect.ValueOf(rdb).IsNil() {
		return nil, dlock.ErrNilClient
	}
	if err := keyrules.ValidPrefix(opts.Prefix); err != nil {
		return nil, err
	}
	if opts.PickupTimeout < 0 {
		return nil, fmt.Errorf("%w: PickupTimeout %v is negative", dlock.ErrInvalidOpts, opts.PickupTimeout)
	}
	c := &Client{rdb: rdb, exec: rexec.New(rdb), prefix: opts.Prefix, pickup: opts.PickupTimeout}
	if c.prefix == "" {
		c.prefix = defaults.Prefix
	}
	if c.pickup == 0 {
		c.pickup = defaults.PickupTimeout
	}
	return c, nil
}

// Options returns the Client's options with defaults filled in.
func (c *Client) Options() Options { return Options{Prefix: c.prefix, PickupTimeout: c.pickup} }

// KeysFor returns the names of every Redis key and channel a lock on key
// uses under the Client's prefix (docs/keys.md lists them), for tools and
// for protocols that span several servers. It makes no Redis call.
func (c *Client) KeysFor(key string) protocol.Keys { return keyspace.Keys(c.prefix, key) }

// AuxKeyOf reports whether name is one of the auxiliary keys or channels
// dlock derives from a lock key under the Client's prefix (its fence,
// queue, waiters' leases, tombstones, a Counter operation's or legacy
// release's record, wake-up channel, hold sets, semaphore state,
// Counter count and segment count, an election's leader records and
// channel, or the guard record of a resource written with package
// fenced), and if so, of which lock key and of what kind. Lock keys that
// are such names are refused (dlock.ErrReservedKey). It makes no Redis
// call.
func (c *Client) AuxKeyOf(name string) (key string, kind AuxKind, ok bool) {
	key, k, ok := keyspace.Owner(c.prefix, name)
	return key, AuxKind(k), ok
}

// validKey checks a lock key as package dlock does: dlock.ErrEmptyKey,
// dlock.ErrKeyTooLong, or dlock.ErrReservedKey for one of the auxiliary
// names under the Client's prefix.
func (c *Client) validKey(key string) error { return keyrules.ValidLockKey(c.prefix, key) }

// unavailable wraps an error of the Redis driver as dlock's
// ErrUnavailable (or ErrNoPermission, ErrNoReply), as package dlock does.
func unavailable(err error) error { return keyrules.Unavailable(err) }
