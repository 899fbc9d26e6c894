package main

// RemoveImage is the one call the relay holds before forwarding: pinctl decides whether the
// image is pinned (on pins it reads for this call, with their reasons) and journals the call.
// The relay sends it the request's bytes and the caller (the socket's peer credentials, from
// the connection's handshake), forwards or refuses as told, then sends the runtime's status.

import (
	"context"
	"errors"
	"net"
	"os"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials"
	"google.golang.org/grpc/peer"
	"google.golang.org/grpc/status"
)

const (
	removeImage = "/runtime.v1.ImageService/RemoveImage"
	// How long a RemoveImage waits for pinctl's decision (a read of every record) before it is
	// forwarded unchecked, as answers pass through when the pins cannot be read.
	decideTimeout = 30 * time.Second
)

// caller is the process at the other end of a connection: its pid from SO_PEERCRED and its
// name from /proc/PID/comm, read once when it connects (0 and "" when unknown).
type caller struct {
	credentials.CommonAuthInfo
	pid  int32
	name string
}

func (caller) AuthType() string { return "peercred" }

// peerCredentials is a handshake that reads the peer's credentials and changes no byte: every
// call on the connection then carries them (peer.FromContext).
type peerCredentials struct{}

func (peerCredentials) ServerHandshake(conn net.Conn) (net.Conn, credentials.AuthInfo, error) {
	info := caller{CommonAuthInfo: credentials.CommonAuthInfo{SecurityLevel: credentials.NoSecurity}}
	if unixConn, ok := conn.(*net.UnixConn); ok {
		if raw, err := unixConn.SyscallConn(); err == nil {
			_ = raw.Control(func(fd uintptr) {
				if cred, err := syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED); err == nil {
					info.pid = cred.Pid
				}
			})
		}
	}
	info.name = processName(info.pid)
	return conn, info, nil
}

func (peerCredentials) ClientHandshake(context.Context, string, net.Conn) (net.Conn, credentials.AuthInfo, error) {
	return nil, nil, errors.New("peerCredentials serve only")
}

func (peerCredentials) Info() credentials.ProtocolInfo {
	return credentials.ProtocolInfo{SecurityProtocol: "peercred"}
}

func (p peerCredentials) Clone() credentials.TransportCredentials { return p }

func (peerCredentials) OverrideServerName(string) error { return nil }

func processName(pid int32) string {
	if pid <= 0 {
		return ""
	}
	comm, err := os.ReadFile("/proc/" + strconv.Itoa(int(pid)) + "/comm")
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(comm))
}

func callerOf(ctx context.Context) caller {
	if p, ok := peer.FromContext(ctx); ok {
		if c, ok := p.AuthInfo.(caller); ok {
			return c
		}
	}
	return caller{}
}

// verdict is pinctl's answer: refuse with message, or forward.
type verdict struct {
	refuse  bool
	message string
}

// removals asks pinctl for its decision on each RemoveImage and waits for the answer with the
// same id.
type removals struct {
	ctl     *control
	mu      sync.Mutex
	asked   uint64
	waiting map[uint64]chan verdict
}

func newRemovals(ctl *control) *removals {
	return &removals{ctl: ctl, waiting: map[uint64]chan verdict{}}
}

func (r *removals) decide(ctx context.Context, request []byte, who caller) (uint64, verdict) {
	answer := make(chan verdict, 1)
	r.mu.Lock()
	r.asked++
	id := r.asked
	r.waiting[id] = answer
	r.mu.Unlock()
	defer func() {
		r.mu.Lock()
		delete(r.waiting, id)
		r.mu.Unlock()
	}()
	r.ctl.send(message{Type: "remove", ID: id, Request: request, PID: who.pid, Client: who.name})
	timer := time.NewTimer(decideTimeout)
	defer timer.Stop()
	select {
	case v := <-answer:
		return id, v
	case <-timer.C:
		r.ctl.log("error", "pinctl did not decide on a RemoveImage in time; forwarding it unchecked",
			map[string]string{"timeout": decideTimeout.String()})
	case <-ctx.Done():
	}
	return id, verdict{}
}

// answered hands pinctl's decision to the call waiting for it (none: it gave up waiting).
func (r *removals) answered(m message) {
	r.mu.Lock()
	answer, ok := r.waiting[m.ID]
	r.mu.Unlock()
	if ok {
		answer <- verdict{refuse: m.Refuse, message: m.Message}
	}
}

// done tells pinctl what the runtime answered a RemoveImage it let through.
func (r *removals) done(id uint64, err error) {
	st := status.Convert(err)
	r.ctl.send(message{Type: "removed", ID: id, Code: int(st.Code()), Message: st.Message()})
}

// remove holds a RemoveImage until pinctl decides, then refuses it (refused true) or forwards it.
func (fw *forwarder) remove(in grpc.ServerStream) (refused bool, err error) {
	request := &frame{}
	if err := in.RecvMsg(request); err != nil {
		return false, err
	}
	defer request.release()
	id, v := fw.removals.decide(in.Context(), request.data.Materialize(), callerOf(in.Context()))
	if v.refuse {
		return true, status.Error(codes.FailedPrecondition, v.message)
	}
	if in.Context().Err() != nil {
		return false, status.FromContextError(in.Context().Err()).Err()
	}
	err = fw.forward(removeImage, in, request)
	fw.removals.done(id, err)
	return false, err
}
