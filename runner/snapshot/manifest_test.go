package snapshot_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"path"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/internal/regions"
	"github.com/warren-mesh/warren/runner/snapshot"
)

const validManifest = `{"version":1,"epoch":3,"seq":2,"time":"2025-06-01T12:00:00.5Z","dirs":[
 {"name":"home","entries":[]},
 {"name":"workspace","entries":[
  {"path":".git","type":"dir","mode":493},
  {"path":".git/HEAD","type":"file","mode":420,"size":21,"sha256":"` + sha64 + `","mtime":1700000000000000000},
  {"path":"empty","type":"file","mode":384,"sha256":"e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855"},
  {"path":"link","type":"symlink","target":"/etc/passwd"},
  {"path":"ünï","type":"dir","mode":448}]}]}`

// withRegion is validManifest recording region (raw JSON).
func withRegion(region string) string {
	return strings.Replace(validManifest, `"seq":2,`, `"seq":2,"region":`+region+`,`, 1)
}

const sha64 = "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef"

func TestParseManifest(t *testing.T) {
	m, err := snapshot.ParseManifest([]byte(validManifest))
	if err != nil {
		t.Fatal(err)
	}
	if m, err := snapshot.ParseManifest([]byte(withRegion(`"eu-west-1"`))); err != nil || m.Region != "eu-west-1" {
		t.Fatalf("manifest of region eu-west-1: %q, %v", m.Region, err)
	}
	if m.Epoch != 3 || m.Seq != 2 || len(m.Dirs) != 2 || len(m.Dirs[1].Entries) != 5 || m.Dirs[1].Entries[3].Target != "/etc/passwd" {
		t.Fatalf("parsed %+v", m)
	}

	bad := map[string]string{
		"not json":          `{`,
		"no version":        `{"epoch":1,"seq":1,"dirs":[]}`,
		"version 2":         strings.Replace(validManifest, `"version":1`, `"version":2`, 1),
		"version 0":         strings.Replace(validManifest, `"version":1`, `"version":0`, 1),
		"version string":    strings.Replace(validManifest, `"version":1`, `"version":"1"`, 1),
		"unknown field":     strings.Replace(validManifest, `"seq":2`, `"seq":2,"extra":true`, 1),
		"trailing data":     validManifest + `{}`,
		"negative epoch":    strings.Replace(validManifest, `"epoch":3`, `"epoch":-1`, 1),
		"seq 0":             strings.Replace(validManifest, `"seq":2`, `"seq":0`, 1),
		"dir name slash":    strings.Replace(validManifest, `"name":"home"`, `"name":"a/b"`, 1),
		"dir name dotdot":   strings.Replace(validManifest, `"name":"home"`, `"name":".."`, 1),
		"duplicate dir":     strings.Replace(validManifest, `"name":"home"`, `"name":"workspace"`, 1),
		"dotdot path":       strings.Replace(validManifest, `"path":"link"`, `"path":"../link"`, 1),
		"absolute path":     strings.Replace(validManifest, `"path":"link"`, `"path":"/link"`, 1),
		"backslash escape":  strings.Replace(validManifest, `"path":"link"`, `"path":"a/..\/..\/link"`, 1),
		"nul path":          strings.Replace(validManifest, `"path":"link"`, `"path":"li\u0000nk"`, 1),
		"invalid utf-8":     strings.Replace(validManifest, `"path":"link"`, "\"path\":\"li\xffnk\"", 1),
		"trailing slash":    strings.Replace(validManifest, `"path":"link"`, `"path":"link/"`, 1),
		"under symlink":     strings.Replace(validManifest, `"path":"empty"`, `"path":"link/empty"`, 1),
		"under file":        strings.Replace(validManifest, `"path":"empty"`, `"path":".git/HEAD/empty"`, 1),
		"short sha":         strings.Replace(validManifest, sha64, sha64[:63], 1),
		"uppercase sha":     strings.Replace(validManifest, sha64, strings.ToUpper(sha64), 1),
		"negative size":     strings.Replace(validManifest, `"size":21`, `"size":-21`, 1),
		"sticky dir":        strings.Replace(validManifest, `"mode":493`, `"mode":1517`, 1),
		"symlink with mode": strings.Replace(validManifest, `"type":"symlink"`, `"type":"symlink","mode":511`, 1),
		"dir with sha":      strings.Replace(validManifest, `"mode":448`, `"mode":448,"sha256":"`+sha64+`"`, 1),
		"unknown type":      strings.Replace(validManifest, `"type":"symlink","target":"/etc/passwd"`, `"type":"fifo"`, 1),
		"empty target":      strings.Replace(validManifest, `"target":"/etc/passwd"`, `"target":""`, 1),
		"long path":         strings.Replace(validManifest, `"path":"link"`, `"path":"`+strings.Repeat("a", 256)+`"`, 1),
		"region uppercase":  withRegion(`"EU"`),
		"region too long":   withRegion(`"` + strings.Repeat("a", 33) + `"`),
		"region dash":       withRegion(`"eu-"`),
		"region slash":      withRegion(`"eu/1"`),
		"region number":     withRegion(`1`),
	}
	for name, data := range bad {
		if _, err := snapshot.ParseManifest([]byte(data)); !errors.Is(err, snapshot.ErrCorrupt) {
			t.Errorf("%s: ParseManifest = %v, want ErrCorrupt", name, err)
		}
	}
}

