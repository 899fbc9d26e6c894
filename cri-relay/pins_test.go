package main

import (
	"io"
	"testing"
	"time"
)

func TestAnAnswerAfterTheTimeoutStillCountsForSame(t *testing.T) {
	cache := newPinCache(newControl(io.Discard), time.Hour, 50*time.Millisecond)
	if keys := cache.current(); keys != nil {
		t.Fatalf("no answer came, yet keys %v", keys)
	}
	// pinctl's answer to the request that timed out arrives late; the next is "same as last".
	cache.answered(message{Type: "pins", ID: 1, OK: true, IDs: []string{"sha256:a"}})
	cache.invalidate()
	cache.answered(message{Type: "pins", ID: 2, OK: true, Same: true})
	keys := cache.current()
	if keys == nil || !keys.wantedByID["sha256:a"] {
		t.Fatalf("keys %v, want sha256:a wanted", keys)
	}
}

func TestAFailedReadPassesThroughUntilTheNextFullAnswer(t *testing.T) {
	cache := newPinCache(newControl(io.Discard), time.Hour, time.Second)
	cache.answered(message{Type: "pins", ID: 1, OK: true, IDs: []string{"sha256:a"}})
	if keys := cache.current(); keys == nil {
		t.Fatal("want keys")
	}
	cache.invalidate()
	cache.answered(message{Type: "pins", ID: 2})
	if keys := cache.current(); keys != nil {
		t.Fatalf("pinctl could not read them, yet keys %v", keys)
	}
	cache.invalidate()
	cache.answered(message{Type: "pins", ID: 3, OK: true, IDs: []string{"sha256:b"}})
	if keys := cache.current(); keys == nil || !keys.wantedByID["sha256:b"] || keys.wantedByID["sha256:a"] {
		t.Fatalf("keys %v, want only sha256:b", keys)
	}
}

func TestFreshKeysAreNotAskedForAgain(t *testing.T) {
	cache := newPinCache(newControl(io.Discard), time.Hour, 50*time.Millisecond)
	cache.answered(message{Type: "pins", ID: 1, OK: true, IDs: []string{"sha256:a"}})
	first := cache.current()
	if second := cache.current(); second != first {
		t.Fatal("other keys within the refresh")
	}
	if cache.asked != 1 {
		t.Fatalf("asked %d times", cache.asked)
	}
}

// writeHook stands for pinctl at the other end of the control channel: each request it is
// sent runs the function.
type writeHook func()

func (h writeHook) Write(p []byte) (int, error) {
	h()
	return len(p), nil
}

func TestAnAnswerAskedForBeforeAnInvalidateIsNotKept(t *testing.T) {
	var cache *pinCache
	requests := 0
	cache = newPinCache(newControl(writeHook(func() {
		requests++
		if requests == 1 {
			cache.invalidate() // a reload lands while pinctl reads with the old config
		}
		id := []string{"sha256:old", "sha256:new"}[min(requests, 2)-1]
		cache.answered(message{Type: "pins", ID: uint64(requests), OK: true, IDs: []string{id}})
	})), time.Hour, time.Second)
	if keys := cache.current(); keys == nil || !keys.wantedByID["sha256:old"] {
		t.Fatalf("keys %v, want the answer that came", keys)
	}
	if keys := cache.current(); keys == nil || !keys.wantedByID["sha256:new"] {
		t.Fatalf("keys %v, want them asked for again after the invalidate", keys)
	}
	if cache.asked != 2 {
		t.Fatalf("asked %d times, want 2", cache.asked)
	}
}
