// Package sessionlist is the session listing (docs/PROTOCOL.md#sessions): the user's conversations are
// the agent's transcripts, $HOME/.claude/projects/<cwd slug>/<session id>.jsonl under the agent's home,
// which the snapshots carry.
// Transcripts only grow, so each is scanned once and then from where the last scan stopped: a listing
// reads what was appended since the previous one, not whole transcripts. The agent writes the transcripts
// (and a tenant's commands run as the agent), so they are hostile input: lines are bounded, fields are
// checked, token counts are clamped, and the home is read through os.Root so no symlink leads out.
package sessionlist

import (
	"bufio"
	"cmp"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"net/http"
	"os"
	"path"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner/internal/text"
	"github.com/warren-mesh/warren/runner/internal/web"
	"github.com/warren-mesh/warren/runner/session"
)

const (
	// maxTranscriptLine bounds one transcript line the scan decodes; longer lines (large tool results)
	// are skipped.
	maxTranscriptLine = 1 << 20
	// maxTranscriptTokens clamps one model call's token counts, so a forged line cannot overflow a cost.
	maxTranscriptTokens = 1 << 30
	// maxCountedMessages bounds the message ids a scan remembers (the CLI writes one line per content block
	// of a model answer, all carrying the answer's usage: it is counted once).
	maxCountedMessages = 100_000
)

// Host is what the listing uses of the runner. Its methods may be called concurrently.
type Host interface {
	// Hub is the agent channel's hub of the running Run (whose sessions are live).
	Hub() *session.Hub
	// Snapshot starts a snapshot of the sandbox in the background, bounded by ctx (why is logged).
	Snapshot(ctx context.Context, why string)
}

// Config is what the listing is built with.
type Config struct {
	Host Host
	// Home is the agent's home ("" without an agent); Prices price the transcripts' model calls (zero:
	// billing.DefaultPrices).
	Home   string
	Prices billing.Prices
}

// Index lists and deletes the transcripts of the agent's home. Create it with New.
type Index struct {
	host   Host
	home   string // the agent's home; "" without an agent
	prices billing.Prices

	mu    sync.Mutex
	scans map[string]*transcriptScan // by path under home/.claude
}

// transcriptScan is what is known of one transcript, up to off.
type transcriptScan struct {
	size    int64
	modTime time.Time
	off     int64 // bytes scanned: always at a line end
	info    wire.SessionSummary
	counted map[string]bool
}

// New makes the listing.
func New(cfg Config) *Index {
	x := &Index{host: cfg.Host, home: cfg.Home, prices: cfg.Prices, scans: map[string]*transcriptScan{}}
	if x.prices.Models == nil && x.prices.Default == (billing.Price{}) {
		x.prices = billing.DefaultPrices()
	}
	return x
}

// transcript is one transcript file found under projects/.
type transcript struct {
	id, rel string // rel: under home/.claude
	fi      fs.FileInfo
}

// transcripts finds the transcripts, newest first, at most wire.MaxSessionList.
func (x *Index) transcripts(root *os.Root) []transcript {
	var out []transcript
	for _, slug := range readDirN(root, "projects") {
		if !slug.IsDir() {
			continue
		}
		dir := path.Join("projects", slug.Name())
		for _, e := range readDirN(root, dir) {
			id, ok := strings.CutSuffix(e.Name(), ".jsonl")
			if !ok || !session.ValidID(id) || !e.Type().IsRegular() {
				continue
			}
			fi, err := e.Info()
			if err != nil {
				continue
			}
			out = append(out, transcript{id: id, rel: path.Join(dir, e.Name()), fi: fi})
		}
	}
	slices.SortFunc(out, func(a, b transcript) int {
		return cmp.Or(b.fi.ModTime().Compare(a.fi.ModTime()), strings.Compare(a.id, b.id))
	})
	return out[:min(len(out), wire.MaxSessionList)]
}

// maxDirEntries bounds the entries read of one directory of the agent's home (the tenant can fill it).
const maxDirEntries = 4096

// readDirN reads at most maxDirEntries entries of dir under root, in no particular order.
func readDirN(root *os.Root, dir string) []fs.DirEntry {
	f, err := root.Open(dir)
	if err != nil {
		return nil
	}
	defer f.Close()
	ents, _ := f.ReadDir(maxDirEntries)
	return ents
}

// openClaude opens home/.claude as a root. The home is the runner's (its parent is not in the sandbox) but
// .claude is the agent's, and so the tenant's: it is opened through the home's root, which refuses a
// symlink leading out of the home (os.OpenRoot on the joined path would follow one to any host directory,
// another user's home included).
func (x *Index) openClaude() (*os.Root, error) {
	home, err := os.OpenRoot(x.home)
	if err != nil {
		return nil, err
	}
	defer home.Close()
	root, err := home.OpenRoot(".claude")
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, wire.Wrap(wire.PermissionDenied, err, "the agent's .claude is not a directory inside its home")
	}
	return root, err
}

