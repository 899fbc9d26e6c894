package main

// Every call is forwarded by its method name as raw bytes, as a stream both ways: on the wire
// a unary call is a stream of one message each way, so unary and streaming methods, and methods
// added to the CRI later, pass through alike. Only the answers of ListImages and ImageStatus
// change (pins added).

import (
	"context"
	"io"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	listImages  = "/runtime.v1.ImageService/ListImages"
	imageStatus = "/runtime.v1.ImageService/ImageStatus"
)

// frame is one message as bytes; rawCodec leaves it so on both sides.
type frame struct{ payload []byte }

type rawCodec struct{}

func (rawCodec) Marshal(v interface{}) ([]byte, error) { return v.(*frame).payload, nil }
func (rawCodec) Unmarshal(data []byte, v interface{}) error {
	// Kept, not copied: the grpc-go this builds with (Debian's 1.33) reads each message into
	// a buffer of its own.
	v.(*frame).payload = data
	return nil
}
func (rawCodec) Name() string   { return "proto" }
func (rawCodec) String() string { return "proto" }

var bothStreams = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}

type forwarder struct {
	upstream *grpc.ClientConn
	pins     *pinCache
	stats    *counters
	ctl      *control
}

func (fw *forwarder) handle(_ interface{}, in grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(in)
	err := fw.forward(method, in)
	code := status.Code(err)
	if code == codes.Canceled && in.Context().Err() != nil {
		code = codes.OK // the caller went away (a follower of GetContainerEvents): not the runtime's error
	}
	fw.stats.call(method, code)
	return err
}

func (fw *forwarder) forward(method string, in grpc.ServerStream) error {
	// The caller's deadline and cancellation go upstream with the context.
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(in.Context())
	out, err := fw.upstream.NewStream(metadata.NewOutgoingContext(ctx, callersMetadata(md)), bothStreams, method)
	if err != nil {
		return err
	}
	go relayRequests(in, out)
	rewrite := method == listImages || method == imageStatus
	for first := true; ; first = false {
		answer := &frame{}
		err := out.RecvMsg(answer)
		if first {
			// Set, not sent: it goes out with the first answer, in the same write.
			if header, herr := out.Header(); herr == nil && len(header) > 0 {
				_ = in.SetHeader(header)
			}
		}
		if err != nil {
			in.SetTrailer(out.Trailer())
			if err == io.EOF {
				return nil
			}
			return err // the upstream's own status code and message
		}
		if rewrite {
			answer.payload = fw.withPins(method, answer.payload)
		}
		if err := in.SendMsg(answer); err != nil {
			return err
		}
	}
}

// relayRequests sends the caller's messages upstream until the caller is done sending.
func relayRequests(in grpc.ServerStream, out grpc.ClientStream) {
	for {
		request := &frame{}
		if err := in.RecvMsg(request); err != nil {
			_ = out.CloseSend()
			return
		}
		if err := out.SendMsg(request); err != nil {
			return // the upstream call ended: its status reaches the caller through RecvMsg
		}
	}
}

func (fw *forwarder) withPins(method string, answer []byte) []byte {
	keys := fw.pins.current()
	if keys == nil {
		atomic.AddUint64(&fw.stats.passed, 1)
		return answer
	}
	rewritten, marked, err := markPinned(answer, keys)
	if err != nil {
		atomic.AddUint64(&fw.stats.badAnswers, 1)
		fw.ctl.log("error", "cannot read the runtime's answer; passed through unchanged",
			map[string]string{"method": method, "error": err.Error()})
		return answer
	}
	atomic.AddUint64(&fw.stats.marked, uint64(marked))
	return rewritten
}

// callersMetadata is the caller's metadata without what gRPC sets itself on every call.
func callersMetadata(md metadata.MD) metadata.MD {
	kept := metadata.MD{}
	for key, values := range md {
		if strings.HasPrefix(key, ":") || strings.HasPrefix(key, "grpc-") || key == "user-agent" ||
			key == "content-type" || key == "te" {
			continue
		}
		kept[key] = values
	}
	return kept
}
