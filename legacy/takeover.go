package legacy

import (
	"context"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/legacyrelease"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// takeover replaces cur, the expired value the attempt's GET read, by v:
// takeover.lua, a compare-and-set that runs at most once (see the package
// doc). Another value found in the key means another contender took it
// over first: not acquired, and nothing written.
func (p *Protocol) takeover(ctx context.Context, rdb redis.UniversalClient, k protocol.Keys, cur, v string, now time.Time) (protocol.Grant, error) {
	reply, err := p.takeoverCall(k, cur, v).Run(ctx, rdb).Slice()
	if err != nil {
		// If it ran, the key holds v while nobody trusts it, and v may be
		// another's too: nothing is undone, v expires like a crashed
		// holder's.
		return protocol.Grant{}, err
	}
	code, _ := reply[0].(int64)
	switch code {
	case 1:
		return protocol.Grant{Acquired: true, Value: v}, nil
	case -2:
		return protocol.Grant{}, dlock.ErrWrongType
	}
	found, _ := reply[1].(string)
	stored, ok := parseStamp(found)
	if !ok {
		return protocol.Grant{}, notTimestampError(k.Lock, found)
	}
	return protocol.Grant{HolderTTL: p.remaining(stored, now)}, nil
}

// takeoverCall is the takeover of k from cur to v, under a random id of its
// own: sent again, it answers its first run's reply and writes nothing.
func (p *Protocol) takeoverCall(k protocol.Keys, cur, v string) protocol.Call {
	return protocol.Call{Script: takeoverScript, Keys: []string{k.Lock, k.Queue + ":" + legacyrelease.ID()},
		Args: []any{cur, v, p.tombTTL(v).Milliseconds()}}
}
