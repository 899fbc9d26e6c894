// Command passthrough is the floor of any proxy in front of a CRI socket: it relays bytes between
// each client connection and one of its own to the upstream socket, with no HTTP/2 or gRPC at all.
// bench_criproxy_idle runs it beside the relay: what it adds to a call is the cost of one more
// process on the path (its wake-ups and copies), which no proxy can avoid.
//
//	passthrough LISTEN_SOCKET UPSTREAM_SOCKET
package main

import (
	"io"
	"log"
	"net"
	"os"
)

func main() {
	if len(os.Args) != 3 {
		log.Fatal("usage: passthrough LISTEN_SOCKET UPSTREAM_SOCKET")
	}
	listener, err := net.Listen("unix", os.Args[1])
	if err != nil {
		log.Fatal(err)
	}
	for {
		client, err := listener.Accept()
		if err != nil {
			log.Fatal(err)
		}
		go relay(client, os.Args[2])
	}
}

func relay(client net.Conn, upstream string) {
	defer client.Close()
	server, err := net.Dial("unix", upstream)
	if err != nil {
		log.Print(err)
		return
	}
	defer server.Close()
	done := make(chan struct{}, 2)
	go func() { _, _ = io.Copy(server, client); done <- struct{}{} }()
	go func() { _, _ = io.Copy(client, server); done <- struct{}{} }()
	<-done
}
