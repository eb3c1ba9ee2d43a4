package protocol

import (
	"context"
	"time"
)

// A DirectProtocol renews and releases by itself rather than by one script
// call on the Client's connection, for locks that span several servers
// (package redlock). The engine calls RenewDirect and ReleaseDirect instead
// of running Renew's and Release's calls; the watchdog runs the renewals of
// such locks concurrently, each bounded by the lock's deadline. code is one
// of the reply codes, as a script's reply would be. RenewDirect obeys
// Renew's rule on every server: it never moves an expiry earlier.
type DirectProtocol interface {
	Protocol
	RenewDirect(ctx context.Context, k Keys, value string, ttl time.Duration) (next string, code int64, err error)
	ReleaseDirect(ctx context.Context, k Keys, value string) (code int64, err error)
}
