package main

// Every call is forwarded by its method name as raw bytes, as a stream both ways: on the wire
// a unary call is a stream of one message each way, so unary and streaming methods, and methods
// added to the CRI later, pass through alike. The unary methods runtime.v1 has now take a shorter
// way (forwardUnary), the same on the wire. Only the answers of ListImages, StreamImages (each
// of its messages: a list of images, as ListImages' answer) and ImageStatus change (pins added).

import (
	"context"
	"io"
	"strings"
	"sync/atomic"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/encoding"
	"google.golang.org/grpc/mem"
	"google.golang.org/grpc/metadata"
	"google.golang.org/grpc/status"
)

const (
	listImages  = "/runtime.v1.ImageService/ListImages"
	imageStatus = "/runtime.v1.ImageService/ImageStatus"
	// cri-api v0.37: the kubelet's image list as a stream (feature gate CRIListStreaming); each
	// StreamImagesResponse has ListImagesResponse's shape (images = 1).
	streamImages = "/runtime.v1.ImageService/StreamImages"
)

// frame is one message as grpc-go received it: its own buffers, not copied. They come from
// grpc-go's buffer pool, which takes a buffer back and hands it to the next message as soon as
// no reference to it is left; a frame holds a reference of its own from Unmarshal to release.
type frame struct{ data mem.BufferSlice }

func (f *frame) release() {
	f.data.Free()
	f.data = nil
}

// rawCodec passes a frame's buffers through on both sides (grpc-go's CodecV2).
type rawCodec struct{}

// Marshal gives grpc-go a reference of its own, which it frees once the message is written
// (or dropped); the frame keeps its own until release.
func (rawCodec) Marshal(v any) (mem.BufferSlice, error) {
	f := v.(*frame)
	f.data.Ref()
	return f.data, nil
}

// Unmarshal keeps data: grpc-go frees its reference as soon as Unmarshal returns, so the frame
// takes one first, or the buffers would go back to the pool while the message is still to be
// sent (and another message would be read into them).
func (rawCodec) Unmarshal(data mem.BufferSlice, v any) error {
	data.Ref()
	v.(*frame).data = data
	return nil
}

func (rawCodec) Name() string { return "proto" }

// The relay reads no message as protobuf: its "proto" codec, for the calls it makes upstream,
// is the raw one.
func init() { encoding.RegisterCodecV2(rawCodec{}) }

var (
	bothStreams = &grpc.StreamDesc{ServerStreams: true, ClientStreams: true}
	// One request, streamed answers: grpc-go sends the request with its end of stream in one frame.
	answerStream = &grpc.StreamDesc{ServerStreams: true}
)

// oneRequestMethods are runtime.v1's methods of one request and streamed answers (cri-api
// v0.37's Stream* lists, GetContainerEvents): relayed on the caller's goroutine, with no
// goroutine for requests, as forwardUnary does for a unary call.
var oneRequestMethods = map[string]bool{streamImages: true}

func init() {
	for _, name := range []string{"GetContainerEvents", "StreamPodSandboxes", "StreamContainers",
		"StreamContainerStats", "StreamPodSandboxStats", "StreamPodSandboxMetrics"} {
		oneRequestMethods["/runtime.v1.RuntimeService/"+name] = true
	}
}

// unaryMethods are runtime.v1's unary methods (cri-api v0.37), the calls the kubelet makes most.
// RemoveImage has its own way (remove.go); a method not named here is forwarded as a stream.
var unaryMethods = map[string]bool{}

func init() {
	for _, name := range []string{"Version", "RunPodSandbox", "StopPodSandbox", "RemovePodSandbox",
		"PodSandboxStatus", "ListPodSandbox", "CreateContainer", "StartContainer", "StopContainer",
		"RemoveContainer", "ListContainers", "ContainerStatus", "UpdateContainerResources",
		"ReopenContainerLog", "ExecSync", "Exec", "Attach", "PortForward", "ContainerStats",
		"ListContainerStats", "PodSandboxStats", "ListPodSandboxStats", "UpdateRuntimeConfig", "Status",
		"CheckpointContainer", "ListMetricDescriptors", "ListPodSandboxMetrics", "RuntimeConfig",
		"UpdatePodSandboxResources"} {
		unaryMethods["/runtime.v1.RuntimeService/"+name] = true
	}
	for _, name := range []string{"ListImages", "ImageStatus", "PullImage", "ImageFsInfo"} {
		unaryMethods["/runtime.v1.ImageService/"+name] = true
	}
}

type forwarder struct {
	upstream *grpc.ClientConn
	pins     *pinCache
	stats    *counters
	ctl      *control
	removals *removals // nil: RemoveImage is forwarded as any other call
}

