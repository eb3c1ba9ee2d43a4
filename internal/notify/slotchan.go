package notify

import "strconv"

// ShardMark starts a channel argument of a script that names a shard
// channel: the script SPUBLISHes on the rest (internal/lualib/publish.lua).
const ShardMark = "#"

// slotChannel returns the Client's hand-off channel for Cluster slot
// slot: Own, ':' and a short base-36 suffix chosen so that the whole
// name hashes to slot (it has no braces, so Redis hashes all of it).
// Names are found on first use and kept (a few hundred microseconds per
// slot). The caller holds n.mu.
func (n *Notifier) slotChannelLocked(slot int) string {
	if ch, ok := n.slotNames[slot]; ok {
		return ch
	}
	base := n.own + ":"
	var crc uint16
	for i := 0; i < len(base); i++ {
		crc = crcByte(crc, base[i])
	}
	var buf []byte
	for i := 0; ; i++ {
		buf = strconv.AppendInt(buf[:0], int64(i), 36)
		c := crc
		for _, b := range buf {
			c = crcByte(c, b)
		}
		if int(c&16383) == slot {
			ch := base + string(buf)
			n.slotNames[slot] = ch
			return ch
		}
	}
}

// HandoffChannel returns the channel argument a queued waiter on a key in
// Cluster slot slot gives its acquire scripts: on sharded pub/sub, the
// shard mark and the slot's hand-off channel; else the Client's one
// hand-off channel.
func (n *Notifier) HandoffChannel(slot int) string {
	if !n.sharded {
		return n.own
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	return ShardMark + n.slotChannelLocked(slot)
}

// WakeArg returns the channel argument a release script gets for the
// key's wake-up channel wake: marked for SPUBLISH on sharded pub/sub
// (wake is in the key's slot), wake itself otherwise.
func (n *Notifier) WakeArg(wake string) string {
	if !n.sharded {
		return wake
	}
	return ShardMark + wake
}

// Sharded reports whether this Client's hand-offs go by sharded pub/sub.
func (n *Notifier) Sharded() bool { return n.sharded }

// crcByte adds b to crc, CRC-16/XMODEM (the checksum of Cluster slots).
func crcByte(crc uint16, b byte) uint16 {
	crc ^= uint16(b) << 8
	for range 8 {
		if crc&0x8000 != 0 {
			crc = crc<<1 ^ 0x1021
		} else {
			crc <<= 1
		}
	}
	return crc
}

// keySlot is the Cluster slot of a channel or key name, honouring a hash
// tag as Redis does.
func keySlot(s string) int {
	for i := 0; i < len(s); i++ {
		if s[i] != '{' {
			continue
		}
		for j := i + 1; j < len(s); j++ {
			if s[j] == '}' {
				if j > i+1 {
					s = s[i+1 : j]
				}
				break
			}
		}
		break
	}
	var crc uint16
	for i := 0; i < len(s); i++ {
		crc = crcByte(crc, s[i])
	}
	return int(crc & 16383)
}
