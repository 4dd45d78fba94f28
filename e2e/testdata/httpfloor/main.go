// Command httpfloor is the floor of an HTTP ingest that acknowledges only
// what is durable: Go's net/http server, each request's body read whole,
// appended to one file by a single writer that takes every body waiting,
// writes them in one write, fdatasyncs and only then lets their requests
// answer 202.
// Nothing is parsed, checked or indexed. BenchmarkFleetBatchFloor measures
// its CPU per request against the gateway's.
//
// It prints the address it listens on, then serves until killed.
package main

import (
	"fmt"
	"io"
	"log"
	"net"
	"net/http"
	"os"
	"path/filepath"

	"golang.org/x/sys/unix"
)

type write struct {
	body []byte
	done chan error
}

func main() {
	if len(os.Args) != 2 {
		log.Fatal("usage: httpfloor DIR")
	}
	f, err := os.Create(filepath.Join(os.Args[1], "log"))
	if err != nil {
		log.Fatal(err)
	}
	queue := make(chan write, 4096)
	go commit(f, queue)
	http.HandleFunc("POST /v1/readings", func(w http.ResponseWriter, r *http.Request) {
		body, err := io.ReadAll(io.LimitReader(r.Body, 16<<20))
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		done := make(chan error, 1)
		queue <- write{body, done}
		if err := <-done; err != nil {
			http.Error(w, err.Error(), http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusAccepted)
	})
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(l.Addr())
	log.Fatal(http.Serve(l, nil))
}

// commit writes every body waiting in one write, syncs their data once,
// and then answers them: a group commit.
func commit(f *os.File, queue chan write) {
	var group []write
	var buf []byte
	for w := range queue {
		group = append(group[:0], w)
	take:
		for {
			select {
			case w := <-queue:
				group = append(group, w)
			default:
				break take
			}
		}
		buf = buf[:0]
		for _, w := range group {
			buf = append(buf, w.body...)
		}
		_, err := f.Write(buf)
		if err == nil {
			err = unix.Fdatasync(int(f.Fd()))
		}
		for _, w := range group {
			w.done <- err
		}
	}
}
