package dlockotel_test

import (
	"testing"
	"time"

	"github.com/dlock-go/dlock"
	"github.com/dlock-go/dlock/dlockotel"
	"go.opentelemetry.io/otel/metric/noop"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
)

// BenchmarkHooks is the CPU cost the Telemetry's hooks add to one
// uncontended pair made with a ctx that carries no span (acquire and
// release events, no span made), with the SDK's MeterProvider and with
// metrics off.
func BenchmarkHooks(b *testing.B) {
	for _, name := range []string{"sdk", "noop"} {
		b.Run("metrics="+name, func(b *testing.B) {
			opt := dlockotel.WithMeterProvider(noop.NewMeterProvider())
			if name == "sdk" {
				mp := sdkmetric.NewMeterProvider(sdkmetric.WithReader(sdkmetric.NewManualReader()))
				b.Cleanup(func() { _ = mp.Shutdown(b.Context()) })
				opt = dlockotel.WithMeterProvider(mp)
			}
			tel, err := dlockotel.New(opt)
			if err != nil {
				b.Fatal(err)
			}
			h := tel.Hooks()
			acq := dlock.AcquireInfo{Key: "bench:1", Fence: 1, Wait: 200 * time.Microsecond, Attempts: 1}
			rel := dlock.ReleaseInfo{Key: "bench:1", Held: 100 * time.Microsecond}
			ctx := b.Context()
			b.ReportAllocs()
			for b.Loop() {
				h.Acquire(ctx, acq)
				h.Release(ctx, rel)
			}
		})
	}
}
