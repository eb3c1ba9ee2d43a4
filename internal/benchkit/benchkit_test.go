package benchkit_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/internal/benchkit"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
)

func TestParseCommandStats(t *testing.T) {
	info := "# Commandstats\r\n" +
		"cmdstat_get:calls=21,usec=175,usec_per_call=8.33,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_client|setinfo:calls=4,usec=3,usec_per_call=0.75,rejected_calls=0,failed_calls=0\r\n" +
		"cmdstat_EVALSHA:calls=7,usec=70,usec_per_call=10.00,rejected_calls=0,failed_calls=1\r\n" +
		"garbage line\r\n"
	got := benchkit.ParseCommandStats(info)
	want := map[string]int64{"get": 21, "client|setinfo": 4, "evalsha": 7}
	if len(got) != len(want) {
		t.Fatalf("got %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("%s: got %d, want %d", k, got[k], v)
		}
	}
	full := benchkit.ParseCommandStatsUsec(info)
	if g := full["evalsha"]; g != (benchkit.CommandStat{Calls: 7, Usec: 70}) || full["get"].Usec != 175 || len(full) != 3 {
		t.Errorf("with usec: %v", full)
	}
}

func TestPercentiles(t *testing.T) {
	var s []time.Duration
	for i := 100; i >= 1; i-- {
		s = append(s, time.Duration(i)*time.Millisecond)
	}
	p := benchkit.NewPercentiles(s)
	if p.N != 100 || p.P50 != 50*time.Millisecond || p.P99 != 99*time.Millisecond || p.Max != 100*time.Millisecond {
		t.Errorf("got %+v", p)
	}
	if (benchkit.NewPercentiles(nil) != benchkit.Percentiles{}) {
		t.Error("empty samples")
	}
	if q := benchkit.Quantile([]time.Duration{7}, 0.99); q != 7 {
		t.Errorf("one sample: %v", q)
	}
}

func server(t *testing.T) (*redistest.Server, *redis.Client) {
	s := redistest.Start(t, redistest.Config{})
	return s, s.Client(t)
}

// dlockClients builds benchmark clients over dlock, each with its own
// connections.
func dlockClients(s *redistest.Server, prefix string) func(int) (benchkit.Client, error) {
	return func(int) (benchkit.Client, error) {
		rdb := s.NewClient()
		c, err := dlock.New(rdb, dlock.Options{Prefix: prefix})
		if err != nil {
			return benchkit.Client{}, err
		}
		return benchkit.Client{
			Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
				lk, err := c.Lock(ctx, key)
				if err != nil {
					return nil, err
				}
				return lk.Unlock, nil
			},
			Close: func() error { _ = c.Close(); return rdb.Close() },
		}, nil
	}
}

func TestRunDlock(t *testing.T) {
	s, rdb := server(t)
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients:   4,
		NewClient: dlockClients(s, "bk"),
		Keys:      []string{"bk:a", "bk:b"},
		Hold:      200 * time.Microsecond,
		Duration:  500 * time.Millisecond,
		Redis:     rdb,
	})
	if err != nil {
		t.Fatal(err)
	}
	lo, _ := res.Fairness()
	switch {
	case res.Sections == 0, res.Overlaps != 0, res.AcquireErrors != 0, res.ReleaseErrors != 0:
		t.Fatalf("%+v", res)
	case res.Commands <= 0 || res.CommandsPerSection() < 2:
		t.Errorf("commands: %d (%v per section)", res.Commands, res.CommandsPerSection())
	case res.ByCommand["info"] != 0 || res.ByCommand["ping"] != 0:
		t.Errorf("INFO and PING counted: %v", res.ByCommand)
	case len(res.ServerTimeByCommand) != len(res.ByCommand) || res.ServerTimeByCommand["fcall"] <= 0:
		t.Errorf("server time by command %v, calls %v", res.ServerTimeByCommand, res.ByCommand)
	case res.Handoff.N == 0 || res.Acquire.N != int(res.Sections):
		t.Errorf("samples: hand-off %d, acquire %d, sections %d", res.Handoff.N, res.Acquire.N, res.Sections)
	case res.Ping.N == 0 || res.PingIdle.N != 50:
		t.Errorf("pings: %+v / %+v", res.Ping, res.PingIdle)
	case lo == 0:
		t.Errorf("a client never got the lock: %v", res.PerClient)
	}
	rep := res.Report()
	if rep.Sections != res.Sections || rep.Overlaps != 0 || rep.SectionsPerS <= 0 {
		t.Errorf("report: %+v", rep)
	}
}

