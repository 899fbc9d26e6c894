package main

import (
	"context"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/metadata"
)

// CRI-O serves its socket through cmux, which passes a connection to gRPC only when its first
// call's content-type is exactly application/grpc (and resets it otherwise): the relay's calls
// upstream must say that, as the kubelet's and crictl's do.
func TestUpstreamCallsSayApplicationGrpc(t *testing.T) {
	dir := t.TempDir()
	upstream, relay := filepath.Join(dir, "upstream.sock"), filepath.Join(dir, "relay.sock")
	seen := make(chan []string, 1)
	handler := func(_ any, stream grpc.ServerStream) error {
		md, _ := metadata.FromIncomingContext(stream.Context())
		seen <- md.Get("content-type")
		var msg []byte
		if err := stream.RecvMsg(&msg); err != nil {
			return err
		}
		return stream.SendMsg(&msg)
	}
	serve(t, upstream, grpc.NewServer(grpc.ForceServerCodec(bytesCodec{}), grpc.UnknownServiceHandler(handler)))
	startRelay(t, relay, upstream, nil, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	sent, reply := []byte("x"), []byte{}
	if err := dial(t, relay).Invoke(ctx, "/runtime.v1.RuntimeService/Version", &sent, &reply); err != nil {
		t.Fatal(err)
	}
	if got := <-seen; len(got) != 1 || got[0] != "application/grpc" {
		t.Fatalf("the relay's upstream call said content-type %q", got)
	}
}
