package main

// The forwarding path end to end, in this process: a client, the relay and an upstream in
// place of the runtime, each a real grpc-go client or server on a unix socket. grpc-go reads
// messages into buffers from a pool and takes a buffer back for the next message once no
// reference to it is left, so a relay that kept a message's buffers without a reference of its
// own would send bytes of other messages (or panic on a freed buffer). Many large messages at
// once, each of its own bytes, compared byte for byte, show it.

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math/rand"
	"net"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const echoMethod = "/test.v1.Echo/Chat" // any method: the relay forwards by name

// bytesCodec is the client's and the upstream's codec: grpc-go copies each message it hands to
// a codec of this older kind, so the relay's codec is the only one under test.
type bytesCodec struct{}

func (bytesCodec) Marshal(v any) ([]byte, error)      { return *(v.(*[]byte)), nil }
func (bytesCodec) Unmarshal(data []byte, v any) error { *(v.(*[]byte)) = data; return nil }
func (bytesCodec) Name() string                       { return "proto" }

// inverted is the upstream's second answer to each message: other bytes of the same length.
func inverted(msg []byte) []byte {
	out := make([]byte, len(msg))
	for i, b := range msg {
		out[i] = ^b
	}
	return out
}

// startUpstream serves answers for every method: ListImages and ImageStatus answer their
// fixed answer once; any other method answers each message twice, as it is and inverted.
func startUpstream(t *testing.T, socket string, answers map[string][]byte) {
	t.Helper()
	handler := func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		for {
			var msg []byte
			if err := stream.RecvMsg(&msg); err == io.EOF {
				return nil
			} else if err != nil {
				return err
			}
			if answer, ok := answers[method]; ok {
				return stream.SendMsg(&answer)
			}
			if err := stream.SendMsg(&msg); err != nil {
				return err
			}
			other := inverted(msg)
			if err := stream.SendMsg(&other); err != nil {
				return err
			}
		}
	}
	serve(t, socket, grpc.NewServer(grpc.ForceServerCodec(bytesCodec{}), grpc.UnknownServiceHandler(handler),
		grpc.MaxRecvMsgSize(messageBytes), grpc.MaxSendMsgSize(messageBytes)))
}

func serve(t *testing.T, socket string, server *grpc.Server) {
	t.Helper()
	listener, err := net.Listen("unix", socket)
	if err != nil {
		t.Fatal(err)
	}
	go func() { _ = server.Serve(listener) }()
	t.Cleanup(server.Stop)
}

func dial(t *testing.T, socket string) *grpc.ClientConn {
	t.Helper()
	conn, err := grpc.NewClient("unix://"+socket, grpc.WithTransportCredentials(insecure.NewCredentials()),
		grpc.WithDefaultCallOptions(grpc.ForceCodec(bytesCodec{}),
			grpc.MaxCallRecvMsgSize(messageBytes), grpc.MaxCallSendMsgSize(messageBytes)))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	return conn
}

// startRelay starts the relay in front of upstream with wanted pinned and returns its counters.
func startRelay(t *testing.T, socket, upstream string, wanted, known []string) *counters {
	t.Helper()
	ctl := newControl(io.Discard)
	pins := newPinCache()
	pins.pushed(message{Type: "pins", ID: 1, OK: true, IDs: wanted, KnownIDs: known})
	stats := newCounters()
	server, conn, err := newRelay(upstream, pins, stats, ctl, nil)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { conn.Close() })
	serve(t, socket, server)
	return stats
}

// imageListing is a ListImagesResponse of n images, tens of HTTP/2 frames long.
func imageListing(n int) (answer []byte, ids []string) {
	images := make([]string, n)
	for i := range images {
		id := fmt.Sprintf("sha256:%064x", i)
		ids = append(ids, id)
		images[i] = testImage(id, i%7 == 0, fmt.Sprintf("example.test/image-%d:v%d", i, i%5))
	}
	return listing(images...), ids
}

