package dlockotel_test

import (
	"context"
	"fmt"
	"os"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/dlock-go/dlock/internal/redistest"
	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/otel/attribute"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// srv is the redis-server the package's tests and Examples share: a real
// one, on a free loopback port, in its own temporary directory, without
// persistence, killed by PID at the end.
var srv *redistest.Server

// redisAddr is srv's address; the Examples connect to it.
var redisAddr string

func TestMain(m *testing.M) {
	os.Exit(redistest.RunShared(m, "dlockotel", func(s *redistest.Server) { srv, redisAddr = s, s.Addr() }))
}

// env is a Telemetry over an in-memory span recorder and a manual metric
// reader, and a Client that feeds it.
type env struct {
	tel    *dlockotel.Telemetry
	spans  *tracetest.SpanRecorder
	reader *sdkmetric.ManualReader
	tracer trace.Tracer // for the callers' own spans
	c      *dlock.Client
	rdb    *redis.Client
}

func newEnv(t *testing.T, copts dlock.Options, opts ...dlockotel.Option) *env {
	t.Helper()
	e := &env{spans: tracetest.NewSpanRecorder(), reader: sdkmetric.NewManualReader()}
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(e.spans))
	mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(e.reader))
	t.Cleanup(func() {
		_ = tp.Shutdown(context.Background())
		_ = mp.Shutdown(context.Background())
	})
	e.tracer = tp.Tracer("test")
	tel, err := dlockotel.New(append([]dlockotel.Option{
		dlockotel.WithTracerProvider(tp), dlockotel.WithMeterProvider(mp),
	}, opts...)...)
	if err != nil {
		t.Fatal(err)
	}
	e.tel = tel
	e.rdb = redis.NewClient(&redis.Options{Addr: srv.Addr()})
	c, err := dlock.New(e.rdb, copts)
	if err != nil {
		t.Fatal(err)
	}
	e.c = c
	c.AddHooks(tel.Hooks()) // after copts.Hooks, if any
	tel.Track(c)
	t.Cleanup(func() {
		_ = c.Close()
		_ = e.rdb.Close()
	})
	return e
}

// ended returns the ended spans named name, in the order they ended.
func (e *env) ended(name string) []sdktrace.ReadOnlySpan {
	var out []sdktrace.ReadOnlySpan
	for _, s := range e.spans.Ended() {
		if s.Name() == name {
			out = append(out, s)
		}
	}
	return out
}

// one returns the only ended span named name.
func (e *env) one(t *testing.T, name string) sdktrace.ReadOnlySpan {
	t.Helper()
	s := e.ended(name)
	if len(s) != 1 {
		t.Fatalf("%d ended %s spans, want 1", len(s), name)
	}
	return s[0]
}

// lostSpan waits for the one ended dlock.lost span: the Lost hook that
// ends it runs just after the lock's Done closes.
func (e *env) lostSpan(t *testing.T) sdktrace.ReadOnlySpan {
	t.Helper()
	for end := time.Now().Add(5 * time.Second); len(e.ended("dlock.lost")) == 0 && time.Now().Before(end); {
		time.Sleep(5 * time.Millisecond)
	}
	return e.one(t, "dlock.lost")
}

// attrs returns a span's attributes by key.
func attrs(s sdktrace.ReadOnlySpan) map[attribute.Key]attribute.Value {
	m := make(map[attribute.Key]attribute.Value)
	for _, kv := range s.Attributes() {
		m[kv.Key] = kv.Value
	}
	return m
}

// collect reads the metrics once.
func (e *env) collect(t *testing.T) map[string]metricdata.Aggregation {
	t.Helper()
	var rm metricdata.ResourceMetrics
	if err := e.reader.Collect(context.Background(), &rm); err != nil {
		t.Fatal(err)
	}
	out := make(map[string]metricdata.Aggregation)
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != dlockotel.ScopeName {
			t.Errorf("metrics of scope %q", sm.Scope.Name)
		}
		for _, m := range sm.Metrics {
			out[m.Name] = m.Data
		}
	}
	return out
}

// histCount returns the count of the data point of a histogram whose
// attributes include kv (any point if kv is empty).
func histCount(m map[string]metricdata.Aggregation, name string, kv ...attribute.KeyValue) uint64 {
	h, _ := m[name].(metricdata.Histogram[float64])
	var n uint64
	for _, dp := range h.DataPoints {
		if hasAll(dp.Attributes, kv) {
			n += dp.Count
		}
	}
	return n
}

// sum returns the value of the data points of an int64 sum whose
// attributes include kv.
func sum(m map[string]metricdata.Aggregation, name string, kv ...attribute.KeyValue) int64 {
	s, _ := m[name].(metricdata.Sum[int64])
	var n int64
	for _, dp := range s.DataPoints {
		if hasAll(dp.Attributes, kv) {
			n += dp.Value
		}
	}
	return n
}

func hasAll(set attribute.Set, kv []attribute.KeyValue) bool {
	for _, want := range kv {
		if v, ok := set.Value(want.Key); !ok || v != want.Value {
			return false
		}
	}
	return true
}

var keySeq atomic.Int64

// key returns a key no other test uses.
func key(t testing.TB) string {
	return fmt.Sprintf("%s#%d", t.Name(), keySeq.Add(1))
}

// eventually polls cond every 5ms until it holds or d passes.
func eventually(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}