func (fw *forwarder) handle(_ any, in grpc.ServerStream) error {
	method, _ := grpc.MethodFromServerStream(in)
	var err error
	refused := false
	if method == removeImage && fw.removals != nil {
		refused, err = fw.remove(in)
	} else if unaryMethods[method] {
		err = fw.forwardUnary(method, in)
	} else {
		err = fw.forward(method, in, nil)
	}
	code := status.Code(err)
	if code == codes.Canceled && in.Context().Err() != nil {
		code = codes.OK // the caller went away (a follower of GetContainerEvents): not the runtime's error
	}
	if refused {
		code = codes.OK // pinctl's refusal (counted there), not the runtime's error
	}
	fw.stats.call(method, code)
	return err
}

// forward relays one call; first, when given, is its one request, read already (RemoveImage).
func (fw *forwarder) forward(method string, in grpc.ServerStream, first *frame) error {
	// The caller's deadline and cancellation go upstream with the context.
	ctx, cancel := context.WithCancel(in.Context())
	defer cancel()
	md, _ := metadata.FromIncomingContext(in.Context())
	desc := bothStreams
	if first == nil && oneRequestMethods[method] {
		request := &frame{}
		if err := in.RecvMsg(request); err != nil {
			return err
		}
		first, desc = request, answerStream
	}
	out, err := fw.upstream.NewStream(metadata.NewOutgoingContext(ctx, callersMetadata(md)), desc, method)
	if err != nil {
		return err
	}
	switch {
	case desc == answerStream:
		// Sent here, with its end of stream: a failure shows as the upstream's status below.
		_ = out.SendMsg(first)
		first.release()
	case first == nil:
		go relayRequests(in, out)
	default:
		go sendOnly(first, out)
	}
	rewrite := method == listImages || method == streamImages || method == imageStatus
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
			fw.withPins(method, answer)
		}
		err = in.SendMsg(answer)
		answer.release()
		if err != nil {
			return err
		}
	}
}

// forwardUnary relays a call of a unary method on the caller's goroutine: its one request read,
// one call upstream, its answer sent. A relayed call waits for two thread wake-ups that a direct
// one does not (the request's arrival, the answer's), each of which may wait for a CPU on a busy
// node; this way adds no goroutine of its own, and grpc-go sends the request and its end of
// stream in one frame, so the runtime is woken once for it, not once more for the end.
func (fw *forwarder) forwardUnary(method string, in grpc.ServerStream) error {
	request := &frame{}
	if err := in.RecvMsg(request); err != nil {
		return err
	}
	md, _ := metadata.FromIncomingContext(in.Context())
	var header, trailer metadata.MD
	answer := &frame{}
	// The caller's deadline and cancellation go upstream with the context.
	err := fw.upstream.Invoke(metadata.NewOutgoingContext(in.Context(), callersMetadata(md)), method,
		request, answer, grpc.Header(&header), grpc.Trailer(&trailer))
	request.release()
	if len(header) > 0 {
		_ = in.SetHeader(header) // set, not sent: it goes out with the answer
	}
	in.SetTrailer(trailer)
	if err != nil {
		answer.release()
		return err // the upstream's own status code and message
	}
	if method == listImages || method == imageStatus {
		fw.withPins(method, answer)
	}
	err = in.SendMsg(answer)
	answer.release()
	return err
}

// sendOnly sends a unary call's one request, read already, and closes the sending side.
func sendOnly(request *frame, out grpc.ClientStream) {
	if out.SendMsg(request) == nil {
		_ = out.CloseSend()
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
		err := out.SendMsg(request)
		request.release()
		if err != nil {
			return // the upstream call ended: its status reaches the caller through RecvMsg
		}
	}
}

// withPins replaces the answer's buffers with the answer with pins added. The rewrite reads
// one contiguous message: grpc-go hands a large one over in pieces (one per HTTP/2 frame),
// which are copied into one buffer from its pool; one piece is read where it is.
func (fw *forwarder) withPins(method string, answer *frame) {
	keys := fw.pins.current()
	if keys == nil {
		atomic.AddUint64(&fw.stats.passed, 1)
		return
	}
	whole := answer.data.MaterializeToBuffer(mem.DefaultBufferPool())
	defer whole.Free()
	rewritten, marked, err := markPinned(whole.ReadOnlyData(), keys)
	if err != nil {
		atomic.AddUint64(&fw.stats.badAnswers, 1)
		fw.ctl.log("error", "cannot read the runtime's answer; passed through unchanged",
			map[string]string{"method": method, "error": err.Error()})
		return
	}
	if marked == 0 {
		return // rewritten is whole's bytes: the answer goes as it came
	}
	atomic.AddUint64(&fw.stats.marked, uint64(marked))
	// markPinned copied every byte it kept into rewritten, a slice of its own (not pooled).
	answer.release()
	answer.data = mem.BufferSlice{mem.SliceBuffer(rewritten)}
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