// chat sends messages of random sizes (below grpc-go's pooling threshold of 1 KiB, up to
// 512 KiB: many HTTP/2 frames) on one stream and checks both answers to each, byte for byte.
func chat(ctx context.Context, conn *grpc.ClientConn, seed int64, messages int) error {
	stream, err := conn.NewStream(ctx, bothStreams, echoMethod)
	if err != nil {
		return err
	}
	random := rand.New(rand.NewSource(seed))
	sent := make(chan []byte, messages)
	sendErr := make(chan error, 1)
	go func() {
		defer close(sent)
		for i := 0; i < messages; i++ {
			size := random.Intn(512 << 10)
			if i%4 == 0 {
				size = random.Intn(1 << 10)
			}
			msg := make([]byte, size)
			random.Read(msg)
			if err := stream.SendMsg(&msg); err != nil {
				sendErr <- err
				return
			}
			sent <- msg
		}
		sendErr <- stream.CloseSend()
	}()
	for want := range sent {
		for _, expected := range [][]byte{want, inverted(want)} {
			var got []byte
			if err := stream.RecvMsg(&got); err != nil {
				return fmt.Errorf("stream %d: %v", seed, err)
			}
			if !bytes.Equal(got, expected) {
				return fmt.Errorf("stream %d: an answer of %d bytes differs from what was sent (%d bytes)",
					seed, len(got), len(expected))
			}
		}
	}
	if err := <-sendErr; err != nil {
		return err
	}
	var extra []byte
	if err := stream.RecvMsg(&extra); err != io.EOF {
		return fmt.Errorf("stream %d: after the last answer: %v", seed, err)
	}
	return nil
}

func TestManyLargeMessagesAtOnceArriveByteForByte(t *testing.T) {
	dir := t.TempDir()
	upstream, relay := filepath.Join(dir, "upstream.sock"), filepath.Join(dir, "relay.sock")
	listed, ids := imageListing(3000) // about 400 KiB
	wanted := ids[:len(ids)/3]
	// ImageStatus of an image not wanted: passed through, not rewritten.
	status := append(bytesField(fieldImages, testImage(ids[len(ids)-1], false, "example.test/last:v1")),
		bytesField(2, string(bytes.Repeat([]byte("i"), 100<<10)))...)
	startUpstream(t, upstream, map[string][]byte{listImages: listed, imageStatus: status})
	stats := startRelay(t, relay, upstream, wanted, ids)
	want, marked, err := markPinned(append([]byte(nil), listed...), newPinKeys(wanted, ids, nil))
	if err != nil || marked == 0 {
		t.Fatalf("marked %d, err %v", marked, err)
	}

	conn := dial(t, relay)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	const chats, messages, lists = 8, 24, 40
	var wg sync.WaitGroup
	failures := make(chan error, chats+2*lists)
	var listsDone atomic.Int64
	for i := 0; i < chats; i++ {
		wg.Add(1)
		go func(seed int64) {
			defer wg.Done()
			if err := chat(ctx, conn, seed, messages); err != nil {
				failures <- err
			}
		}(int64(i))
	}
	for i := 0; i < 2; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := 0; j < lists; j++ {
				for _, call := range []struct {
					method string
					want   []byte
				}{{listImages, want}, {imageStatus, status}} {
					var got []byte
					if err := conn.Invoke(ctx, call.method, &[]byte{}, &got); err != nil {
						failures <- fmt.Errorf("%s: %v", call.method, err)
						return
					}
					if !bytes.Equal(got, call.want) {
						failures <- fmt.Errorf("%s: the answer (%d bytes) differs from the expected (%d bytes)",
							call.method, len(got), len(call.want))
						return
					}
				}
				listsDone.Add(1)
			}
		}()
	}
	wg.Wait()
	close(failures)
	for err := range failures {
		t.Error(err)
	}
	if t.Failed() {
		return
	}
	snapshot := stats.snapshot()
	if snapshot.Marked != uint64(marked)*uint64(listsDone.Load()) || snapshot.Unreadable != 0 ||
		snapshot.PassedThrough != 0 {
		t.Fatalf("counted %+v for %d ListImages of %d pins each", snapshot, listsDone.Load(), marked)
	}
	if calls := snapshot.Calls[echoMethod]; calls != chats {
		t.Fatalf("%d calls of %s counted, want %d", calls, echoMethod, chats)
	}
}

