package dlock

import (
	"github.com/dlock-go/dlock/internal/scripts"
	"github.com/dlock-go/dlock/protocol"
)

// Every script this package runs is in internal/scripts, and runs on the
// Client's executor (internal/rexec): by EVALSHA, and by EVAL on a
// NOSCRIPT reply (after a restart, a failover or SCRIPT FLUSH).
var (
	// The bodies of acquire.lua and release.lua, for the EVAL that
	// replaces their raw EVALSHA on NOSCRIPT (see rexec.Raw).
	acquireBody = scripts.Body(scripts.Acquire)
	releaseBody = scripts.Body(scripts.Release)

	// The SHA1s of acquire.lua and release.lua as EVALSHA arguments,
	// boxed once (see tokenLock.acquireRaw).
	acquireSHA any = scripts.Acquire.Hash()
	releaseSHA any = scripts.Release.Hash()
)

// Reply codes shared by every extend and release script (see package
// protocol).
const (
	codeOK        = protocol.ReplyOK
	codeGone      = protocol.ReplyGone
	codeOther     = protocol.ReplyOtherOwner
	codeWrongType = protocol.ReplyWrongType
)
