//go:build !race

package dlock_test

// raceEnabled: the race detector is on (allocation counts differ under it).
const raceEnabled = false
