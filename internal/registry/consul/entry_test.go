package consul

import (
	"encoding/json"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/warren-mesh/warren/internal/registry"
)

func validEntry() registry.Entry {
	return registry.Entry{Issuer: "https://issuer.example", User: "user-1", Epoch: 3, Region: "eu-1",
		Alloc: "0f8e2a1c-5b7d-4e3a-9c6f-1a2b3c4d5e6f", Addr: "10.0.0.7:7070", Key: "bearer-SECRET-0123",
		Since: time.Date(2025, 1, 2, 3, 4, 5, 6, time.UTC)}
}

func TestEntryRoundTrip(t *testing.T) {
	want := validEntry()
	b, err := encodeEntry(want)
	if err != nil {
		t.Fatal(err)
	}
	got, err := decodeEntry(b)
	if err != nil {
		t.Fatal(err)
	}
	if got != want {
		t.Fatalf("round trip = %+v, want %+v", got, want)
	}
	// The layout other processes read.
	var fields map[string]any
	if err := json.Unmarshal(b, &fields); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"issuer", "user", "epoch", "region", "alloc", "addr", "key", "since"} {
		if _, ok := fields[f]; !ok {
			t.Errorf("encoded entry has no %q: %s", f, b)
		}
	}
}

func TestDecodeEntryRejects(t *testing.T) {
	ok := `{"issuer":"i","user":"u","epoch":1,"alloc":"a1","addr":"127.0.0.1:1","key":"SECRET","since":"2025-01-01T00:00:00Z"}`
	if _, err := decodeEntry([]byte(ok)); err != nil {
		t.Fatalf("valid entry: %v", err)
	}
	if _, err := decodeEntry([]byte(`{"issuer":"i","user":"u","epoch":1,"alloc":"a1","addr":"h:2","future":[1,{}]}`)); err != nil {
		t.Fatalf("unknown fields must be ignored: %v", err)
	}
	for name, in := range map[string]string{
		"empty":          ``,
		"null":           `null`,
		"array":          `[]`,
		"truncated":      ok[:40],
		"trailing":       ok + `{}`,
		"trailing junk":  ok + `x`,
		"no user":        strings.Replace(ok, `"user":"u"`, `"user":""`, 1),
		"no issuer":      strings.Replace(ok, `"issuer":"i"`, `"issuer":""`, 1),
		"negative epoch": strings.Replace(ok, `"epoch":1`, `"epoch":-1`, 1),
		"epoch overflow": strings.Replace(ok, `"epoch":1`, `"epoch":99999999999999999999`, 1),
		"epoch string":   strings.Replace(ok, `"epoch":1`, `"epoch":"1"`, 1),
		"no port":        strings.Replace(ok, `127.0.0.1:1`, `127.0.0.1`, 1),
		"port zero":      strings.Replace(ok, `127.0.0.1:1`, `127.0.0.1:0`, 1),
		"port too big":   strings.Replace(ok, `127.0.0.1:1`, `127.0.0.1:65536`, 1),
		"no host":        strings.Replace(ok, `127.0.0.1:1`, `:1`, 1),
		"alloc path":     strings.Replace(ok, `"alloc":"a1"`, `"alloc":"../x"`, 1),
		"no alloc":       strings.Replace(ok, `"alloc":"a1"`, `"alloc":""`, 1),
		"bad since":      strings.Replace(ok, `2025-01-01T00:00:00Z`, `yesterday SECRET`, 1),
		"huge":           `{"issuer":"` + strings.Repeat("x", maxEntrySize) + `"}`,
	} {
		e, err := decodeEntry([]byte(in))
		if !errors.Is(err, ErrBadEntry) {
			t.Errorf("%s: err = %v, want ErrBadEntry", name, err)
		}
		if e != (registry.Entry{}) {
			t.Errorf("%s: entry %+v returned with an error", name, e)
		}
		if err != nil && strings.Contains(err.Error(), "SECRET") {
			t.Errorf("%s: error quotes the value: %v", name, err)
		}
	}
}

func TestEncodeEntryValidates(t *testing.T) {
	e := validEntry()
	e.Alloc = "a/b"
	if _, err := encodeEntry(e); !errors.Is(err, ErrBadEntry) {
		t.Fatalf("alloc with a slash: %v, want ErrBadEntry", err)
	}
}

// Garbage in an owner key gives ErrBadEntry and no entry, never a panic; whatever decodes is a complete
// entry that survives a round trip.
func FuzzDecodeEntry(f *testing.F) {
	b, _ := encodeEntry(validEntry())
	f.Add(b)
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":0,"alloc":"1234","addr":"[::1]:80"}`))
	f.Add([]byte(`{"issuer":"i","user":"u","epoch":1,"alloc":"a","addr":"h:1","since":"0001-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"issuer":1}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`[{"issuer":"i"}]`))
	f.Add([]byte(`{"epoch":9223372036854775808}`))
	f.Add([]byte("\xff\xfe{"))
	f.Add([]byte(``))
	f.Fuzz(func(t *testing.T, in []byte) {
		e, err := decodeEntry(in)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("untyped error %v", err)
			}
			if e != (registry.Entry{}) {
				t.Fatalf("entry %+v returned with error %v", e, err)
			}
			return
		}
		if err := validateEntry(e); err != nil {
			t.Fatalf("decoded an invalid entry %+v: %v", e, err)
		}
		b, err := encodeEntry(e)
		if err != nil {
			t.Fatalf("re-encode %+v: %v", e, err)
		}
		again, err := decodeEntry(b)
		if err != nil || !again.Since.Equal(e.Since) {
			t.Fatalf("round trip of %+v: %+v, %v", e, again, err)
		}
		again.Since, e.Since = time.Time{}, time.Time{}
		if again != e {
			t.Fatalf("round trip of %+v: %+v", e, again)
		}
	})
}

func FuzzDecodeWarm(f *testing.F) {
	f.Add([]byte(`{"region":"r1","alloc":"a","addr":"h:1","key":"k"}`))
	f.Add([]byte(`{"region":"r/1","alloc":"a","addr":"h:1","key":"k"}`))
	f.Add([]byte(`{"region":"r1"} {}`))
	f.Add([]byte(`null`))
	f.Add([]byte(`{"region":"r1","alloc":"a","addr":"h:1","key":"k","extra":1}`))
	f.Add([]byte(`{"region":"r1","alloc":"` + strings.Repeat("a", 129) + `","addr":"h:1","key":"k"}`))
	f.Add([]byte(`{"region":"r1","alloc":"a","addr":"","key":""}`))
	f.Add([]byte("{\"region\":\"r\u0000\",\"alloc\":\"a\",\"addr\":\"h:1\",\"key\":\"k\"}"))
	f.Fuzz(func(t *testing.T, in []byte) {
		w, err := decodeWarm(in)
		if err != nil {
			if !errors.Is(err, ErrBadEntry) {
				t.Fatalf("untyped error %v", err)
			}
			if w != (registry.Warm{}) {
				t.Fatalf("warm runner %+v returned with error %v", w, err)
			}
			return
		}
		if validateWarm(w) != nil {
			t.Fatalf("accepted invalid %+v", w)
		}
	})
}
