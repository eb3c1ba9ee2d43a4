package dlockotel_test

import (
	"context"
	"fmt"
	"strings"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"github.com/redis/go-redis/v9"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
)

// Do traced: the dlock.do span hangs from the caller's span, and holds the
// acquire, the work fn does, and the release.
func Example() {
	ctx := context.Background()
	// In a program: sdktrace.NewTracerProvider(sdktrace.WithBatcher(exporter)),
	// or nothing, to use the global TracerProvider.
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)

	tel, err := dlockotel.New(dlockotel.WithTracerProvider(tp))
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.Options{})
	if err != nil {
		panic(err)
	}
	defer locks.Close()
	locks.AddHooks(tel.Hooks())
	tel.Track(locks)

	ctx, job := tp.Tracer("app").Start(ctx, "nightly-report")
	err = tel.Do(ctx, locks, "example:otel:report", func(ctx context.Context) error {
		_, work := tp.Tracer("app").Start(ctx, "build-report")
		work.End()
		return nil
	})
	job.End()
	if err != nil {
		panic(err)
	}
	printSpans(spans)
	// Output:
	// dlock.acquire  parent=dlock.do        dlock.acquire.mode=lock dlock.acquire.result=acquired dlock.acquire.attempts=1 dlock.acquire.waited=false
	// build-report   parent=dlock.do
	// dlock.release  parent=dlock.do        dlock.release.result=ok
	// dlock.do       parent=nightly-report
	// nightly-report parent=-
}

// With the Telemetry's hooks installed, every call on the Client is traced,
// a child of the span its ctx carries; WithKeyAttribute puts the key on the
// spans.
func ExampleTelemetry_Hooks() {
	ctx := context.Background()
	spans := tracetest.NewSpanRecorder()
	tp := sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(spans))
	defer tp.Shutdown(ctx)

	tel, err := dlockotel.New(dlockotel.WithTracerProvider(tp),
		dlockotel.WithKeyAttribute(func(key string) string { return key }))
	if err != nil {
		panic(err)
	}
	rdb := redis.NewClient(&redis.Options{Addr: redisAddr})
	defer rdb.Close()
	locks, err := dlock.New(rdb, dlock.Options{Hooks: tel.Hooks()}) // or AddHooks later
	if err != nil {
		panic(err)
	}
	defer locks.Close()

	ctx, job := tp.Tracer("app").Start(ctx, "invoice")
	lock, err := locks.Lock(ctx, "example:otel:invoice-17")
	if err != nil {
		panic(err)
	}
	_, err = locks.TryLock(ctx, "example:otel:invoice-17") // busy
	fmt.Println(err != nil)
	if err := lock.Unlock(ctx); err != nil {
		panic(err)
	}
	job.End()
	printSpans(spans)
	// Output:
	// true
	// dlock.acquire  parent=invoice         dlock.key=example:otel:invoice-17 dlock.acquire.mode=lock dlock.acquire.result=acquired dlock.acquire.attempts=1 dlock.acquire.waited=false
	// dlock.acquire  parent=invoice         dlock.key=example:otel:invoice-17 dlock.acquire.mode=try dlock.acquire.result=busy dlock.acquire.attempts=1 dlock.acquire.waited=false
	// dlock.release  parent=invoice         dlock.key=example:otel:invoice-17 dlock.release.result=ok
	// invoice        parent=-
}

// printSpans prints the ended spans with their parent's name and their
// deterministic attributes (not durations or fences).
func printSpans(sr *tracetest.SpanRecorder) {
	names := map[trace.SpanID]string{}
	for _, s := range sr.Ended() {
		names[s.SpanContext().SpanID()] = s.Name()
	}
	for _, s := range sr.Ended() {
		parent := "-"
		if s.Parent().IsValid() {
			parent = names[s.Parent().SpanID()]
		}
		line := fmt.Sprintf("%-14s %-22s", s.Name(), "parent="+parent)
		for _, kv := range s.Attributes() {
			switch kv.Key {
			case "dlock.fence", "dlock.acquire.wait_duration", "dlock.hold.duration":
				continue
			}
			line += fmt.Sprintf(" %s=%s", kv.Key, kv.Value.String())
		}
		fmt.Println(strings.TrimRight(line, " "))
	}
}
