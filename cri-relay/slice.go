package main

// A relayed call wakes the relay twice (the caller's request, the runtime's answer). On a busy
// node each wake-up may wait behind a thread that is running: Linux's EEVDF scheduler lets that
// thread finish its slice (about 1.4 ms on two CPUs) before the woken one runs, unless the woken
// one asked for a shorter slice (Linux 6.12 and later). So every thread of the relay asks for
// one: it may then preempt at once, and runs at most that long before it may be preempted in
// turn. It is not real-time (a busy relay gets no more CPU than its weight gives it) and needs
// no privilege. Measured in bench/tail_criproxy.py; docs/benchmarks.md, "Where the unary p99
// comes from".

import (
	"os"
	"strconv"
	"time"

	"golang.org/x/sys/unix"
)

const (
	// The shortest slice the kernel takes (it clamps to 0.1-100 ms).
	defaultSlice = 100 * time.Microsecond
	// PINCTL_RELAY_SLICE: a duration ("100us"), or "0" for the kernel's default slice.
	sliceEnv = "PINCTL_RELAY_SLICE"
)

// Before main: the threads the Go runtime has started so far get the slice now; a thread made
// later is cloned from one of them and inherits it.
func init() {
	slice, err := wantedSlice(os.Getenv(sliceEnv))
	if err != nil || slice == 0 {
		return // a bad value is the kernel's default, as an older kernel would give
	}
	setSlice(slice)
}

func wantedSlice(value string) (time.Duration, error) {
	switch value {
	case "":
		return defaultSlice, nil
	case "0":
		return 0, nil
	}
	return time.ParseDuration(value)
}

// setSlice asks for slice on every thread of this process and says how many took it; an older
// kernel takes the call and ignores the runtime of a fair task.
func setSlice(slice time.Duration) int {
	tasks, err := os.ReadDir("/proc/self/task")
	if err != nil {
		return 0
	}
	took := 0
	for _, task := range tasks {
		tid, err := strconv.Atoi(task.Name())
		if err != nil {
			continue
		}
		nice, err := unix.Getpriority(unix.PRIO_PROCESS, tid)
		if err != nil {
			continue // the thread ended meanwhile
		}
		attr := unix.SchedAttr{
			Size:    unix.SizeofSchedAttr,
			Policy:  0,                // SCHED_OTHER, as before
			Nice:    int32(20 - nice), // getpriority's raw form is 20 - nice
			Runtime: uint64(slice.Nanoseconds()),
		}
		if unix.SchedSetAttr(tid, &attr, 0) == nil {
			took++
		}
	}
	return took
}