// FuzzParseManifest: ParseManifest never panics, fails only with ErrCorrupt, and whatever it accepts is
// safe to restore (paths local, parents directories) and survives a round trip unchanged.
func FuzzParseManifest(f *testing.F) {
	f.Add([]byte(validManifest))
	f.Add([]byte(`{"version":1,"epoch":0,"seq":1,"time":"0001-01-01T00:00:00Z","dirs":[]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"time":"2025-01-01T00:00:00Z","dirs":[{"name":"w","entries":[{"path":"a","type":"dir"},{"path":"a/b","type":"symlink","target":"../.."}]}]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"time":"2025-01-01T00:00:00Z","dirs":[{"name":"w","entries":[{"path":"../a","type":"dir"}]}]}`))
	f.Add([]byte(withRegion(`"eu-west-1"`)))
	f.Add([]byte(withRegion(`"-"`)))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"region":"a","time":"2025-01-01T00:00:00Z","dirs":[]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"time":"2025-01-01T00:00:00.5+02:00","dirs":[{"name":"w","entries":[{"path":"q\"b\\c<>&\u2028\u0001\u007fé😀","type":"symlink","target":"\t/x\u2029"}]}]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"time":"2025-01-01T00:00:00Z","dirs":[{"name":"w","entries":[{"path":"a\\b","type":"dir"},{"path":"a<b>&c","type":"dir"}]}]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"time":"2025-01-01T00:00:00Z","dirs":[{"name":"w","entries":null}]}`))
	f.Add([]byte(`{"version":1,"epoch":1,"seq":1,"time":"2025-01-01T00:00:00Z","dirs":null}`))
	f.Add([]byte(`{"version":2}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		m, err := snapshot.ParseManifest(data)
		if err != nil {
			if !errors.Is(err, snapshot.ErrCorrupt) {
				t.Fatalf("error %v is not ErrCorrupt", err)
			}
			return
		}
		if m.Region != "" && !regions.ValidRegion(m.Region) {
			t.Fatalf("accepted region %q", m.Region)
		}
		for _, d := range m.Dirs {
			types := map[string]snapshot.EntryType{}
			for _, e := range d.Entries {
				types[e.Path] = e.Type
			}
			for _, e := range d.Entries {
				if !filepath.IsLocal(e.Path) || e.Path != path.Clean(e.Path) || strings.Contains(e.Path, "\x00") {
					t.Fatalf("accepted path %q", e.Path)
				}
				if parent := path.Dir(e.Path); parent != "." && types[parent] != snapshot.TypeDir {
					t.Fatalf("accepted %q whose parent is %q", e.Path, types[parent])
				}
				if e.Mode&^0o777 != 0 {
					t.Fatalf("accepted mode %o", e.Mode)
				}
			}
		}
		out, err := m.Marshal()
		if err != nil {
			t.Fatalf("marshal an accepted manifest: %v", err)
		}
		var ref bytes.Buffer
		enc := json.NewEncoder(&ref)
		enc.SetEscapeHTML(false)
		if err := enc.Encode(m); err != nil || !bytes.Equal(out, ref.Bytes()) {
			t.Fatalf("Marshal differs from encoding/json (%v):\n%s\n%s", err, out, ref.Bytes())
		}
		m2, err := snapshot.ParseManifest(out)
		if err != nil {
			t.Fatalf("reparse: %v\n%s", err, out)
		}
		out2, err := m2.Marshal()
		if err != nil || !bytes.Equal(out, out2) {
			t.Fatalf("round trip changed the manifest:\n%s\n%s", out, out2)
		}
	})
}
