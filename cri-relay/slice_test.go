package main

import (
	"os"
	"regexp"
	"runtime"
	"strconv"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

func TestWantedSlice(t *testing.T) {
	for value, want := range map[string]time.Duration{"": defaultSlice, "0": 0, "250us": 250 * time.Microsecond} {
		got, err := wantedSlice(value)
		if err != nil || got != want {
			t.Errorf("wantedSlice(%q) = %v, %v; want %v", value, got, err, want)
		}
	}
	if _, err := wantedSlice("fast"); err == nil {
		t.Error("wantedSlice(\"fast\") took a value that is no duration")
	}
}

var sliceLine = regexp.MustCompile(`se\.slice\s+:\s+(\d+)`)

// threadSlice is the slice the kernel gives a thread (/proc/PID/task/TID/sched, which kernels
// built with CONFIG_SCHED_DEBUG have: Debian's and this machine's).
func threadSlice(t *testing.T, tid int) time.Duration {
	text, err := os.ReadFile("/proc/self/task/" + strconv.Itoa(tid) + "/sched")
	if err != nil {
		t.Fatalf("the kernel does not show a thread's slice: %v", err)
	}
	found := sliceLine.FindSubmatch(text)
	if found == nil {
		t.Fatalf("no se.slice in the thread's sched file (a kernel before 6.6 has no EEVDF slice)")
	}
	ns, _ := strconv.Atoi(string(found[1]))
	return time.Duration(ns)
}

func TestSetSliceTakesEveryThreadAndKeepsItsNice(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	tid := unix.Gettid()
	if err := unix.Setpriority(unix.PRIO_PROCESS, tid, 5); err != nil {
		t.Fatal(err)
	}
	defer setSlice(defaultSlice)
	if took := setSlice(300 * time.Microsecond); took < 2 {
		t.Fatalf("setSlice took %d threads; a Go program has several", took)
	}
	if got := threadSlice(t, tid); got != 300*time.Microsecond {
		t.Errorf("slice %v, want 300µs", got)
	}
	if prio, _ := unix.Getpriority(unix.PRIO_PROCESS, tid); 20-prio != 5 {
		t.Errorf("nice %d after setSlice, want 5 as before", 20-prio)
	}
	// A thread made later is cloned from one that has the slice.
	done := make(chan time.Duration)
	go func() {
		runtime.LockOSThread() // a thread of its own, made now
		done <- threadSlice(t, unix.Gettid())
	}()
	if got := <-done; got != 300*time.Microsecond {
		t.Errorf("a later thread's slice %v, want 300µs", got)
	}
}