// A unary method (forwardUnary) carries the caller's metadata and deadline upstream, and the
// runtime's header, trailer, status code and message back, as the stream way does.
func TestUnaryMethodsCarryMetadataAndStatusBothWays(t *testing.T) {
	dir := t.TempDir()
	upstream, relay := filepath.Join(dir, "upstream.sock"), filepath.Join(dir, "relay.sock")
	const failing = "/runtime.v1.RuntimeService/ContainerStatus"
	handler := func(_ any, stream grpc.ServerStream) error {
		method, _ := grpc.MethodFromServerStream(stream)
		var msg []byte
		if err := stream.RecvMsg(&msg); err != nil {
			return err
		}
		md, _ := metadata.FromIncomingContext(stream.Context())
		deadline, hasDeadline := stream.Context().Deadline()
		_ = stream.SetHeader(metadata.Pairs("seen-caller", strings.Join(md.Get("x-caller"), ","),
			"seen-deadline", fmt.Sprint(hasDeadline && time.Until(deadline) > time.Minute)))
		stream.SetTrailer(metadata.Pairs("upstream-trailer", "t"))
		if method == failing {
			return status.Error(codes.NotFound, "no container "+string(msg))
		}
		answer := append([]byte("answer to "), msg...)
		return stream.SendMsg(&answer)
	}
	serve(t, upstream, grpc.NewServer(grpc.ForceServerCodec(bytesCodec{}), grpc.UnknownServiceHandler(handler)))
	startRelay(t, relay, upstream, nil, nil)
	conn := dial(t, relay)
	ctx, cancel := context.WithTimeout(metadata.AppendToOutgoingContext(context.Background(), "x-caller", "kubelet"),
		2*time.Minute)
	defer cancel()

	var header, trailer metadata.MD
	var got []byte
	err := conn.Invoke(ctx, "/runtime.v1.RuntimeService/Version", &[]byte{'v'}, &got,
		grpc.Header(&header), grpc.Trailer(&trailer))
	if err != nil || string(got) != "answer to v" {
		t.Fatalf("Version: %q, %v", got, err)
	}
	if header.Get("seen-caller")[0] != "kubelet" || header.Get("seen-deadline")[0] != "true" ||
		len(trailer.Get("upstream-trailer")) != 1 {
		t.Fatalf("header %v, trailer %v", header, trailer)
	}

	trailer = nil
	err = conn.Invoke(ctx, failing, &[]byte{'c'}, &got, grpc.Trailer(&trailer))
	if status.Code(err) != codes.NotFound || status.Convert(err).Message() != "no container c" {
		t.Fatalf("ContainerStatus: %v, want the upstream's NotFound and message", err)
	}
	if len(trailer.Get("upstream-trailer")) != 1 {
		t.Fatalf("trailer %v", trailer)
	}
}

func TestAOneRequestMethodStreamsEveryAnswer(t *testing.T) {
	dir := t.TempDir()
	upstream, relay := filepath.Join(dir, "up.sock"), filepath.Join(dir, "relay.sock")
	startUpstream(t, upstream, nil) // each message answered twice: as it is, and inverted
	startRelay(t, relay, upstream, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	const method = "/runtime.v1.RuntimeService/StreamContainers"
	stream, err := dial(t, relay).NewStream(ctx, &grpc.StreamDesc{ServerStreams: true}, method)
	if err != nil {
		t.Fatal(err)
	}
	request := []byte("filter")
	if err := stream.SendMsg(&request); err != nil {
		t.Fatal(err)
	}
	if err := stream.CloseSend(); err != nil {
		t.Fatal(err)
	}
	var got [][]byte
	for {
		var msg []byte
		if err := stream.RecvMsg(&msg); err == io.EOF {
			break
		} else if err != nil {
			t.Fatal(err)
		}
		got = append(got, msg)
	}
	if len(got) != 2 || !bytes.Equal(got[0], request) || !bytes.Equal(got[1], inverted(request)) {
		t.Fatalf("answers %q, want the request and its inverse", got)
	}
}
