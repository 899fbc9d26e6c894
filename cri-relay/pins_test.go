package main

import (
	"testing"
	"time"
)

func TestAPushedSetIsWhatCallsSee(t *testing.T) {
	cache := newPinCache()
	if keys := cache.current(); keys != nil {
		t.Fatalf("nothing pushed, yet keys %v", keys)
	}
	cache.pushed(message{Type: "pins", ID: 1, OK: true, IDs: []string{"sha256:a"}})
	keys := cache.current()
	if keys == nil || !keys.wantedByID["sha256:a"] {
		t.Fatalf("keys %v, want sha256:a wanted", keys)
	}
	// "same": the set pushed last stays, the very same one.
	cache.pushed(message{Type: "pins", ID: 2, OK: true, Same: true})
	if again := cache.current(); again != keys {
		t.Fatalf("keys %v after same, want %v", again, keys)
	}
}

func TestAFailedReadPassesThroughUntilTheNextFullSet(t *testing.T) {
	cache := newPinCache()
	cache.pushed(message{Type: "pins", ID: 1, OK: true, IDs: []string{"sha256:a"}})
	cache.pushed(message{Type: "pins", ID: 2})
	if keys := cache.current(); keys != nil {
		t.Fatalf("pinctl could not read them, yet keys %v", keys)
	}
	cache.pushed(message{Type: "pins", ID: 3, OK: true, IDs: []string{"sha256:b"}})
	if keys := cache.current(); keys == nil || !keys.wantedByID["sha256:b"] || keys.wantedByID["sha256:a"] {
		t.Fatalf("keys %v, want only sha256:b", keys)
	}
}

func TestTheFirstSetEndsTheWaitForIt(t *testing.T) {
	cache := newPinCache()
	if cache.waitFirst(10 * time.Millisecond) {
		t.Fatal("no set was pushed, yet the wait ended as if one had")
	}
	go cache.pushed(message{Type: "pins", ID: 1, OK: true})
	if !cache.waitFirst(time.Minute) {
		t.Fatal("a set was pushed, yet the wait for it timed out")
	}
}
