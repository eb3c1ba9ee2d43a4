package legacy

import (
	"context"
	_ "embed"
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/legacyrelease"
	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/protocol"
	"github.com/redis/go-redis/v9"
)

// Unit is the unit of the timestamps stored in the lock key. Every client
// of one key must use the same unit (see the package doc).
type Unit int

const (
	// Seconds: Unix time in seconds, as older Python clients' int(time.time()).
	Seconds Unit = iota
	// Milliseconds: Unix time in milliseconds, as older C# clients'
	// DateTimeOffset.Now.ToUnixTimeMilliseconds().
	Milliseconds
)

// String returns "s" or "ms".
func (u Unit) String() string {
	switch u {
	case Seconds:
		return "s"
	case Milliseconds:
		return "ms"
	}
	return "Unit(" + strconv.Itoa(int(u)) + ")"
}

// duration is the length of one unit; 0 for an unknown unit.
func (u Unit) duration() time.Duration {
	switch u {
	case Seconds:
		return time.Second
	case Milliseconds:
		return time.Millisecond
	}
	return 0
}

// Options configures a Protocol. The zero value is valid.
type Options struct {
	// Unit of the stored timestamps. Default: Seconds.
	Unit Unit
	// Clock returns the current time. It decides the timestamps written and
	// whether a stored one has expired. Default (nil): time.Now. Tests use
	// it to simulate clock skew between clients.
	Clock func() time.Time
}

// Protocol is the SETNX/GETSET timestamp lock of older C# and Python code as a protocol.Protocol.
// Use it with dlock.WithProtocol. It holds no state besides its options and
// is safe for concurrent use; the zero value is New(Options{}).
type Protocol struct {
	unit  Unit
	clock func() time.Time
}

var _ protocol.Protocol = (*Protocol)(nil)

// New returns the protocol with opts.
func New(opts Options) *Protocol {
	return &Protocol{unit: opts.Unit, clock: opts.Clock}
}

// ErrNotTimestamp is returned (wrapped, with the key and a shortened value)
// by an acquire that finds the lock key holding a string that is not a
// decimal Unix timestamp: not a lock of this protocol, perhaps another
// protocol's token on the same key. It also matches dlock.ErrWrongType, so
// a Lock call returns it at once instead of waiting. The key is left as it
// is (see the package doc).
var ErrNotTimestamp error = notTimestamp{}

type notTimestamp struct{}

func (notTimestamp) Error() string {
	return "dlock/legacy: the lock key holds a value that is not a decimal Unix timestamp (not a lock of this protocol)"
}

// Is makes ErrNotTimestamp match dlock.ErrWrongType.
func (notTimestamp) Is(target error) bool { return target == dlock.ErrWrongType }

var (
	//go:embed scripts/renew.lua
	renewSrc string
	//go:embed scripts/takeover.lua
	takeoverSrc string

	renewScript    = lualib.Script(renewSrc)
	takeoverScript = lualib.Script(takeoverSrc)
)

func (p *Protocol) now() time.Time {
	if p.clock != nil {
		return p.clock()
	}
	return time.Now()
}

// stamp is t as a Unix timestamp in the protocol's unit, truncated like older
// clients' int(time.time()) and ToUnixTimeMilliseconds().
func (p *Protocol) stamp(t time.Time) int64 {
	if p.unit == Milliseconds {
		return t.UnixMilli()
	}
	return t.Unix()
}

// timeout is ttl in the protocol's unit, rounded up, at least 1.
func (p *Protocol) timeout(ttl time.Duration) int64 {
	u := p.unit.duration()
	if u == 0 {
		u = time.Second
	}
	n := int64(ttl / u)
	if ttl%u != 0 {
		n++
	}
	return max(n, 1)
}

// expiry is the legacy lock value for a lock taken at now for ttl:
// now + timeout + 1, in the protocol's unit.
func (p *Protocol) expiry(now time.Time, ttl time.Duration) int64 {
	return addSat(addSat(p.stamp(now), p.timeout(ttl)), 1)
}

// addSat is a+b, saturating at the int64 bounds (b >= 0).
func addSat(a, b int64) int64 {
	if a > math.MaxInt64-b {
		return math.MaxInt64
	}
	return a + b
}

// parseStamp reads a stored timestamp the way the older clients do
// (Python int(), C# long parsing): optional surrounding white space, an
// optional sign, decimal digits. A number beyond int64 saturates (Python
// would read it as a huge number: held "forever", or expired long ago).
func parseStamp(s string) (int64, bool) {
	n, err := strconv.ParseInt(strings.TrimSpace(s), 10, 64)
	if err != nil {
		var ne *strconv.NumError
		if errors.As(err, &ne) && ne.Err == strconv.ErrRange {
			return n, true // ParseInt returns the bound it hit
		}
		return 0, false
	}
	return n, true
}

// remaining is how long a lock whose key holds stored (not expired at now)
// has left: clients with this clock take it over once their timestamp
// exceeds stored, that is at the start of unit stored+1. It saturates at
// the largest Duration for values far in the future.
func (p *Protocol) remaining(stored int64, now time.Time) time.Duration {
	u := int64(p.unit.duration())
	if u == 0 {
		u = int64(time.Second)
	}
	switch {
	case stored >= math.MaxInt64/u-1:
		return math.MaxInt64
	case stored <= math.MinInt64/u:
		return 0
	}
	d := time.Unix(0, (stored+1)*u).Sub(now)
	return max(d, 0)
}

