package mqttingest

import (
	"bytes"
	"errors"
	"io"
	"net"
	"sync"
	"testing"
	"time"
)

// loopback returns both ends of a TCP connection over 127.0.0.1.
func loopback(t *testing.T) (client, server net.Conn) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	accepted := make(chan net.Conn, 1)
	go func() {
		c, err := ln.Accept()
		if err != nil {
			t.Error(err)
		}
		accepted <- c
	}()
	client, err = net.Dial("tcp", ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	server = <-accepted
	if server == nil {
		t.FailNow()
	}
	t.Cleanup(func() { client.Close(); server.Close() })
	return client, server
}

func TestBufConnWritesInOrder(t *testing.T) {
	tests := []struct {
		name    string
		writers int
		packets int
		size    int
	}{
		{"one small packet", 1, 1, 4},
		{"many acks", 1, 10_000, 4},
		{"packets larger than the queue", 1, 10, connWriteBuffer + 100},
		{"concurrent writers", 4, 2_000, 37},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			client, server := loopback(t)
			bc := newBufConn(client, 5*time.Second)
			want := make([][]byte, tc.writers)
			var wg sync.WaitGroup
			for w := range tc.writers {
				for i := range tc.packets {
					p := bytes.Repeat([]byte{byte(w*31 + i)}, tc.size)
					want[w] = append(want[w], p...)
				}
				wg.Go(func() {
					for i := range tc.packets {
						if _, err := bc.Write(want[w][i*tc.size : (i+1)*tc.size]); err != nil {
							t.Error(err)
							return
						}
					}
				})
			}
			total := tc.writers * tc.packets * tc.size
			got := make([]byte, total)
			read := make(chan error, 1)
			go func() {
				_, err := io.ReadFull(server, got)
				read <- err
			}()
			wg.Wait()
			if err := <-read; err != nil {
				t.Fatalf("read %d bytes: %v", total, err)
			}
			if tc.writers == 1 {
				if !bytes.Equal(got, want[0]) {
					t.Fatal("bytes arrived out of order or changed")
				}
				return
			}
			// Concurrent writers: each packet arrives whole; count them.
			counts := map[byte]int{}
			for i := 0; i < total; i += tc.size {
				p := got[i : i+tc.size]
				if !bytes.Equal(p, bytes.Repeat(p[:1], tc.size)) {
					t.Fatalf("packet at %d torn: %v", i, p)
				}
				counts[p[0]]++
			}
			for w := range tc.writers {
				for i := range tc.packets {
					counts[byte(w*31+i)]--
				}
			}
			for b, n := range counts {
				if n != 0 {
					t.Fatalf("packet byte %d: %+d copies", b, n)
				}
			}
		})
	}
}

// Close sends what was queued before closing: paho's DISCONNECT is the
// last packet written before it closes the connection.
func TestBufConnCloseFlushes(t *testing.T) {
	client, server := loopback(t)
	bc := newBufConn(client, 5*time.Second)
	want := bytes.Repeat([]byte("disconnect"), 10_000)
	for i := 0; i < len(want); i += 10 {
		if _, err := bc.Write(want[i : i+10]); err != nil {
			t.Fatal(err)
		}
	}
	if err := bc.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := io.ReadAll(server)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("peer got %d of %d bytes before EOF", len(got), len(want))
	}
	if _, err := bc.Write([]byte("x")); !errors.Is(err, errConnClosed) {
		t.Fatalf("write after close: %v, want %v", err, errConnClosed)
	}
	if err := bc.Close(); err != nil {
		t.Fatalf("second close: %v", err)
	}
}

// A write that fails (the peer is gone) fails the writes after it and
// closes the connection, so that paho's reader sees the loss too.
func TestBufConnWriteFailure(t *testing.T) {
	client, server := loopback(t)
	bc := newBufConn(client, 5*time.Second)
	server.(*net.TCPConn).SetLinger(0)
	server.Close() // the peer resets: writes fail
	var err error
	deadline := time.Now().Add(10 * time.Second)
	for err == nil && time.Now().Before(deadline) {
		_, err = bc.Write(make([]byte, 1024))
		time.Sleep(time.Millisecond)
	}
	if err == nil {
		t.Fatal("writes to a reset connection kept succeeding")
	}
	if _, rerr := bc.Read(make([]byte, 1)); rerr == nil {
		t.Fatal("read after the write failure succeeded")
	}
}

// Reads go through the buffer: a packet read a byte at a time arrives
// whole and in order.
func TestBufConnReads(t *testing.T) {
	client, server := loopback(t)
	bc := newBufConn(client, 5*time.Second)
	want := make([]byte, 3*connReadBuffer+17)
	for i := range want {
		want[i] = byte(i % 251)
	}
	go func() {
		if _, err := server.Write(want); err != nil {
			t.Error(err)
		}
	}()
	got := make([]byte, 0, len(want))
	one := make([]byte, 1)
	for len(got) < 100 {
		if _, err := io.ReadFull(bc, one); err != nil {
			t.Fatal(err)
		}
		got = append(got, one[0])
	}
	rest := make([]byte, len(want)-len(got))
	if _, err := io.ReadFull(bc, rest); err != nil {
		t.Fatal(err)
	}
	if got = append(got, rest...); !bytes.Equal(got, want) {
		t.Fatal("read bytes differ from those written")
	}
}

// A broker that stops reading does not hold Close for the whole write
// timeout: Close gives the queue closeGrace, then aborts the write.
func TestBufConnCloseDoesNotWaitForAStuckPeer(t *testing.T) {
	client, _ := loopback(t) // the server side never reads
	bc := newBufConn(client, time.Minute)
	stuck := make(chan struct{})
	go func() {
		defer close(stuck)
		chunk := make([]byte, 32<<10)
		for {
			if _, err := bc.Write(chunk); err != nil {
				return // closed
			}
		}
	}()
	// Wait until the writer is blocked on a full socket and the queue is
	// full, so that Write waits too.
	deadline := time.Now().Add(20 * time.Second)
	for {
		bc.mu.Lock()
		full := bc.writing && len(bc.queued) > connWriteBuffer-(32<<10)
		bc.mu.Unlock()
		if full {
			break
		}
		if time.Now().After(deadline) {
			bc.mu.Lock()
			t.Fatalf("the writer never blocked: writing %v, queued %d, err %v", bc.writing, len(bc.queued), bc.err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	closed := make(chan error, 1)
	go func() { closed <- bc.Close() }()
	select {
	case <-closed:
	case <-time.After(30 * time.Second):
		t.Fatal("Close waited for the write timeout (1 minute) of a peer that does not read")
	}
	select {
	case <-stuck:
	case <-time.After(30 * time.Second):
		t.Fatal("a Write waiting for room did not return after Close")
	}
}

// After Close, reads fail even when bytes are buffered: paho must not
// route messages whose acknowledgements can no longer be sent.
func TestBufConnReadAfterClose(t *testing.T) {
	client, server := loopback(t)
	bc := newBufConn(client, 5*time.Second)
	if _, err := server.Write([]byte("two packets")); err != nil {
		t.Fatal(err)
	}
	one := make([]byte, 3)
	if _, err := io.ReadFull(bc, one); err != nil { // the rest is buffered now
		t.Fatal(err)
	}
	if err := bc.Close(); err != nil {
		t.Fatal(err)
	}
	if n, err := bc.Read(make([]byte, 16)); !errors.Is(err, errConnClosed) {
		t.Fatalf("read after close = %d bytes, %v; want %v", n, err, errConnClosed)
	}
}
