package main

// RemoveImage through the relay: held until pinctl (here, the test reading the control
// channel) decides, refused with FailedPrecondition and pinctl's message, or forwarded with
// its outcome reported; each carries the caller's pid and name from the socket's credentials.

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
)

func TestRemoveImageIsDecidedByPinctlAndCarriesTheCaller(t *testing.T) {
	dir := t.TempDir()
	upstream, relay := filepath.Join(dir, "upstream.sock"), filepath.Join(dir, "relay.sock")
	var reached atomic.Int64
	handler := func(_ any, stream grpc.ServerStream) error {
		var msg []byte
		if err := stream.RecvMsg(&msg); err != nil {
			return err
		}
		reached.Add(1)
		if string(msg) == "gone" {
			return status.Error(codes.NotFound, "no such image")
		}
		empty := []byte{}
		return stream.SendMsg(&empty)
	}
	serve(t, upstream, grpc.NewServer(grpc.ForceServerCodec(bytesCodec{}), grpc.UnknownServiceHandler(handler)))

	toPinctl, fromRelay := io.Pipe()
	ctl := newControl(fromRelay)
	removals := newRemovals(ctl)
	stats := newCounters()
	server, conn, err := newRelay(upstream, newPinCache(), stats, ctl, removals)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	serve(t, relay, server)

	// pinctl's part: refuse "keep", forward the rest; collect what it is told.
	asked := make(chan message, 10)
	outcomes := make(chan message, 10)
	go func() {
		lines := bufio.NewScanner(toPinctl)
		for lines.Scan() {
			var m message
			if json.Unmarshal(lines.Bytes(), &m) != nil {
				continue
			}
			switch m.Type {
			case "remove":
				asked <- m
				go removals.answered(message{Type: "remove", ID: m.ID, Refuse: string(m.Request) == "keep",
					Message: "cri-proxy refused to remove keep: pinned"})
			case "removed":
				outcomes <- m
			}
		}
	}()

	client := dial(t, relay)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	call := func(request string) error {
		var reply []byte
		sent := []byte(request)
		return client.Invoke(ctx, removeImage, &sent, &reply)
	}
	comm, _ := os.ReadFile("/proc/self/comm")
	me := strings.TrimSpace(string(comm))

	err = call("keep")
	if status.Code(err) != codes.FailedPrecondition || status.Convert(err).Message() != "cri-proxy refused to remove keep: pinned" {
		t.Fatalf("a refused RemoveImage answered %v", err)
	}
	if reached.Load() != 0 {
		t.Fatal("a refused RemoveImage reached the runtime")
	}
	m := <-asked
	if m.PID != int32(os.Getpid()) || m.Client != me {
		t.Fatalf("the caller was sent as pid %d %q, want %d %q", m.PID, m.Client, os.Getpid(), me)
	}
	if err := call("drop"); err != nil {
		t.Fatalf("a forwarded RemoveImage answered %v", err)
	}
	if err := call("gone"); status.Code(err) != codes.NotFound {
		t.Fatalf("the runtime's NotFound came back as %v", err)
	}
	if reached.Load() != 2 {
		t.Fatalf("%d RemoveImage calls reached the runtime, want 2", reached.Load())
	}
	for _, want := range []codes.Code{codes.OK, codes.NotFound} {
		select {
		case got := <-outcomes:
			if codes.Code(got.Code) != want {
				t.Fatalf("outcome %+v, want code %v", got, want)
			}
		case <-ctx.Done():
			t.Fatal("no outcome reported")
		}
	}
	// The refusal is pinctl's, not the runtime's: only the runtime's NotFound counts as its error.
	// (A call is counted once its handler returns, just after its answer went out.)
	for counted := stats.snapshot(); counted.Calls[removeImage] != 3; counted = stats.snapshot() {
		if ctx.Err() != nil {
			t.Fatalf("counted %+v", counted)
		}
		time.Sleep(10 * time.Millisecond)
	}
	if counted := stats.snapshot(); len(counted.UpstreamErrors) != 1 || counted.UpstreamErrors["5"] != 1 {
		t.Fatalf("counted %+v", counted)
	}
}
