package main

import (
	"os"
	"strings"
	"testing"
)

func TestWithSysmonAwake(t *testing.T) {
	for godebug, want := range map[string]string{
		"":                        sysmonAwake,
		"gctrace=1":               "gctrace=1," + sysmonAwake,
		"gctrace=1,schedtrace=50": "",
	} {
		got, set := withSysmonAwake(godebug)
		if set != (want != "") || (set && got != want) {
			t.Errorf("withSysmonAwake(%q) = %q, %v; want %q", godebug, got, set, want)
		}
	}
}

// The test binary is a program like the relay: init started it again with schedtrace set.
func TestTheRelayRunsWithSysmonAwake(t *testing.T) {
	if os.Getenv(sysmonEnv) == "sleep" {
		t.Fatalf("%s=sleep is set in the tests' environment: init left sysmon as it is", sysmonEnv)
	}
	if !strings.Contains(os.Getenv("GODEBUG"), sysmonAwake) {
		t.Fatalf("GODEBUG is %q: init did not start the program again with %s", os.Getenv("GODEBUG"), sysmonAwake)
	}
}