// list describes the sessions, most recently active first.
func (x *Index) list(hub *session.Hub) ([]wire.SessionSummary, error) {
	out := []wire.SessionSummary{}
	if x.home == "" {
		return out, nil
	}
	root, err := x.openClaude()
	if errors.Is(err, fs.ErrNotExist) {
		return out, nil
	}
	if err != nil {
		return nil, fmt.Errorf("open the agent's home: %w", err)
	}
	defer root.Close()
	x.mu.Lock()
	defer x.mu.Unlock()
	seen := map[string]bool{}
	for _, t := range x.transcripts(root) {
		seen[t.rel] = true
		sc := x.scans[t.rel]
		if sc == nil || t.fi.Size() < sc.off || t.fi.ModTime().Before(sc.modTime) {
			sc = &transcriptScan{info: wire.SessionSummary{ID: t.id}, counted: map[string]bool{}}
			x.scans[t.rel] = sc
		}
		if t.fi.Size() != sc.size || !t.fi.ModTime().Equal(sc.modTime) {
			if err := sc.scan(root, t.rel, x.prices); err != nil {
				return nil, err
			}
			sc.size, sc.modTime = t.fi.Size(), t.fi.ModTime()
		}
		in := sc.info
		if in.LastTurn == "" {
			in.LastTurn = t.fi.ModTime().UTC().Format(time.RFC3339Nano)
		}
		in.Live = hub != nil && hub.Live(t.id)
		out = append(out, in)
	}
	for rel := range x.scans {
		if !seen[rel] {
			delete(x.scans, rel)
		}
	}
	return out, nil
}

// scan reads the transcript from sc.off to its last complete line.
func (sc *transcriptScan) scan(root *os.Root, rel string, prices billing.Prices) error {
	f, err := root.Open(rel)
	if errors.Is(err, fs.ErrNotExist) {
		return nil // deleted meanwhile
	}
	if err != nil {
		return fmt.Errorf("open transcript %s: %w", rel, err)
	}
	defer f.Close()
	if _, err := f.Seek(sc.off, io.SeekStart); err != nil {
		return fmt.Errorf("seek transcript %s: %w", rel, err)
	}
	br := bufio.NewReaderSize(f, 64<<10)
	var (
		line     []byte
		n        int64 // bytes of the current line so far
		skipping bool  // the current line is too long: read and dropped
	)
	for {
		chunk, err := br.ReadSlice('\n')
		n += int64(len(chunk))
		if !skipping {
			line = append(line, chunk...)
			if len(line) > maxTranscriptLine {
				skipping, line = true, line[:0]
			}
		}
		switch {
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case err != nil: // io.EOF: an incomplete last line is read again next time
			return nil
		}
		sc.off += n
		if !skipping {
			sc.line(line, prices)
		}
		line, n, skipping = line[:0], 0, false
	}
}

// transcriptLine is what the listing reads of a transcript entry.
type transcriptLine struct {
	Type        string `json:"type"`
	Timestamp   string `json:"timestamp"`
	Summary     string `json:"summary"`
	IsMeta      bool   `json:"isMeta"`
	IsSidechain bool   `json:"isSidechain"`
	Message     *struct {
		ID      string              `json:"id"`
		Model   string              `json:"model"`
		Content json.RawMessage     `json:"content"`
		Usage   *billing.TokenUsage `json:"usage"`
	} `json:"message"`
}

// line takes one transcript line into the session's summary. Lines that are not what they should be are
// ignored.
func (sc *transcriptScan) line(b []byte, prices billing.Prices) {
	var l transcriptLine
	if strictjson.Unmarshal(b, &l, strictjson.AllowInvalidUTF8) != nil {
		return
	}
	if ts, err := time.Parse(time.RFC3339Nano, l.Timestamp); err == nil && (l.Type == "user" || l.Type == "assistant") {
		at := ts.UTC().Format(time.RFC3339Nano)
		if sc.info.Created == "" {
			sc.info.Created = at
		}
		sc.info.LastTurn = at
	}
	switch {
	case l.Type == "summary" && l.Summary != "":
		sc.info.Title = clip(l.Summary)
	case l.Type == "user" && l.Message != nil && !l.IsMeta && !l.IsSidechain && sc.info.FirstPrompt == "":
		sc.info.FirstPrompt = clip(promptText(l.Message.Content))
	case l.Type == "assistant" && l.Message != nil && l.Message.Usage != nil && !sc.counted[l.Message.ID]:
		if l.Message.ID != "" && len(sc.counted) < maxCountedMessages {
			sc.counted[l.Message.ID] = true
		}
		u := *l.Message.Usage
		for _, n := range []*int64{&u.InputTokens, &u.OutputTokens, &u.CacheReadInputTokens, &u.CacheCreationInputTokens} {
			*n = min(max(*n, 0), maxTranscriptTokens)
		}
		sc.info.CostMicros = min(sc.info.CostMicros+prices.Lookup(l.Message.Model).Cost(u), 1<<62)
	}
}

