package fenced

import (
	"sync/atomic"
	"time"
)

// lastSeq is the sequence of the process's last write.
var lastSeq atomic.Uint64

// nextSeq returns the sequence of a new write: larger than every earlier
// one of this process, and at least the wall clock in nanoseconds, so
// that it also orders the writes of processes on one host (a child that
// writes with its parent's grant).
func nextSeq() uint64 {
	for {
		prev := lastSeq.Load()
		s := max(prev+1, wallNanos())
		if lastSeq.CompareAndSwap(prev, s) {
			return s
		}
	}
}

func wallNanos() uint64 {
	return uint64(max(time.Now().UnixNano(), 0))
}
