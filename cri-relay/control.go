package main

// The control channel to `pinctl cri-proxy`, which started the relay: JSON lines on the
// relay's stdin (from pinctl) and stdout (to pinctl). pinctl reads the label store and the
// policy, keeps the pinned set current and pushes each new one ("pins", answered "taken" with its
// id once calls use it); the relay reports what it counted when asked, and hands pinctl log
// events so that one process writes the log, in one format.

import (
	"bufio"
	"encoding/json"
	"io"
	"sync"
)

// message is every message of the channel; Type says which fields are set.
type message struct {
	Type string `json:"type"`
	ID   uint64 `json:"id,omitempty"`
	// pins (from pinctl): OK false when it could not read them, Same when they are the ones
	// it sent last.
	OK       bool     `json:"ok,omitempty"`
	Same     bool     `json:"same,omitempty"`
	IDs      []string `json:"ids,omitempty"`
	KnownIDs []string `json:"known_ids,omitempty"`
	Names    []string `json:"names,omitempty"`
	// log (to pinctl)
	Level   string            `json:"level,omitempty"`
	Message string            `json:"message,omitempty"`
	Fields  map[string]string `json:"fields,omitempty"`
	// stats (to pinctl)
	Stats *statsSnapshot `json:"stats,omitempty"`
	// remove (to pinctl: the RemoveImage request's bytes, base64 in JSON, and its caller; from
	// pinctl: Refuse with Message, or forward) and removed (to pinctl: the runtime's Code and
	// Message for it)
	Request []byte `json:"request,omitempty"`
	PID     int32  `json:"pid,omitempty"`
	Client  string `json:"client,omitempty"`
	Refuse  bool   `json:"refuse,omitempty"`
	Code    int    `json:"code,omitempty"`
}

type control struct {
	writeMu sync.Mutex
	out     *json.Encoder
}

func newControl(out io.Writer) *control {
	return &control{out: json.NewEncoder(out)}
}

func (c *control) send(m message) {
	c.writeMu.Lock()
	defer c.writeMu.Unlock()
	_ = c.out.Encode(m) // pinctl gone: stdin's end stops the relay
}

func (c *control) log(level, text string, fields map[string]string) {
	c.send(message{Type: "log", Level: level, Message: text, Fields: fields})
}

// serve reads pinctl's messages until stdin ends, which means pinctl is gone: then stopped
// is closed so that the relay stops serving too (a relay left behind would hold the socket).
func (c *control) serve(in io.Reader, pins *pinCache, stats *counters, removals *removals, stopped chan<- struct{}) {
	scanner := bufio.NewScanner(in)
	scanner.Buffer(make([]byte, 1<<20), 256<<20) // a node's pinned set in one line
	for scanner.Scan() {
		var m message
		if err := json.Unmarshal(scanner.Bytes(), &m); err != nil {
			c.log("error", "unreadable control message", map[string]string{"error": err.Error()})
			continue
		}
		switch m.Type {
		case "pins":
			pins.pushed(m)
			// pinctl waits for this before it counts the set as served (and logs a reload).
			c.send(message{Type: "taken", ID: m.ID})
		case "remove":
			removals.answered(m)
		case "stats":
			c.send(message{Type: "stats", ID: m.ID, Stats: stats.snapshot()})
		}
	}
	close(stopped)
}