// Acquire makes one attempt:
//
//	SETNX key v                     1: won
//	GET key                         not expired: held (HolderTTL from it)
//	takeover.lua                    still the expired value (or nil): won
//
// where v is now+timeout+1. takeover.lua sets v only if the key still
// holds the expired value the GET read: it replaces the older clients'
// GETSET, which overwrites whatever it finds. If the key vanished between
// SETNX and GET, it sends SETNX once more. A value that is not a timestamp
// gives ErrNotTimestamp, a key that is not a string dlock.ErrWrongType.
// The token is not used. After an error that leaves unknown whether a
// command ran, nothing is undone (the Grant names no value): v is shared
// by every client locking in the same unit with the same timeout, so no
// action on "the key holds v" is safe.
func (p *Protocol) Acquire(ctx context.Context, rdb redis.UniversalClient, k protocol.Keys, _ string, ttl time.Duration) (protocol.Grant, error) {
	if p.unit.duration() == 0 {
		return protocol.Grant{}, fmt.Errorf("%w: dlock/legacy: unknown Unit %d", dlock.ErrInvalidOpts, int(p.unit))
	}
	now := p.now()
	nowStamp := p.stamp(now)
	v := strconv.FormatInt(p.expiry(now, ttl), 10)
	won := protocol.Grant{Acquired: true, Value: v}

	ok, err := setNX(ctx, rdb, k.Lock, v)
	if err != nil {
		// A lost reply may hide a write, but v is not ours alone: every
		// client locking in this unit with this timeout writes the same
		// v. The key holding v may be another's live lock, so nothing is
		// undone (no Grant.Value); ours, if written, expires at v.
		return protocol.Grant{}, err
	}
	if ok {
		return won, nil
	}

	cur, err := rdb.Get(ctx, k.Lock).Result()
	switch {
	case errors.Is(err, redis.Nil):
		// Released between our SETNX and GET. Python's int(None) would
		// crash here, C# would read 0 and GETSET; a second SETNX is the
		// one that cannot overwrite anybody.
		ok, err := setNX(ctx, rdb, k.Lock, v)
		switch {
		case err != nil:
			return protocol.Grant{}, err // as above: v is not unique
		case ok:
			return won, nil
		}
		return protocol.Grant{HolderTTL: 0}, nil // someone else got in: retry soon
	case isWrongType(err):
		return protocol.Grant{}, dlock.ErrWrongType
	case err != nil:
		return protocol.Grant{}, err
	}
	stored, ok := parseStamp(cur)
	if !ok {
		return protocol.Grant{}, notTimestampError(k.Lock, cur)
	}
	if !(nowStamp > stored) { // the legacy expiry test: now > stored
		return protocol.Grant{HolderTTL: p.remaining(stored, now)}, nil
	}

	// Expired: take it over if it still holds what we read (takeover.lua).
	return p.takeover(ctx, rdb, k, cur, v, now)
}

// setNX sends the legacy SETNX (go-redis's SetNX sends SET NX instead).
func setNX(ctx context.Context, rdb redis.UniversalClient, key, v string) (bool, error) {
	n, err := rdb.Do(ctx, "SETNX", key, v).Int64()
	return n == 1, err
}

func isWrongType(err error) bool {
	var re redis.Error
	return errors.As(err, &re) && strings.HasPrefix(re.Error(), "WRONGTYPE")
}

func notTimestampError(key, value string) error {
	return fmt.Errorf("%w: key %q holds %s", ErrNotTimestamp, key, describe(value))
}

// describe shows a foreign value without disclosing it in full: it may be
// another protocol's token, which would let the reader release that lock.
func describe(v string) string {
	if len(v) <= 6 {
		return strconv.Quote(v)
	}
	return fmt.Sprintf("%q… (%d bytes)", v[:6], len(v))
}

// Renew returns the compare-and-set that moves the key from value to a new
// expiry, now+timeout+1 (never lower than value, so a clock stepping back
// cannot shorten the claim), and that new value.
func (p *Protocol) Renew(k protocol.Keys, value string, ttl time.Duration) (protocol.Call, string) {
	next := p.expiry(p.now(), ttl)
	if cur, ok := parseStamp(value); ok && cur > next {
		next = cur
	}
	nv := strconv.FormatInt(next, 10)
	return protocol.Call{Script: renewScript, Keys: []string{k.Lock}, Args: []any{value, nv}}, nv
}

// Release returns the compare-and-delete of the key if it holds value,
// which publishes on k.Wake. The call carries a random id of its own and
// runs at most once (release.lua): value may be another client's too, so a
// repeat of a release that ran must not delete whoever holds value since.
func (p *Protocol) Release(k protocol.Keys, value string) protocol.Call {
	return p.releaseCall(k, value)
}

func (p *Protocol) releaseCall(k protocol.Keys, value string) protocol.Call {
	return legacyrelease.Call(k, value, p.left(value))
}

// tombTTL is how long the tombstone of a takeover to value lives: until
// value has passed, and legacyrelease.TombMin more for clocks that differ.
func (p *Protocol) tombTTL(value string) time.Duration {
	return min(p.left(value), legacyrelease.TombMax) + legacyrelease.TombMin
}

// left is how long until value has passed by this protocol's clock (0 if
// value is not a timestamp).
func (p *Protocol) left(value string) time.Duration {
	if stored, ok := parseStamp(value); ok {
		return p.remaining(stored, p.now())
	}
	return 0
}