// promptText is the text of a user message's content: a string, or the first text block.
func promptText(raw json.RawMessage) string {
	var s string
	if strictjson.Unmarshal(raw, &s, strictjson.AllowInvalidUTF8) == nil {
		return s
	}
	var blocks []struct {
		Type string `json:"type"`
		Text string `json:"text"`
	}
	if strictjson.Unmarshal(raw, &blocks, strictjson.AllowInvalidUTF8) == nil {
		for _, b := range blocks {
			if b.Type == "text" && b.Text != "" {
				return b.Text
			}
		}
	}
	return ""
}

// clip keeps at most wire.MaxSessionPrompt bytes of s as valid UTF-8, without splitting a character.
func clip(s string) string {
	return text.Truncate(strings.ToValidUTF8(s, "\uFFFD"), wire.MaxSessionPrompt)
}

// remove deletes the session's transcript (and the directory of its side files, when there is one). A
// live session is a conflict; one without a transcript is not_found.
func (x *Index) remove(hub *session.Hub, id string) error {
	if !session.ValidID(id) {
		return wire.Errorf(wire.NotFound, "no session %q in this sandbox", web.TruncateID(id))
	}
	if x.home == "" {
		return wire.Errorf(wire.NotFound, "no session %s in this sandbox", id)
	}
	root, err := x.openClaude()
	if errors.Is(err, fs.ErrNotExist) {
		return wire.Errorf(wire.NotFound, "no session %s in this sandbox", id)
	}
	if err != nil {
		return fmt.Errorf("open the agent's home: %w", err)
	}
	defer root.Close()
	x.mu.Lock()
	defer x.mu.Unlock()
	var found []string
	for _, slug := range readDirN(root, "projects") {
		rel := path.Join("projects", slug.Name(), id+".jsonl")
		if fi, err := root.Lstat(rel); err == nil && fi.Mode().IsRegular() {
			found = append(found, path.Join("projects", slug.Name()))
		}
	}
	if len(found) == 0 {
		return wire.Errorf(wire.NotFound, "no session %s in this sandbox", id)
	}
	if hub != nil && !hub.Forget(id) {
		return wire.Errorf(wire.Conflict, "session %s is live (a client is attached or a turn runs); close it first", id)
	}
	for _, dir := range found {
		if err := root.Remove(path.Join(dir, id+".jsonl")); err != nil && !errors.Is(err, fs.ErrNotExist) {
			return fmt.Errorf("delete transcript of %s: %w", id, err)
		}
		if err := root.RemoveAll(path.Join(dir, id)); err != nil {
			return fmt.Errorf("delete files of %s: %w", id, err)
		}
		delete(x.scans, path.Join(dir, id+".jsonl"))
	}
	return nil
}

// Routes mounts the session routes on s.
func (x *Index) Routes(s web.Serve) {
	s.Handle("/v1/sessions", httpx.Methods{http.MethodGet: x.listSessions})
	s.Handle("/v1/sessions/", httpx.Methods{http.MethodDelete: x.deleteSession})
}

// Busy is false: a live session keeps the sandbox awake through the agent channel, not the listing.
func (*Index) Busy(time.Time) bool { return false }

// Close has nothing to end.
func (*Index) Close(context.Context) error { return nil }

func (x *Index) listSessions(w http.ResponseWriter, req *http.Request) {
	list, err := x.list(x.host.Hub())
	if err != nil {
		web.Fail(w, req, err)
		return
	}
	_ = httpx.WriteJSON(w, http.StatusOK, wire.SessionList{Sessions: list})
}

func (x *Index) deleteSession(w http.ResponseWriter, req *http.Request) {
	id := strings.TrimPrefix(req.URL.Path, "/v1/sessions/")
	if err := x.remove(x.host.Hub(), id); err != nil {
		web.Fail(w, req, err)
		return
	}
	web.Logger(req).Info("session deleted", "session", id)
	// The last snapshot still holds the transcript: the next one must not.
	x.host.Snapshot(context.WithoutCancel(req.Context()), "session deleted")
	w.WriteHeader(http.StatusNoContent)
}
