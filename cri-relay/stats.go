package main

import (
	"strconv"
	"sync"
	"sync/atomic"

	"google.golang.org/grpc/codes"
)

// Method names come from callers: past this many distinct ones, calls count as "other".
const maxCountedMethods = 256

// counters is what the relay counts for pinctl's metrics.
type counters struct {
	mu         sync.Mutex
	calls      map[string]uint64
	errors     map[string]uint64
	marked     uint64 // atomic: images reported pinned that the runtime did not pin
	passed     uint64 // atomic: image answers passed through because the pins were unreadable
	badAnswers uint64 // atomic: image answers the relay could not read (passed through)
}

type statsSnapshot struct {
	Calls          map[string]uint64 `json:"calls"`
	UpstreamErrors map[string]uint64 `json:"upstream_errors"` // by numeric gRPC code
	Marked         uint64            `json:"images_marked"`
	PassedThrough  uint64            `json:"passed_through"`
	Unreadable     uint64            `json:"unreadable_answers"`
}

func newCounters() *counters {
	return &counters{calls: map[string]uint64{}, errors: map[string]uint64{}}
}

func (c *counters) call(method string, code codes.Code) {
	c.mu.Lock()
	if _, seen := c.calls[method]; !seen && len(c.calls) >= maxCountedMethods {
		method = "other"
	}
	c.calls[method]++
	if code != codes.OK {
		c.errors[strconv.Itoa(int(code))]++
	}
	c.mu.Unlock()
}

func (c *counters) snapshot() *statsSnapshot {
	c.mu.Lock()
	defer c.mu.Unlock()
	calls := make(map[string]uint64, len(c.calls))
	for k, v := range c.calls {
		calls[k] = v
	}
	errs := make(map[string]uint64, len(c.errors))
	for k, v := range c.errors {
		errs[k] = v
	}
	return &statsSnapshot{Calls: calls, UpstreamErrors: errs, Marked: atomic.LoadUint64(&c.marked),
		PassedThrough: atomic.LoadUint64(&c.passed), Unreadable: atomic.LoadUint64(&c.badAnswers)}
}