// TestRunDetectsOverlap checks the checker: a "lock" that excludes nothing
// must show overlaps.
func TestRunDetectsOverlap(t *testing.T) {
	noLock := func(int) (benchkit.Client, error) {
		return benchkit.Client{Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
			return func(context.Context) error { return nil }, nil
		}}, nil
	}
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients: 4, NewClient: noLock, Keys: []string{"k"}, Hold: time.Millisecond, Duration: 200 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Overlaps == 0 {
		t.Fatalf("no overlaps detected without a lock: %+v", res)
	}
	if res.Commands != -1 || res.CommandsPerSection() != -1 {
		t.Errorf("commands without Redis: %d", res.Commands)
	}
}

func TestRunConfigErrors(t *testing.T) {
	ctx := context.Background()
	nc := func(int) (benchkit.Client, error) { return benchkit.Client{}, fmt.Errorf("boom") }
	for _, cfg := range []benchkit.Config{
		{Keys: []string{"k"}},
		{NewClient: nc},
		{NewClient: nc, Keys: []string{"k"}, Clients: -1},
		{NewClient: nc, Keys: []string{"k"}}, // NewClient fails
	} {
		if _, err := benchkit.Run(ctx, cfg); err == nil {
			t.Errorf("%+v: no error", cfg)
		}
	}
}

func TestDeleteMatching(t *testing.T) {
	_, rdb := server(t)
	ctx := context.Background()
	for i := range 2500 {
		rdb.Set(ctx, fmt.Sprintf("ns1:%d", i), 1, 0)
	}
	rdb.Set(ctx, "ns2:keep", 1, 0)
	n, err := benchkit.DeleteMatching(ctx, rdb, "ns1:*")
	if err != nil || n != 2500 {
		t.Fatalf("deleted %d, %v", n, err)
	}
	if rdb.DBSize(ctx).Val() != 1 {
		t.Errorf("left %d keys", rdb.DBSize(ctx).Val())
	}
}

// TestRunDrain checks drain rounds: every client gets the lock exactly once
// per round, every acquisition but a round's first is a hand-off, and
// round trips are counted.
func TestRunDrain(t *testing.T) {
	s, rdb := server(t)
	var trips benchkit.RoundTripCounter
	newClient := dlockClients(s, "drain")
	// Count round trips of a client of our own, as a library's would be.
	counted := s.NewClient()
	counted.AddHook(&trips)
	defer counted.Close()
	clients := 5
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients: clients,
		NewClient: func(i int) (benchkit.Client, error) {
			c, err := newClient(i)
			if err != nil {
				return c, err
			}
			acq := c.Acquire
			c.Acquire = func(ctx context.Context, key string) (func(context.Context) error, error) {
				counted.Ping(ctx) // one counted round trip per acquisition
				return acq(ctx, key)
			}
			return c, nil
		},
		Keys:       []string{"drain:k"},
		Hold:       time.Millisecond,
		Duration:   300 * time.Millisecond,
		Drain:      true,
		Redis:      rdb,
		RoundTrips: trips.Load,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds == 0 || res.Overlaps != 0 || res.Missed != 0 || res.AcquireErrors != 0 {
		t.Fatalf("%+v", res)
	}
	for i, n := range res.PerClient {
		if n != int64(res.Rounds) {
			t.Errorf("client %d: %d sections in %d rounds", i, n, res.Rounds)
		}
	}
	if want := res.Rounds * (clients - 1); res.Handoff.N != want {
		t.Errorf("hand-offs: %d, want %d", res.Handoff.N, want)
	}
	if res.RoundTrips != res.Sections || res.RoundTripsPerSection() != 1 {
		t.Errorf("round trips: %d for %d sections", res.RoundTrips, res.Sections)
	}
}

