package sessionlist

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/wire"
)

const (
	sessA = "11111111-1111-4111-8111-111111111111"
	sessB = "22222222-2222-4222-8222-222222222222"
)

func writeTranscript(t *testing.T, home, slug, id string, lines ...string) string {
	t.Helper()
	dir := filepath.Join(home, ".claude", "projects", slug)
	if err := os.MkdirAll(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, id+".jsonl")
	f, err := os.OpenFile(p, os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, l := range lines {
		if _, err := f.WriteString(l); err != nil {
			t.Fatal(err)
		}
	}
	return p
}

// The listing reads what transcripts say, counts a model answer once however many lines carry it, skips
// lines too long or malformed, and on the next listing reads only what was appended.
func TestSessionIndexScansIncrementally(t *testing.T) {
	home := t.TempDir()
	x := &Index{home: home, prices: billing.DefaultPrices(), scans: map[string]*transcriptScan{}}
	long := `{"type":"user","message":{"content":"` + strings.Repeat("x", maxTranscriptLine) + `"},"timestamp":"2026-01-01T00:00:00Z"}` + "\n"
	p := writeTranscript(t, home, "-workspace", sessA,
		long,
		"not json\n",
		`{"type":"user","isMeta":true,"message":{"content":"meta"},"timestamp":"2026-01-02T00:00:00Z"}`+"\n",
		`{"type":"user","message":{"content":[{"type":"text","text":"hello there"}]},"timestamp":"2026-01-02T00:00:01Z"}`+"\n",
		`{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","usage":{"input_tokens":1000000,"output_tokens":0}},"timestamp":"2026-01-02T00:00:02Z"}`+"\n",
		`{"type":"assistant","message":{"id":"m1","model":"claude-sonnet-4-5","usage":{"input_tokens":1000000,"output_tokens":0}},"timestamp":"2026-01-02T00:00:03Z"}`+"\n",
		`{"type":"assistant","message":{"id":"m2","model":"claude-sonnet-4-5","usage":{"input_tokens":-5000000,"output_tokens":-1}},"timestamp":"2026-01-02T00:00:03Z"}`+"\n",
		`{"type":"user","message":{"content":"partial`)
	list, err := x.list(nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(list) != 1 {
		t.Fatalf("list %+v", list)
	}
	s := list[0]
	if s.ID != sessA || s.FirstPrompt != "hello there" || s.Created != "2026-01-02T00:00:00Z" || s.LastTurn != "2026-01-02T00:00:03Z" || s.CostMicros != 3_000_000 {
		t.Fatalf("summary %+v", s)
	}
	fi, _ := os.Stat(p)
	sc := x.scans["projects/-workspace/"+sessA+".jsonl"]
	if sc.off != fi.Size()-int64(len(`{"type":"user","message":{"content":"partial`)) {
		t.Fatalf("scanned to %d of %d: the incomplete last line must wait", sc.off, fi.Size())
	}
	// The last line completes and a summary arrives: only the new bytes are read (the file's start is
	// overwritten with garbage, which a full rescan would choke on).
	writeTranscript(t, home, "-workspace", sessA, `"},"timestamp":"2026-01-03T00:00:00Z"}`+"\n", `{"type":"summary","summary":"A title"}`+"\n")
	f, err := os.OpenFile(p, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte("{garbage"), 0); err != nil {
		t.Fatal(err)
	}
	f.Close()
	list, _ = x.list(nil)
	if s := list[0]; s.Title != "A title" || s.LastTurn != "2026-01-03T00:00:00Z" || s.FirstPrompt != "hello there" || s.CostMicros != 3_000_000 {
		t.Fatalf("after the append: %+v", s)
	}
}

// A transcript that is a symlink, or a projects entry leading out of the home, is neither listed nor
// deleted through.
func TestSessionIndexStaysInTheHome(t *testing.T) {
	home, outside := t.TempDir(), t.TempDir()
	x := &Index{home: home, prices: billing.DefaultPrices(), scans: map[string]*transcriptScan{}}
	target := writeTranscript(t, outside, "x", sessB, `{"type":"user","message":{"content":"secret"},"timestamp":"2026-01-01T00:00:00Z"}`+"\n")
	writeTranscript(t, home, "-workspace", sessA, `{"type":"user","message":{"content":"mine"},"timestamp":"2026-01-01T00:00:00Z"}`+"\n")
	if err := os.Symlink(target, filepath.Join(home, ".claude", "projects", "-workspace", sessB+".jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(filepath.Dir(target), filepath.Join(home, ".claude", "projects", "escape")); err != nil {
		t.Fatal(err)
	}
	list, err := x.list(nil)
	if err != nil || len(list) != 1 || list[0].ID != sessA {
		t.Fatalf("list %+v, %v", list, err)
	}
	if err := x.remove(nil, sessB); err == nil {
		t.Fatal("deleted through a symlink")
	}
	if _, err := os.Stat(target); err != nil {
		t.Fatalf("the file outside the home: %v", err)
	}
	if err := x.remove(nil, "../../x"); err == nil {
		t.Fatal("removed a path")
	}
	if err := x.remove(nil, sessA); err != nil {
		t.Fatal(err)
	}
	if list, _ := x.list(nil); len(list) != 0 {
		t.Fatalf("after delete %+v", list)
	}
}

// The agent's .claude replaced by a symlink to another directory of the host (another user's home on the
// same node): the listing shows nothing of it and a delete removes nothing there.
func TestSessionIndexClaudeSymlinkLeadsNowhere(t *testing.T) {
	home, other := t.TempDir(), t.TempDir()
	x := &Index{home: home, prices: billing.DefaultPrices(), scans: map[string]*transcriptScan{}}
	victim := writeTranscript(t, other, "-workspace", sessB, `{"type":"user","message":{"content":"someone else's secret"},"timestamp":"2026-01-01T00:00:00Z"}`+"\n")
	if err := os.Symlink(filepath.Join(other, ".claude"), filepath.Join(home, ".claude")); err != nil {
		t.Fatal(err)
	}
	list, err := x.list(nil)
	if len(list) != 0 {
		t.Fatalf("listed another home's sessions: %+v", list)
	}
	if wire.CodeOf(err) != wire.PermissionDenied {
		t.Fatalf("list: %v (want permission_denied)", err)
	}
	if err := x.remove(nil, sessB); wire.CodeOf(err) != wire.PermissionDenied {
		t.Fatalf("remove: %v (want permission_denied)", err)
	}
	if _, err := os.Stat(victim); err != nil {
		t.Fatalf("the other home's transcript: %v", err)
	}
}

// FuzzTranscriptLine: whatever the agent (or a tenant's command running as it) writes into a transcript,
// a line never panics, never makes the cost negative, and keeps the summary bounded.
func FuzzTranscriptLine(f *testing.F) {
	f.Add([]byte(`{"type":"assistant","message":{"id":"m","model":"claude-opus-4","usage":{"input_tokens":9223372036854775807,"output_tokens":9223372036854775807,"cache_read_input_tokens":9223372036854775807,"cache_creation_input_tokens":9223372036854775807}}}`))
	f.Add([]byte(`{"type":"user","message":{"content":[{"type":"text","text":"hi \xff"}]},"timestamp":"2026-01-01T00:00:00Z"}`))
	f.Add([]byte(`{"type":"summary","summary":"t"}`))
	prices := billing.DefaultPrices()
	f.Fuzz(func(t *testing.T, b []byte) {
		sc := &transcriptScan{counted: map[string]bool{}}
		for range 3 {
			sc.line(b, prices)
		}
		if sc.info.CostMicros < 0 || len(sc.info.FirstPrompt) > 256 || len(sc.info.Title) > 256 {
			t.Fatalf("summary %+v", sc.info)
		}
	})
}
