package mesh

import (
	"bytes"
	"errors"
	"io"
	"strings"
	"testing"
)

func TestHeaderRoundTrip(t *testing.T) {
	for _, h := range []Header{
		{Kind: KindWebSocket},
		{Kind: KindRequests},
		{Kind: KindHTTP, RequestID: "req-1", Issuer: "acme", User: "user-42", Epoch: 7},
		{Kind: KindWebSocket, RequestID: strings.Repeat("r", MaxFieldLen), Issuer: "é ü 日本", User: strings.Repeat("u", MaxFieldLen), Epoch: ^uint64(0)},
	} {
		b, err := AppendHeader([]byte("prefix"), h)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if len(b)-len("prefix") > MaxHeaderLen {
			t.Fatalf("%d bytes, more than MaxHeaderLen %d", len(b)-len("prefix"), MaxHeaderLen)
		}
		r := bytes.NewReader(append(b[len("prefix"):], "data"...))
		got, err := ReadHeader(r)
		if err != nil {
			t.Fatalf("%+v: %v", h, err)
		}
		if got != h {
			t.Fatalf("read %+v, wrote %+v", got, h)
		}
		if rest, _ := io.ReadAll(r); string(rest) != "data" {
			t.Fatalf("ReadHeader read past the header: %q left", rest)
		}
	}
}

func TestHeaderRefused(t *testing.T) {
	good, _ := AppendHeader(nil, Header{Kind: KindHTTP, User: "u"})
	for _, c := range []struct {
		name string
		h    Header
		want error
	}{
		{"no kind", Header{}, ErrKind},
		{"unknown kind", Header{Kind: "tcp"}, ErrKind},
		{"long field", Header{Kind: KindHTTP, User: strings.Repeat("u", MaxFieldLen+1)}, ErrHeader},
		{"control character", Header{Kind: KindHTTP, Issuer: "a\nb"}, ErrHeader},
		{"not UTF-8", Header{Kind: KindHTTP, RequestID: "\xff"}, ErrHeader},
	} {
		if _, err := AppendHeader(nil, c.h); !errors.Is(err, c.want) {
			t.Errorf("%s: AppendHeader: %v, want %v", c.name, err, c.want)
		}
	}
	for _, c := range []struct {
		name string
		b    []byte
		want error
	}{
		{"empty", nil, ErrHeader},
		{"version 0", append([]byte{0}, good[1:]...), ErrVersion},
		{"version 2", append([]byte{2}, good[1:]...), ErrVersion},
		{"kind 0", append([]byte{1, 0}, good[2:]...), ErrKind},
		{"kind 9", append([]byte{1, 9}, good[2:]...), ErrKind},
		{"truncated", good[:len(good)-1], ErrHeader},
		{"control character", []byte{1, 1, 1, 0x7f, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}, ErrHeader},
	} {
		if _, err := ReadHeader(bytes.NewReader(c.b)); !errors.Is(err, c.want) {
			t.Errorf("%s: ReadHeader: %v, want %v", c.name, err, c.want)
		}
	}
}

// FuzzHeader feeds arbitrary bytes to ReadHeader: it must never panic nor read more than MaxHeaderLen bytes,
// every error must wrap ErrHeader, ErrVersion or ErrKind, and every header it accepts must be valid and
// encode back to exactly the bytes it read.
func FuzzHeader(f *testing.F) {
	for _, h := range []Header{
		{Kind: KindWebSocket},
		{Kind: KindHTTP, RequestID: "req-1", Issuer: "acme", User: "user-42", Epoch: 7},
		{Kind: KindWebSocket, Issuer: "日本", Epoch: 1 << 63},
	} {
		b, err := AppendHeader(nil, h)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
		f.Add(append(b, "trailing stream data"...))
		f.Add(b[:len(b)/2])
	}
	f.Add([]byte{})
	f.Add([]byte{2, 1})
	f.Add([]byte{1, 3, 255})
	f.Fuzz(func(t *testing.T, data []byte) {
		r := bytes.NewReader(data)
		h, err := ReadHeader(r)
		read := len(data) - r.Len()
		if read > MaxHeaderLen {
			t.Fatalf("read %d bytes, more than MaxHeaderLen", read)
		}
		if err != nil {
			if !errors.Is(err, ErrHeader) && !errors.Is(err, ErrVersion) && !errors.Is(err, ErrKind) {
				t.Fatalf("untyped error %v", err)
			}
			return
		}
		if err := h.Validate(); err != nil {
			t.Fatalf("accepted an invalid header %+v: %v", h, err)
		}
		b, err := AppendHeader(nil, h)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(b, data[:read]) {
			t.Fatalf("%+v encodes to %x, read from %x", h, b, data[:read])
		}
	})
}
