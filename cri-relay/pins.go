package main

import (
	"sync"
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

// pinCache holds the pinned set for refresh, asking pinctl again on the first image call after
// that, by one caller while the others wait for the same answer. Nothing is asked while no
// image call comes. nil keys mean pinctl could not read them: answers pass through.
type pinCache struct {
	refresh time.Duration
	timeout time.Duration
	ctl     *control

	mu       sync.Mutex
	keys     *pinKeys
	readAt   time.Time
	epoch    uint64 // one more at each invalidate: an answer asked for before it is not fresh
	fetching chan struct{}
	asked    uint64
	answer   chan pinAnswer
	lastSent *pinKeys // by the control channel's reader only
}

type pinAnswer struct {
	id   uint64
	keys *pinKeys
}

func newPinCache(ctl *control, refresh, timeout time.Duration) *pinCache {
	return &pinCache{ctl: ctl, refresh: refresh, timeout: timeout, answer: make(chan pinAnswer, 1)}
}

func (c *pinCache) current() *pinKeys {
	c.mu.Lock()
	if !c.readAt.IsZero() && time.Since(c.readAt) < c.refresh {
		keys := c.keys
		c.mu.Unlock()
		return keys
	}
	if c.fetching == nil {
		c.fetching = make(chan struct{})
		go c.fetch(c.fetching)
	}
	done := c.fetching
	c.mu.Unlock()
	<-done // fetch gives up after timeout itself
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.keys
}

func (c *pinCache) fetch(done chan struct{}) {
	c.mu.Lock()
	c.asked++
	id, epoch := c.asked, c.epoch
	c.mu.Unlock()
	c.ctl.send(message{Type: "pins", ID: id})
	var keys *pinKeys
	deadline := time.After(c.timeout)
wait:
	for {
		select {
		case m := <-c.answer:
			if m.id != id {
				continue // an answer to a request that timed out
			}
			keys = m.keys
			break wait
		case <-deadline:
			c.ctl.log("error", "pinctl did not answer for the pinned set; answers pass through unchanged",
				map[string]string{"timeout": c.timeout.String()})
			break wait
		}
	}
	c.mu.Lock()
	c.keys, c.readAt, c.fetching = keys, time.Now(), nil
	if c.epoch != epoch {
		c.readAt = time.Time{} // pinctl may have answered with the config it had before: ask again
	}
	c.mu.Unlock()
	close(done)
}

// answered hands pinctl's answer to the waiting fetch; only the newest answer is kept, as
// an older one belongs to a request that timed out. It runs on the control channel's reader
// alone, which also keeps what pinctl sent last: "same" refers to that, answered in time or not.
func (c *pinCache) answered(m message) {
	switch {
	case m.OK && m.Same:
	case m.OK:
		c.lastSent = newPinKeys(m.IDs, m.KnownIDs, m.Names)
	default:
		c.lastSent = nil
	}
	answer := pinAnswer{id: m.ID, keys: c.lastSent}
	for {
		select {
		case c.answer <- answer:
			return
		default:
			select {
			case <-c.answer:
			default:
			}
		}
	}
}

// invalidate makes the next image call ask again (pinctl reloaded its configuration).
func (c *pinCache) invalidate() {
	c.mu.Lock()
	c.readAt = time.Time{}
	c.epoch++
	c.mu.Unlock()
}
