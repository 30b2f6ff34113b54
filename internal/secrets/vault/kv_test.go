package vault

import (
	"bytes"
	"encoding/json"
	"errors"
	"testing"
	"time"
)

func decodeJSON(b []byte) (map[string]any, error) {
	var m map[string]any
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.UseNumber() // as the Vault client decodes
	err := dec.Decode(&m)
	return m, err
}

const sampleMetadata = `{"cas_required":false,"created_time":"2026-03-01T10:00:00.1Z","current_version":3,
"custom_metadata":null,"delete_version_after":"0s","max_versions":0,"oldest_version":0,
"updated_time":"2026-03-02T10:00:00Z","versions":{
"1":{"created_time":"2026-03-01T10:00:00.1Z","deletion_time":"","destroyed":false},
"2":{"created_time":"2026-03-01T11:00:00Z","deletion_time":"2026-03-01T12:00:00Z","destroyed":false},
"3":{"created_time":"2026-03-02T10:00:00Z","deletion_time":"","destroyed":true}}}`

func TestParseMetadata(t *testing.T) {
	m, err := decodeJSON([]byte(sampleMetadata))
	if err != nil {
		t.Fatal(err)
	}
	md, err := parseMetadata(m)
	if err != nil {
		t.Fatal(err)
	}
	if md.current != 3 || len(md.versions) != 3 || md.versions[0].n != 3 || md.versions[2].n != 1 {
		t.Fatalf("metadata %+v", md)
	}
	now := time.Date(2026, 3, 3, 0, 0, 0, 0, time.UTC)
	for i, want := range []bool{false, false, true} { // destroyed, deleted, live
		if got := md.versions[i].live(now); got != want {
			t.Errorf("version %d live = %v, want %v", md.versions[i].n, got, want)
		}
	}
	// A deletion scheduled in the future (delete_version_after) leaves the version readable until then.
	if !md.versions[1].live(time.Date(2026, 3, 1, 11, 30, 0, 0, time.UTC)) {
		t.Error("version 2 before its deletion time is not live")
	}
	for _, bad := range []string{
		`{}`,
		`{"current_version":"3","versions":{}}`,
		`{"current_version":1.5,"versions":{}}`,
		`{"current_version":-1,"versions":{}}`,
		`{"current_version":1,"versions":[]}`,
		`{"current_version":1,"versions":{"x":{}}}`,
		`{"current_version":1,"versions":{"01":{"created_time":"2026-03-01T10:00:00Z"}}}`,
		`{"current_version":1,"versions":{"1":{}}}`,
		`{"current_version":1,"versions":{"1":{"created_time":"yesterday"}}}`,
		`{"current_version":1,"versions":{"1":{"created_time":"2026-03-01T10:00:00Z","destroyed":"no"}}}`,
		`{"current_version":1,"versions":{"2":{"created_time":"2026-03-01T10:00:00Z"}}}`,
		`{"current_version":1,"versions":{"1":[]}}`,
	} {
		m, err := decodeJSON([]byte(bad))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := parseMetadata(m); err == nil {
			t.Errorf("parseMetadata(%s) accepted", bad)
		}
	}
}

func TestStringField(t *testing.T) {
	for _, tt := range []struct {
		in        string
		want      string
		found     bool
		malformed bool
		bad       bool
	}{
		{in: `{"data":{"secret":"abc"},"metadata":{}}`, want: "abc", found: true},
		{in: `{"data":null,"metadata":{"deletion_time":"2026-03-01T10:00:00Z"}}`},
		{in: `{"data":{"other":"abc"}}`, malformed: true, bad: true},
		{in: `{"data":{"secret":""}}`, malformed: true, bad: true},
		{in: `{"data":{"secret":5}}`, malformed: true, bad: true},
		{in: `{"data":"x"}`, bad: true},
		{in: `{"metadata":{}}`, bad: true},
	} {
		m, err := decodeJSON([]byte(tt.in))
		if err != nil {
			t.Fatal(err)
		}
		got, found, err := stringField(m, "secret")
		if (err != nil) != tt.bad || errors.Is(err, ErrMalformed) != tt.malformed || got != tt.want || found != tt.found {
			t.Errorf("stringField(%s) = %q, %v, %v", tt.in, got, found, err)
		}
	}
}

// FuzzParseMetadata feeds arbitrary JSON as a metadata answer: parseMetadata must not panic, and what it
// accepts is ordered newest first with unique positive versions no greater than current_version.
func FuzzParseMetadata(f *testing.F) {
	f.Add([]byte(sampleMetadata))
	f.Add([]byte(`{"current_version":1,"versions":{"1":{"created_time":"2026-03-01T10:00:00Z"}}}`))
	f.Add([]byte(`{"current_version":9007199254740993,"versions":{"9007199254740993":{}}}`))
	f.Add([]byte(`{"data":{"secret":"c2VjcmV0"},"metadata":{"version":1}}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := decodeJSON(b)
		if err != nil {
			return
		}
		_, _, _ = stringField(m, "secret")
		md, err := parseMetadata(m)
		if err != nil {
			return
		}
		for i, v := range md.versions {
			if v.n <= 0 || v.n > md.current || (i > 0 && v.n >= md.versions[i-1].n) || v.created.IsZero() {
				t.Fatalf("accepted metadata with versions %+v (current %d)", md.versions, md.current)
			}
		}
	})
}
