package main

// Go's sysmon thread takes a long sleep whenever the relay has nothing to run (between a call's
// request and the runtime's answer, say), and the next system call wakes it again: a thread
// wake-up more per call, then a run of 20 µs sleeps until it settles. On a busy node each
// wake-up may wait for a CPU, and the call's own thread waits behind it. With GODEBUG's
// schedtrace set, sysmon never takes that sleep (it ticks at most every 10 ms instead): measured
// with the unary way of forward.go, the relay's threads run 4 to 6 times per relayed call instead
// of 8 to 12, and a call's p50 is 25 to 50 µs shorter (bench/tail_criproxy.py beside its proxy
// sysmon-sleep). GODEBUG is read before main runs, so the relay starts itself again once with it set. The trace it asks for prints
// one line to stderr every 24.8 days (the longest period schedtrace takes).

import (
	"os"
	"strings"
	"syscall"
)

const (
	sysmonAwake = "schedtrace=2147483647"
	// PINCTL_RELAY_SYSMON=sleep: leave Go's sysmon as it is (for benchmarks beside it).
	sysmonEnv = "PINCTL_RELAY_SYSMON"
)

func init() {
	godebug, set := withSysmonAwake(os.Getenv("GODEBUG"))
	if !set || os.Getenv(sysmonEnv) == "sleep" {
		return
	}
	env := []string{"GODEBUG=" + godebug} // the first GODEBUG in the environment counts: this one
	for _, kv := range os.Environ() {
		if !strings.HasPrefix(kv, "GODEBUG=") {
			env = append(env, kv)
		}
	}
	// On failure the relay goes on as it is: slower at the tail, not broken.
	_ = syscall.Exec("/proc/self/exe", os.Args, env)
}

// withSysmonAwake returns GODEBUG with schedtrace added, and false when it has one already.
func withSysmonAwake(godebug string) (string, bool) {
	for _, setting := range strings.Split(godebug, ",") {
		if strings.HasPrefix(strings.TrimSpace(setting), "schedtrace=") {
			return godebug, false
		}
	}
	if godebug == "" {
		return sysmonAwake, true
	}
	return godebug + "," + sysmonAwake, true
}
