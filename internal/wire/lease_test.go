package wire

import (
	"encoding/json"
	"strings"
	"testing"
	"time"
)

func TestDecodeLease(t *testing.T) {
	until := time.Date(2030, 1, 2, 3, 4, 5, 6, time.UTC)
	b, _ := json.Marshal(Lease{Epoch: 7, Until: until})
	l, err := DecodeLease(b)
	if err != nil || l.Epoch != 7 || !l.Until.Equal(until) {
		t.Fatalf("DecodeLease(%s) = %+v, %v", b, l, err)
	}
	for _, bad := range []string{
		``, `{}`, `{"epoch":0,"until":"2030-01-01T00:00:00Z"}`, `{"epoch":1}`, `{"epoch":-1,"until":"2030-01-01T00:00:00Z"}`,
		`{"epoch":1,"until":"2030-01-01T00:00:00Z","x":1}`, `{"epoch":1,"until":"2030-01-01T00:00:00Z"} {}`,
		`{"epoch":"1","until":"2030-01-01T00:00:00Z"}`, `[]`, `{"epoch":1,"until":"yesterday"}`,
		`{"epoch":1,"until":"2030-01-01T00:00:00Z","pad":"` + strings.Repeat("x", MaxLeaseBody) + `"}`,
	} {
		if _, err := DecodeLease([]byte(bad)); err == nil {
			t.Errorf("DecodeLease(%.60q) accepted", bad)
		} else if c := CodeOf(err); c != InvalidArgument && c != PayloadTooLarge {
			t.Errorf("DecodeLease(%.60q): code %s", bad, c)
		}
	}
}

func FuzzDecodeLease(f *testing.F) {
	f.Add([]byte(`{"epoch":3,"until":"2030-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"epoch":1,"until":"2030-01-01T00:00:00.123456789+02:00"}`))
	f.Add([]byte(`{"epoch":9223372036854775807,"until":"0001-01-01T00:00:01Z"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := DecodeLease(b)
		if err != nil {
			if c := CodeOf(err); c != InvalidArgument && c != PayloadTooLarge {
				t.Fatalf("code %s for %q", c, b)
			}
			return
		}
		if l.Epoch <= 0 || l.Until.IsZero() {
			t.Fatalf("accepted %+v from %q", l, b)
		}
		again, err := json.Marshal(l)
		if err != nil {
			return // a time JSON cannot encode (year outside [0,9999]) was accepted from its text form
		}
		if l2, err := DecodeLease(again); err != nil || l2.Epoch != l.Epoch || !l2.Until.Equal(l.Until) {
			t.Fatalf("round trip of %+v: %+v, %v", l, l2, err)
		}
	})
}
