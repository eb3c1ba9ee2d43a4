package protocol

// The reply codes of every renewal and release: the replies of the scripts
// of Protocol.Renew and Protocol.Release, and the code DirectProtocol's
// RenewDirect and ReleaseDirect return. The engine reads ReplyGone as the
// lock expired (dlock.ErrExpired), ReplyOtherOwner and ReplyWrongType as the
// lock taken (dlock.ErrTaken).
const (
	ReplyOK         = 1  // renewed, or released
	ReplyGone       = 0  // the key is gone
	ReplyOtherOwner = -1 // the key holds another owner's value
	ReplyWrongType  = -2 // the key is not a string
)
