package redistest

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// PipelineDelay is a go-redis hook (redis.Client.AddHook) that delays every
// pipeline, such as a lock Client's renewal batches, by the duration in D
// (nanoseconds; 0: no delay) before sending it. Single commands go
// through at once.
type PipelineDelay struct{ D atomic.Int64 }

// Set makes every pipeline from now on wait d.
func (p *PipelineDelay) Set(d time.Duration) { p.D.Store(int64(d)) }

func (p *PipelineDelay) DialHook(next redis.DialHook) redis.DialHook          { return next }
func (p *PipelineDelay) ProcessHook(next redis.ProcessHook) redis.ProcessHook { return next }
func (p *PipelineDelay) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		time.Sleep(time.Duration(p.D.Load()))
		return next(ctx, cmds)
	}
}
