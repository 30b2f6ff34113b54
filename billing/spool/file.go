package spool

import (
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"time"

	"github.com/warren-mesh/warren/billing"
)

// entry is one spooled usage event; hold is set when it settles a budget hold (Spool.Settle).
type entry struct {
	hold string
	ev   billing.UsageEvent
}

// line is an entry's form on disk: one JSON object per line, newline-terminated. The names are the file
// format; change them only with a reader for the old ones.
type line struct {
	Key            string    `json:"key"`
	Hold           string    `json:"hold,omitempty"`
	Issuer         string    `json:"issuer"`
	User           string    `json:"user"`
	Window         string    `json:"window"`
	WindowStart    time.Time `json:"window_start,omitzero"`
	Kind           string    `json:"kind"`
	Model          string    `json:"model,omitempty"`
	AIMicros       int64     `json:"ai_micros"`
	ComputeSeconds int64     `json:"compute_seconds"`
	At             time.Time `json:"at"`
}

func (e entry) marshal() ([]byte, error) {
	a := e.ev.Account
	b, err := json.Marshal(line{
		Key: e.ev.Key, Hold: e.hold, Issuer: a.Issuer, User: a.User, Window: string(a.Window),
		WindowStart: a.WindowStart, Kind: e.ev.Kind, Model: e.ev.Model, AIMicros: e.ev.AIMicros,
		ComputeSeconds: e.ev.ComputeSeconds, At: e.ev.At,
	})
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

func unmarshal(b []byte) (entry, error) {
	var l line
	if err := json.Unmarshal(b, &l); err != nil {
		return entry{}, err
	}
	e := entry{hold: l.Hold, ev: billing.UsageEvent{
		Key:     l.Key,
		Account: billing.Account{Issuer: l.Issuer, User: l.User, Window: billing.Window(l.Window), WindowStart: l.WindowStart},
		Kind:    l.Kind, Model: l.Model, AIMicros: l.AIMicros, ComputeSeconds: l.ComputeSeconds, At: l.At,
	}}
	if err := e.ev.Validate(); err != nil {
		return entry{}, err
	}
	return e, nil
}

// parse reads a spool file's contents. It returns the entries in order and the length of the prefix they
// fill; what follows is a torn tail — a last line without its newline, or unreadable lines with no
// readable one after them — that a crash during an append can leave, and that the caller cuts off. An
// unreadable line followed by a readable one is ErrCorrupt: appends never leave that.
func parse(data []byte) (entries []entry, valid int, err error) {
	bad := -1 // offset of the first unreadable line
	badLine := 0
	for off, n := 0, 1; ; n++ {
		i := bytes.IndexByte(data[off:], '\n')
		if i < 0 {
			break // no newline: a partial last line, or the end
		}
		e, err := unmarshal(data[off : off+i])
		switch {
		case err != nil && bad < 0:
			bad, badLine = off, n
		case err == nil && bad >= 0:
			return nil, 0, fmt.Errorf("line %d: %w", badLine, ErrCorrupt)
		case err == nil:
			entries = append(entries, e)
			valid = off + i + 1
		}
		off += i + 1
	}
	return entries, valid, nil
}

// rewrite writes entries to a new file beside path and renames it over path, so a crash leaves either the
// old file or the new one whole. It returns the new file, open for appending, and its size.
func rewrite(path string, entries []entry) (*os.File, int64, error) {
	tmp := path + ".tmp"
	f, err := os.OpenFile(tmp, os.O_RDWR|os.O_CREATE|os.O_TRUNC|os.O_APPEND, 0o600)
	if err != nil {
		return nil, 0, err
	}
	fail := func(err error) (*os.File, int64, error) {
		f.Close()
		os.Remove(tmp)
		return nil, 0, err
	}
	var (
		buf  bytes.Buffer
		size int64
	)
	for _, e := range entries {
		b, err := e.marshal()
		if err != nil {
			return fail(err)
		}
		buf.Write(b)
		size += int64(len(b))
		if buf.Len() >= 1<<20 {
			if _, err := f.Write(buf.Bytes()); err != nil {
				return fail(err)
			}
			buf.Reset()
		}
	}
	if _, err := f.Write(buf.Bytes()); err != nil {
		return fail(err)
	}
	if err := f.Sync(); err != nil {
		return fail(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		return fail(err)
	}
	// The rename is durable once the directory is: until then a crash may bring back the old file, whose
	// extra lines replay as no-ops.
	_ = syncDir(filepath.Dir(path))
	return f, size, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
