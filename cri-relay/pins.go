package main

import (
	"sync"
	"sync/atomic"
	"time"
)

// pinKeys is what to report pinned, keyed like pinctl's check: image IDs first, names for an
// image whose ID pinctl does not know. One map for the IDs: a lookup per image, not two.
type pinKeys struct {
	wantedByID map[string]bool // every ID pinctl knows: true when it wants the image kept
	names      map[string]struct{}
}

func newPinKeys(wanted, known, names []string) *pinKeys {
	keys := &pinKeys{wantedByID: make(map[string]bool, len(known)), names: make(map[string]struct{}, len(names))}
	for _, id := range known {
		keys.wantedByID[id] = false
	}
	for _, id := range wanted {
		keys.wantedByID[id] = true
	}
	for _, name := range names {
		keys.names[name] = struct{}{}
	}
	return keys
}

// pinCache holds the pinned set pinctl pushed last. pinctl keeps it current in the background
// (driven by the runtime's events) and pushes each new set; a call only loads the pointer, so
// no call ever waits for a read. nil keys mean pinctl could not read them: answers pass through.
type pinCache struct {
	keys     atomic.Pointer[pinKeys]
	lastSent *pinKeys // by the control channel's reader only: what "same" refers to
	first    chan struct{}
	once     sync.Once
}

func newPinCache() *pinCache {
	return &pinCache{first: make(chan struct{})}
}

func (c *pinCache) current() *pinKeys {
	return c.keys.Load()
}

// pushed takes a set pinctl sent. It runs on the control channel's reader alone.
func (c *pinCache) pushed(m message) {
	switch {
	case m.OK && m.Same:
	case m.OK:
		c.lastSent = newPinKeys(m.IDs, m.KnownIDs, m.Names)
	default:
		c.lastSent = nil
	}
	c.keys.Store(c.lastSent)
	c.once.Do(func() { close(c.first) })
}

// waitFirst waits for pinctl's first set (read before it started the relay, so it comes at once),
// so that the socket is served with the pins in place; false when none came within timeout.
func (c *pinCache) waitFirst(timeout time.Duration) bool {
	select {
	case <-c.first:
		return true
	case <-time.After(timeout):
		return false
	}
}
