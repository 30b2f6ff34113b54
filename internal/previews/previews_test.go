package previews

import (
	"strconv"
	"strings"
	"testing"
	"time"
)

func sample() Preview {
	return Preview{ID: NewID(), Issuer: "acme", User: "alice", Port: 8000, Expires: time.Unix(2000000000, 0)}
}

func TestTokenRoundTrip(t *testing.T) {
	key, p := NewKey(), sample()
	tok := Token(key, p)
	if len(tok) > MaxTokenLen || len(tok) > 63 {
		t.Fatalf("token %q is %d long", tok, len(tok))
	}
	got, ok := ParseToken(tok)
	if !ok || got.Port != 8000 || got.ID != p.ID || !Verify(key, p, got) {
		t.Fatalf("parse %q: %+v %v", tok, got, ok)
	}
}

// A token signs the stored preview: changing any signed field, the key or the signature fails it.
func TestForgedTokensFail(t *testing.T) {
	key, p := NewKey(), sample()
	good, _ := ParseToken(Token(key, p))
	changes := map[string]func(*Preview){
		"port":    func(q *Preview) { q.Port = 8001 },
		"issuer":  func(q *Preview) { q.Issuer = "other" },
		"user":    func(q *Preview) { q.User = "mallory" },
		"expires": func(q *Preview) { q.Expires = q.Expires.Add(time.Second) },
		"public":  func(q *Preview) { q.Public = true },
		"id":      func(q *Preview) { q.ID = NewID() },
	}
	for name, change := range changes {
		q := p
		change(&q)
		if Verify(key, q, good) {
			t.Errorf("token verified against a preview with another %s", name)
		}
		forged, _ := ParseToken(Token(key, q))
		if Verify(key, p, forged) {
			t.Errorf("token of a preview with another %s verified", name)
		}
	}
	if Verify(NewKey(), p, good) {
		t.Error("token verified under another key")
	}
	bad := good
	bad.Sig = strings.Repeat("a", sigLen)
	if Verify(key, p, bad) {
		t.Error("made-up signature verified")
	}
	// The user and issuer are length-prefixed: moving a character across the boundary changes the MAC.
	q := p
	q.Issuer, q.User = "acmea", "lice"
	if Verify(key, q, good) {
		t.Error("issuer/user boundary is not signed")
	}
}

func TestParseTokenRefuses(t *testing.T) {
	id, sg := strings.Repeat("a", idLen), strings.Repeat("b", sigLen)
	for _, s := range []string{
		"", "8000", "8000-" + id, "0-" + id + "-" + sg, "65536-" + id + "-" + sg, "08000-" + id + "-" + sg,
		"+80-" + id + "-" + sg, "80-" + strings.ToUpper(id) + "-" + sg, "80-" + id + "-" + sg + "a",
		"80-" + id[1:] + "-" + sg, "80-" + id + "-" + sg[1:] + "1", "80-" + id + "-" + sg + "-x", "999999-" + id + "-" + sg,
	} {
		if p, ok := ParseToken(s); ok {
			t.Errorf("ParseToken(%q) = %+v", s, p)
		}
	}
	if p, ok := ParseToken("65535-" + id + "-" + sg); !ok || p.Port != 65535 {
		t.Fatalf("65535: %+v %v", p, ok)
	}
}

func TestParseHost(t *testing.T) {
	key, p := NewKey(), sample()
	tok := Token(key, p)
	for host, want := range map[string]bool{
		tok + ".preview.example.com":                  true,
		strings.ToUpper(tok) + ".Preview.Example.COM": true,
		tok + ".preview.example.com:8443":             true,
		tok + ".preview.example.com.":                 true,
		"preview.example.com":                         false,
		"x." + tok + ".preview.example.com":           false,
		tok + ".preview.example.com.evil.org":         false,
		tok + "preview.example.com":                   false,
		tok + ".example.com":                          false,
		"8000-nope-nope.preview.example.com":          false,
	} {
		got, ok := ParseHost(host, "preview.example.com")
		if ok != want || ok && got != tok {
			t.Errorf("ParseHost(%q) = %q, %v; want %v", host, got, ok, want)
		}
	}
	if _, ok := ParseHost(tok+".preview.example.com", ""); ok {
		t.Error("a host parsed without a domain")
	}
}

