package dlock

import (
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// TestAcquireModeArgs: every mode names one of the modes acquire.lua
// documents, and no two modes name the same.
func TestAcquireModeArgs(t *testing.T) {
	seen := map[string]acquireMode{}
	acquire, _ := scripts.Of(scripts.Acquire)
	for _, m := range []acquireMode{modeTry, modeJoin, modeQueued, modeBarge} {
		arg := m.String()
		if !strings.Contains(acquire.Src, "'"+arg+"'") {
			t.Errorf("mode %d: acquire.lua does not know %q", m, arg)
		}
		if prev, ok := seen[arg]; ok {
			t.Errorf("modes %d and %d both send %q", prev, m, arg)
		}
		seen[arg] = m
		if want := arg == "q1" || arg == "q"; m.queued() != want {
			t.Errorf("%q: queued() = %v, want %v", arg, m.queued(), want)
		}
	}
}

// TestWithMode: withMode sets the queue settings of a copy of every queued
// protocol and leaves the original as it was; a multi-slot lock's slots
// run with its settings.
func TestWithMode(t *testing.T) {
	m := queueMode{mode: modeQueued, channel: "ch", lease: time.Second, pickup: 2 * time.Second}
	ks := protocol.Keys{Lock: "k", Fence: "f", Wake: "w", Queue: "q"}
	group := multiLock{keys: []string{"k"}, ks: []protocol.Keys{ks}}
	for _, p := range []queued{
		tokenLock{},
		sharedLock{holdSet{group: SharedValue, suffix: readersSuffix}},
		reentrantLock{holdSet{group: "o", suffix: holdsSuffix}},
		semaphore{limit: 3, permits: 1},
		group,
		multiSlots{groups: []multiLock{group, group}},
	} {
		got := withMode(p, m)
		if got.(queued).queueSettings() != m {
			t.Errorf("%T: settings %+v, want %+v", p, got.(queued).queueSettings(), m)
		}
		if p.queueSettings() != (queueMode{}) {
			t.Errorf("%T: the original changed to %+v", p, p.queueSettings())
		}
		if s, ok := got.(multiSlots); ok {
			for i := range s.groups {
				if s.group(i).queueMode != m {
					t.Errorf("slot %d runs with %+v, want %+v", i, s.group(i).queueMode, m)
				}
			}
		}
	}
}

// TestTokenLockBoxedArgs: the EVALSHA command a token lock sends with its
// arguments boxed once is the command of its acquireCall and Release,
// also for a copy whose queue settings withMode replaced after boxing
// (which must not send the original's mode, channel, lease or pickup).
func TestTokenLockBoxedArgs(t *testing.T) {
	ks := protocol.Keys{Lock: "k", Fence: "f", Wake: "w", Queue: "q"}
	modes := []acquireMode{modeTry, modeJoin, modeQueued, modeBarge}
	commandOf := func(sha string, c protocol.Call) string {
		args := []any{"evalsha", sha, len(c.Keys)}
		for _, k := range c.Keys {
			args = append(args, k)
		}
		return fmt.Sprint(append(args, c.Args...))
	}
	for _, built := range modes {
		base := tokenLock{queueMode: queueMode{mode: built, channel: "ch", lease: time.Second, pickup: 2 * time.Second}}
		base.args = newTokenArgs(base.queueMode, 10*time.Second)
		for _, m := range modes {
			for _, q := range []queueMode{
				{mode: m, channel: "ch", lease: time.Second, pickup: 2 * time.Second},
				{mode: m, channel: "other", lease: 3 * time.Second, pickup: 4 * time.Second},
			} {
				p := withMode(base, q).(tokenLock)
				if p.boxed() == nil {
					if q == base.queueMode {
						t.Errorf("built for %v: the same settings do not use the boxed arguments", built)
					}
					continue
				}
				for _, ttl := range []time.Duration{10 * time.Second, 5 * time.Second} {
					got := fmt.Sprint(p.acquireRaw(ks, "tok", ttl).Args)
					if want := commandOf(scripts.Acquire.Hash(), p.acquireCall(ks, "tok", ttl)); got != want {
						t.Errorf("built for %v, sent as %+v, TTL %v: acquire sends %q, want %q", built, q, ttl, got, want)
					}
				}
			}
		}
	}
}
