// pinctl-cri-relay serves the CRI on a unix socket and forwards every call to the runtime,
// adding pinned=true to the images pinctl wants kept. It is started by `pinctl cri-proxy`,
// which reads the pins and writes the log; see control.go for how the two talk.
package main

import (
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"runtime"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/backoff"
	"google.golang.org/grpc/credentials/insecure"
)

const (
	messageBytes = 64 << 20
	windowBytes  = 16 << 20 // flow-control credit, not memory: what a peer may send before an update
	socketMode   = 0o660
	stopGrace    = 2 * time.Second
)

func main() {
	listen := flag.String("listen", "", "unix socket to serve the CRI on")
	upstream := flag.String("upstream", "", "the runtime's unix socket")
	firstPins := flag.Duration("first-pins", 10*time.Second, "serve without pins if pinctl sends none within this long")
	flag.Parse()
	if os.Getenv("GOMAXPROCS") == "" {
		// A call's work here is tiny; its latency is hand-offs between threads. On one thread
		// goroutines hand off without waking another (measured: 0.1 ms less per ListImages).
		runtime.GOMAXPROCS(1)
	}
	if *listen == "" || *upstream == "" {
		fmt.Fprintln(os.Stderr, "pinctl-cri-relay: --listen and --upstream are required (pinctl cri-proxy starts it)")
		os.Exit(2)
	}
	if err := run(*listen, *upstream, *firstPins); err != nil {
		fmt.Fprintln(os.Stderr, "pinctl-cri-relay:", err)
		os.Exit(1)
	}
}

func run(listen, upstream string, firstPins time.Duration) error {
	ctl := newControl(os.Stdout)
	stats := newCounters()
	pins := newPinCache()
	removals := newRemovals(ctl)
	server, conn, err := newRelay(upstream, pins, stats, ctl, removals)
	if err != nil {
		return err
	}
	defer conn.Close()

	stopped := make(chan struct{})
	go ctl.serve(os.Stdin, pins, stats, removals, stopped)
	if !pins.waitFirst(firstPins) {
		ctl.log("error", "pinctl sent no pinned set; serving without pins until it does",
			map[string]string{"waited": firstPins.String()})
	}
	listener, identity, err := listenSocket(listen)
	if err != nil {
		return err
	}
	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	go func() {
		select {
		case <-signals:
		case <-stopped:
		}
		stop(server)
	}()
	ctl.send(message{Type: "ready"})
	err = server.Serve(listener)
	removeSocket(listen, identity)
	return err
}

// newRelay makes the relay's server, forwarding to the runtime's socket over conn.
func newRelay(upstream string, pins *pinCache, stats *counters, ctl *control,
	removals *removals) (*grpc.Server, *grpc.ClientConn, error) {
	conn, err := grpc.NewClient("unix://"+upstream, grpc.WithTransportCredentials(insecure.NewCredentials()),
		// Reconnect to a restarted runtime within a second, not gRPC's default of up to two minutes.
		grpc.WithConnectParams(grpc.ConnectParams{Backoff: backoff.Config{
			BaseDelay: 100 * time.Millisecond, Multiplier: 1.6, Jitter: 0.2, MaxDelay: time.Second}}),
		// The codec by its registered name (init in forward.go), not forced per call: a forced
		// codec makes grpc-go send content-type application/grpc+proto, and CRI-O's socket
		// (cmux, matching application/grpc exactly) resets such a connection.
		grpc.WithDefaultCallOptions(grpc.MaxCallRecvMsgSize(messageBytes), grpc.MaxCallSendMsgSize(messageBytes)),
		// Windows as large as an answer can be: an image list of 1,000 images (0.5 MiB) comes in
		// one go, not in 64 KiB turns each waiting for a window update through the relay.
		grpc.WithInitialWindowSize(windowBytes), grpc.WithInitialConnWindowSize(windowBytes))
	if err != nil {
		return nil, nil, err
	}
	conn.Connect() // now, as the first call would: not on the kubelet's first call
	fw := &forwarder{upstream: conn, pins: pins, stats: stats, ctl: ctl, removals: removals}
	// peerCredentials: each connection's caller (pid, process name) for the journal of RemoveImage.
	server := grpc.NewServer(grpc.Creds(peerCredentials{}), grpc.ForceServerCodecV2(rawCodec{}),
		grpc.UnknownServiceHandler(fw.handle),
		grpc.MaxRecvMsgSize(messageBytes), grpc.MaxSendMsgSize(messageBytes),
		grpc.InitialWindowSize(windowBytes), grpc.InitialConnWindowSize(windowBytes))
	return server, conn, nil
}

// listenSocket creates the socket with mode 0660 from the start (no moment of a wider mode)
// and says which file it is, so that only this one is removed at the end.
func listenSocket(path string) (*net.UnixListener, syscall.Stat_t, error) {
	var identity syscall.Stat_t
	previous := syscall.Umask(0o777 &^ socketMode)
	listener, err := net.ListenUnix("unix", &net.UnixAddr{Name: path, Net: "unix"})
	syscall.Umask(previous)
	if err != nil {
		return nil, identity, err
	}
	listener.SetUnlinkOnClose(false)
	if err := os.Chmod(path, socketMode); err != nil {
		listener.Close()
		return nil, identity, err
	}
	return listener, identity, syscall.Stat(path, &identity)
}

// removeSocket removes the socket unless a successor has put its own there meanwhile.
func removeSocket(path string, identity syscall.Stat_t) {
	var there syscall.Stat_t
	if syscall.Stat(path, &there) == nil && there.Dev == identity.Dev && there.Ino == identity.Ino {
		os.Remove(path)
	}
}

// stop ends the calls in flight within stopGrace (GetContainerEvents followers never end by
// themselves), then closes everything.
func stop(server *grpc.Server) {
	done := make(chan struct{})
	go func() { server.GracefulStop(); close(done) }()
	select {
	case <-done:
	case <-time.After(stopGrace):
		server.Stop()
	}
}