// TestRunDrainRoundTimeout: a client that never gets the lock is counted
// as missed when its round times out, and the run still ends.
func TestRunDrainRoundTimeout(t *testing.T) {
	stuck := func(i int) (benchkit.Client, error) {
		return benchkit.Client{Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
			if i == 1 && key == "k" { // not the warm-up's key
				<-ctx.Done()
				return nil, ctx.Err()
			}
			return func(context.Context) error { return nil }, nil
		}}, nil
	}
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients: 2, NewClient: stuck, Keys: []string{"k"}, Duration: 10 * time.Millisecond,
		Drain: true, RoundTimeout: 100 * time.Millisecond,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Rounds != 1 || res.Missed != 1 || res.Sections != 1 || res.FirstError == nil || res.RoundTrips != -1 {
		t.Fatalf("%+v", res)
	}
	if res.Elapsed < 100*time.Millisecond {
		t.Errorf("round ended after %v", res.Elapsed)
	}
}

// TestRunKeyPerClient: with a key per client, clients without any lock
// never overlap.
func TestRunKeyPerClient(t *testing.T) {
	noLock := func(int) (benchkit.Client, error) {
		return benchkit.Client{Acquire: func(ctx context.Context, key string) (func(context.Context) error, error) {
			return func(context.Context) error { return nil }, nil
		}}, nil
	}
	res, err := benchkit.Run(context.Background(), benchkit.Config{
		Clients: 4, NewClient: noLock, Keys: []string{"a", "b", "c", "d"}, Hold: time.Millisecond,
		Duration: 100 * time.Millisecond, KeyPerClient: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Overlaps != 0 || res.Sections == 0 {
		t.Fatalf("%+v", res)
	}
}

func TestRoundTripCounter(t *testing.T) {
	_, rdb := server(t)
	var c benchkit.RoundTripCounter
	rdb.AddHook(&c)
	ctx := context.Background()
	base := c.Load()
	rdb.Set(ctx, "rt", 1, 0)
	rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		p.Get(ctx, "rt")
		p.Get(ctx, "rt")
		return nil
	})
	c.Add(2)
	if got := c.Load() - base; got != 4 {
		t.Errorf("counted %d round trips, want 4", got)
	}
}

// TestServerCounters: CommandCalls counts what the server ran, and
// ServerCPU reads a CPU time that only grows.
func TestServerCounters(t *testing.T) {
	_, rdb := server(t)
	ctx := t.Context()
	cpu0, err := benchkit.ServerCPU(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	before, err := benchkit.CommandCalls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	for range 100 {
		rdb.Incr(ctx, "n")
	}
	after, err := benchkit.CommandCalls(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if got := after["incr"] - before["incr"]; got != 100 {
		t.Fatalf("incr calls counted %d, want 100", got)
	}
	cpu1, err := benchkit.ServerCPU(ctx, rdb)
	if err != nil {
		t.Fatal(err)
	}
	if cpu1 <= 0 || cpu1 < cpu0 {
		t.Fatalf("server CPU %v then %v", cpu0, cpu1)
	}
}

func TestFormatDuration(t *testing.T) {
	for _, c := range []struct {
		d    time.Duration
		want string
	}{
		{12345 * time.Millisecond, "12.3s"},
		{1234 * time.Millisecond, "1.23s"},
		{45600 * time.Microsecond, "46ms"},
		{1500 * time.Microsecond, "1.5ms"},
		{789 * time.Microsecond, "789µs"},
		{0, "0µs"},
	} {
		if got := benchkit.FormatDuration(c.d); got != c.want {
			t.Errorf("FormatDuration(%v) = %q, want %q", c.d, got, c.want)
		}
	}
}

func TestServerVersion(t *testing.T) {
	for _, c := range []struct{ info, want string }{
		{"# Server\r\nredis_version:7.0.15\r\nredis_mode:standalone\r\n", "Redis 7.0.15"},
		{"# Server\r\nredis_version:7.2.4\r\nserver_name:valkey\r\nvalkey_version:8.0.1\r\n", "Valkey 8.0.1"},
		{"# Server\r\n", ""},
	} {
		if got := benchkit.ServerVersion(c.info); got != c.want {
			t.Errorf("ServerVersion(%q) = %q, want %q", c.info, got, c.want)
		}
	}
}
