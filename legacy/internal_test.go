package legacy

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/dlock-go/dlock/protocol"
)

func TestParseStamp(t *testing.T) {
	cases := []struct {
		in   string
		want int64
		ok   bool
	}{
		{"1712345678", 1712345678, true},
		{" 42\t", 42, true},
		{"+7", 7, true},
		{"-3", -3, true},
		{"99999999999999999999", math.MaxInt64, true},
		{"-99999999999999999999", math.MinInt64, true},
		{"", 0, false},
		{"abc", 0, false},
		{"1.5", 0, false},
		{"1e9", 0, false},
		{"0x10", 0, false},
		{"5_000", 0, false},
	}
	for _, c := range cases {
		got, ok := parseStamp(c.in)
		if got != c.want || ok != c.ok {
			t.Errorf("parseStamp(%q) = %d, %v; want %d, %v", c.in, got, ok, c.want, c.ok)
		}
	}
}

func TestTimeoutAndExpiry(t *testing.T) {
	now := time.Unix(1_700_000_000, 999_999_999)
	s := New(Options{})
	ms := New(Options{Unit: Milliseconds})
	cases := []struct {
		p    *Protocol
		ttl  time.Duration
		want int64
	}{
		{s, time.Nanosecond, 1},
		{s, time.Second, 1},
		{s, time.Second + 1, 2},
		{s, 10 * time.Second, 10},
		{ms, time.Nanosecond, 1},
		{ms, time.Millisecond, 1},
		{ms, 1001 * time.Microsecond, 2},
		{ms, math.MaxInt64, int64(math.MaxInt64/time.Millisecond) + 1},
	}
	for _, c := range cases {
		if got := c.p.timeout(c.ttl); got != c.want {
			t.Errorf("%v timeout(%v) = %d, want %d", c.p.unit, c.ttl, got, c.want)
		}
	}
	if got := s.expiry(now, 3*time.Second); got != 1_700_000_004 {
		t.Errorf("seconds expiry = %d", got)
	}
	if got := ms.expiry(now, 40*time.Millisecond); got != 1_700_000_000_999+41 {
		t.Errorf("milliseconds expiry = %d", got)
	}
	if got := addSat(math.MaxInt64-1, 5); got != math.MaxInt64 {
		t.Errorf("addSat = %d", got)
	}
}

func TestRemaining(t *testing.T) {
	now := time.Unix(1_700_000_000, 250_000_000)
	s := New(Options{})
	ms := New(Options{Unit: Milliseconds})
	// A seconds value v is taken over from v+1 on.
	if got := s.remaining(1_700_000_000, now); got != 750*time.Millisecond {
		t.Errorf("seconds: %v", got)
	}
	if got := s.remaining(1_700_000_010, now); got != 10750*time.Millisecond {
		t.Errorf("seconds: %v", got)
	}
	if got := ms.remaining(1_700_000_000_300, now); got != 51*time.Millisecond {
		t.Errorf("milliseconds: %v", got)
	}
	for _, p := range []*Protocol{s, ms} {
		for _, v := range []int64{math.MaxInt64, math.MaxInt64 - 1, math.MaxInt64 / 1000, 1 << 60} {
			if got := p.remaining(v, now); got != math.MaxInt64 && got < 200*365*24*time.Hour {
				t.Errorf("%v remaining(%d) = %v, want saturated", p.unit, v, got)
			}
		}
		if got := p.remaining(math.MinInt64, now); got != 0 {
			t.Errorf("%v remaining(MinInt64) = %v", p.unit, got)
		}
	}
}

func TestRenewNeverLowers(t *testing.T) {
	p := New(Options{Unit: Milliseconds, Clock: func() time.Time { return time.UnixMilli(1000) }})
	_, next := p.Renew(protocol.Keys{}, "5000", 100*time.Millisecond)
	if next != "5000" {
		t.Errorf("Renew after the clock stepped back: next = %s, want 5000", next)
	}
	_, next = p.Renew(protocol.Keys{}, "500", 100*time.Millisecond)
	if next != "1101" {
		t.Errorf("Renew: next = %s, want 1101", next)
	}
}

func TestDescribe(t *testing.T) {
	if got := describe("abc"); got != `"abc"` {
		t.Error(got)
	}
	if got := describe("Zm9vYmFyYmF6cXV4cXV1eA"); strings.Contains(got, "YmF6") || !strings.Contains(got, "22 bytes") {
		t.Error(got)
	}
	if Seconds.String() != "s" || Milliseconds.String() != "ms" || Unit(9).String() != "Unit(9)" {
		t.Error("Unit.String")
	}
}
