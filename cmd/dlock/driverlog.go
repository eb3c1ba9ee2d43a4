package main

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/redis/go-redis/v9"
)

// driverLog replaces go-redis's global logger, which would print dial
// failures on stderr in its own format. It keeps the last line, which
// connect quotes when a connection fails (a Sentinel lookup error says more
// than the "context deadline exceeded" it ends in).
type driverLog struct {
	mu   sync.Mutex
	last string
}

var drvLog = &driverLog{}

func init() { redis.SetLogger(drvLog) }

func (l *driverLog) Printf(_ context.Context, format string, v ...any) {
	msg := strings.TrimSpace(fmt.Sprintf(format, v...))
	l.mu.Lock()
	l.last = msg
	l.mu.Unlock()
}

// lastLine returns and forgets the last line logged.
func (l *driverLog) lastLine() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	s := l.last
	l.last = ""
	return s
}