func TestCookie(t *testing.T) {
	key, p := NewKey(), sample()
	now := time.Unix(1900000000, 0)
	v := CookieValue(key, p, now.Add(time.Hour))
	if !CheckCookie(key, p, v, now) {
		t.Fatal("fresh cookie refused")
	}
	if CheckCookie(key, p, v, now.Add(time.Hour)) {
		t.Error("expired cookie accepted")
	}
	other := p
	other.ID = NewID()
	if CheckCookie(key, other, v, now) {
		t.Error("cookie of one preview opened another")
	}
	e, m, _ := strings.Cut(v, ".")
	if CheckCookie(key, p, e+"0."+m, now) || CheckCookie(NewKey(), p, v, now) || CheckCookie(key, p, "x", now) {
		t.Error("forged cookie accepted")
	}
}

func FuzzParseToken(f *testing.F) {
	key := NewKey()
	f.Add(Token(key, sample()))
	f.Add("1-aaaaaaaaaaaaaaaa-bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb")
	f.Add("0-x-y")
	f.Fuzz(func(t *testing.T, s string) {
		p, ok := ParseToken(s)
		if !ok {
			return
		}
		if p.Port < 1 || p.Port > 65535 || len(p.ID) != idLen || len(p.Sig) != sigLen || !isB32(p.ID) || !isB32(p.Sig) {
			t.Fatalf("ParseToken(%q) = %+v", s, p)
		}
		// A token that parses is exactly its parts: no other spelling of the same preview.
		if back := strings.Join([]string{strconv.Itoa(p.Port), p.ID, p.Sig}, "-"); back != s {
			t.Fatalf("ParseToken(%q) reassembles as %q", s, back)
		}
	})
}

func FuzzParseHost(f *testing.F) {
	tok := Token(NewKey(), sample())
	f.Add(tok+".preview.example.com:443", "preview.example.com")
	f.Add("a.b", "b")
	f.Fuzz(func(t *testing.T, host, domain string) {
		got, ok := ParseHost(host, domain)
		if !ok {
			return
		}
		if _, ok := ParseToken(got); !ok || strings.ContainsAny(got, ".:") {
			t.Fatalf("ParseHost(%q, %q) = %q", host, domain, got)
		}
	})
}

func FuzzCheckCookie(f *testing.F) {
	key, p := NewKey(), sample()
	now := time.Unix(1900000000, 0)
	f.Add(CookieValue(key, p, now.Add(time.Hour)))
	f.Add("1.2")
	f.Fuzz(func(t *testing.T, v string) {
		e, _, _ := strings.Cut(v, ".")
		exp, _ := strconv.ParseInt(e, 10, 64)
		if CheckCookie(key, p, v, now) && v != CookieValue(key, p, time.Unix(exp, 0)) {
			t.Fatalf("CheckCookie accepted %q", v)
		}
	})
}

func TestForwardingHeader(t *testing.T) {
	for _, h := range []string{"X-Forwarded-For", "x-forwarded-prefix", "X-FORWARDED-PROTO", "Forwarded", "Via",
		"X-Real-IP", "True-Client-IP", "CF-Connecting-IP", "Cf-Visitor", "X-Client-IP", "X-Cluster-Client-IP",
		"Fastly-Client-IP", "X-Original-Forwarded-For", "X-Original-URL", "X-Host"} {
		if !ForwardingHeader(h) {
			t.Errorf("%s is not a forwarding header", h)
		}
	}
	for _, h := range []string{"Content-Type", "Cookie", "User-Agent", "Referer", "Accept", "X-Requested-With", "Origin", "Host"} {
		if ForwardingHeader(h) {
			t.Errorf("%s is taken for a forwarding header", h)
		}
	}
}
