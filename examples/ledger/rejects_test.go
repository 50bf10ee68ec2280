package main

import (
	"os"
	"path/filepath"
	"testing"
)

func TestRejectLog(t *testing.T) {
	path := filepath.Join(t.TempDir(), rejectsFile)
	l, err := OpenRejectLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if wrote, err := l.Add(7, 10, "bad", []byte("x,\"y\"\rz")); !wrote || err != nil {
		t.Fatalf("first add: %v %v", wrote, err)
	}
	if wrote, _ := l.Add(7, 10, "bad", []byte("again")); wrote {
		t.Fatal("the same epoch and position written twice")
	}
	l.Add(8, 10, "bad", []byte("other epoch"))
	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	// A record torn by a crash is cut off on open; the others are known.
	f, _ := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	f.WriteString("9,44,torn")
	f.Close()
	if n, _ := CountRejects(path); n != 2 {
		t.Fatalf("CountRejects with a torn record = %d, want 2 (a torn record does not count)", n)
	}
	l, err = OpenRejectLog(path)
	if err != nil {
		t.Fatal(err)
	}
	if l.Len() != 2 {
		t.Fatalf("reopened log has %d records, want 2", l.Len())
	}
	if wrote, _ := l.Add(7, 10, "bad", nil); wrote {
		t.Fatal("a record of the previous run written again")
	}
	if wrote, _ := l.Add(9, 44, "bad", []byte("whole")); !wrote {
		t.Fatal("the torn record was not written again")
	}
	l.Close()
	if n, err := CountRejects(path); n != 3 || err != nil {
		t.Fatalf("CountRejects = %d, %v; want 3", n, err)
	}
	if n, err := CountRejects(filepath.Join(t.TempDir(), "none")); n != 0 || err != nil {
		t.Fatalf("missing log: %d, %v", n, err)
	}
}

func TestParseEvent(t *testing.T) {
	ev, ok := parseEvent("durable epoch=18446744073709551615 position=22 applied=3")
	if !ok || ev.kind != evDurable || ev.fields["position"] != 22 || ev.fields["applied"] != 3 || uint64(ev.fields["epoch"]) != 1<<64-1 {
		t.Fatalf("%+v %v", ev, ok)
	}
	for _, bad := range []string{"", "progress x=1", "durable x", "durable x=y"} {
		if _, ok := parseEvent(bad); ok {
			t.Errorf("parseEvent(%q) ok", bad)
		}
	}
}
