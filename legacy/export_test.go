package legacy

import (
	"github.com/dlock-go/dlock/internal/lualib"
	"github.com/dlock-go/dlock/protocol"
)

// TakeoverSHA and TakeoverSrc identify takeover.lua's EVALSHA and EVAL, for
// tests that count takeovers.
var (
	TakeoverSHA = takeoverScript.Hash()
	TakeoverSrc = lualib.Build(takeoverSrc)
)

// TakeoverCall is the takeover of k from cur to v.
func (p *Protocol) TakeoverCall(k protocol.Keys, cur, v string) protocol.Call {
	return p.takeoverCall(k, cur, v)
}
