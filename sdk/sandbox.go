package warren

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"io/fs"
	"iter"
	"mime"
	"net/http"
	"net/url"
	"strings"

	"github.com/warren-mesh/warren/internal/wire"
)

// Sandbox is the REST API of the user's sandbox (docs/PROTOCOL.md#sandbox-api): commands and files. The
// sandbox is the one named by the token and is started on demand. Paths are relative to the workspace root.
type Sandbox struct {
	c *Client
}

// Sandbox returns the API of the user's sandbox.
func (c *Client) Sandbox() *Sandbox { return &Sandbox{c: c} }

// Kinds of ExecEvent.
const (
	ExecStdout = wire.EventStdout
	ExecStderr = wire.EventStderr
	ExecExit   = wire.EventExit
)

// ExecEvent is one event of a streamed exec: a chunk of output (Kind ExecStdout or ExecStderr, in Data) or
// the end of the command (Kind ExecExit, Result with the exit code; its Stdout and Stderr are empty).
type ExecEvent struct {
	Kind   string
	Data   string
	Result *ExecResult
}

// Exec runs a command to completion and returns its output. With req.Args empty the sandbox runs
// req.Command with sh -c; with Args it runs Command directly. A nonzero exit code is not an error.
func (s *Sandbox) Exec(ctx context.Context, req ExecRequest) (*ExecResult, error) {
	var r ExecResult
	if err := s.c.doJSON(ctx, http.MethodPost, "/v1/sandbox/exec", nil, req, &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// ExecStream runs a command and yields its output as it is produced, then one ExecExit event. A failure
// (the request, the stream, or an error event from the server) is yielded once as the last element.
// Stopping the iteration early closes the stream, which stops the command.
func (s *Sandbox) ExecStream(ctx context.Context, req ExecRequest) iter.Seq2[ExecEvent, error] {
	return func(yield func(ExecEvent, error) bool) {
		b, err := json.Marshal(req)
		if err != nil {
			yield(ExecEvent{}, fmt.Errorf("warren: encode exec request: %w", err))
			return
		}
		hreq, err := http.NewRequestWithContext(ctx, http.MethodPost, s.c.endpoint("/v1/sandbox/exec", nil), bytes.NewReader(b))
		if err != nil {
			yield(ExecEvent{}, err)
			return
		}
		hreq.Header.Set("Content-Type", "application/json")
		hreq.Header.Set("Accept", "text/event-stream")
		resp, err := s.c.do(hreq)
		if err != nil {
			yield(ExecEvent{}, err)
			return
		}
		defer resp.Body.Close()
		if mt, _, _ := mime.ParseMediaType(resp.Header.Get("Content-Type")); mt != "text/event-stream" {
			// A server that does not stream answers with the whole result.
			execResultEvents(resp.Body, yield)
			return
		}
		err = eachEvent(ctx, resp.Body, "exec stream", func(ev sseEvent) (bool, error) {
			switch ev.Event {
			case wire.EventStdout, wire.EventStderr:
				var ch wire.ExecChunk
				if err := decodeSSE(ev, &ch); err != nil {
					return false, err
				}
				return yield(ExecEvent{Kind: ev.Event, Data: ch.Data}, nil), nil
			case wire.EventExit:
				var r ExecResult
				if err := decodeSSE(ev, &r); err != nil {
					return false, err
				}
				yield(ExecEvent{Kind: ExecExit, Result: &r}, nil)
				return false, nil
			case wire.EventError:
				var we Error
				if err := json.Unmarshal([]byte(ev.Data), &we); err != nil || we.Code == "" {
					we = Error{Code: wire.Internal, Message: "exec failed: " + ev.Data}
				}
				return false, &we
			}
			return true, nil // other events (keep-alives, future additions) are skipped
		})
		if err != nil {
			yield(ExecEvent{}, err)
		}
	}
}

func execResultEvents(body io.Reader, yield func(ExecEvent, error) bool) {
	var r ExecResult
	if err := json.NewDecoder(body).Decode(&r); err != nil {
		yield(ExecEvent{}, fmt.Errorf("warren: decode exec result: %w", err))
		return
	}
	if r.Stdout != "" && !yield(ExecEvent{Kind: ExecStdout, Data: r.Stdout}, nil) {
		return
	}
	if r.Stderr != "" && !yield(ExecEvent{Kind: ExecStderr, Data: r.Stderr}, nil) {
		return
	}
	r.Stdout, r.Stderr = "", ""
	yield(ExecEvent{Kind: ExecExit, Result: &r}, nil)
}

func pathQuery(path string) url.Values { return url.Values{"path": {path}} }

// ReadFile returns the contents of the file at path.
func (s *Sandbox) ReadFile(ctx context.Context, path string) ([]byte, error) {
	rc, err := s.Open(ctx, path)
	if err != nil {
		return nil, err
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		return nil, fmt.Errorf("warren: read %s: %w", path, err)
	}
	return b, nil
}

// Open streams the file at path. The caller must close the reader.
func (s *Sandbox) Open(ctx context.Context, path string) (io.ReadCloser, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.c.endpoint("/v1/sandbox/files", pathQuery(path)), nil)
	if err != nil {
		return nil, err
	}
	req.Header.Set("Accept", "application/octet-stream")
	resp, err := s.c.do(req)
	if err != nil {
		return nil, err
	}
	return resp.Body, nil
}

// WriteFile creates or replaces the file at path with what r yields, streaming it: r is read as the request
// is sent, never held in memory whole. When the length of r is known (bytes and strings readers, regular
// files) it is sent as Content-Length. r is not closed.
func (s *Sandbox) WriteFile(ctx context.Context, path string, r io.Reader) (*FileWritten, error) {
	var body io.Reader = http.NoBody
	n, known := int64(0), true
	if r != nil {
		n, known = readerLen(r)
		if !known || n > 0 {
			// Hide r's Close (the transport closes bodies it is given) and its type (so the transport
			// does not guess a length from it).
			body = struct{ io.Reader }{r}
		}
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPut, s.c.endpoint("/v1/sandbox/files", pathQuery(path)), body)
	if err != nil {
		return nil, err
	}
	switch {
	case known && n == 0:
		req.Body, req.ContentLength = http.NoBody, 0
	case known:
		req.ContentLength = n
	default:
		req.ContentLength = -1
	}
	req.Header.Set("Content-Type", "application/octet-stream")
	req.Header.Set("Accept", "application/json")
	resp, err := s.c.do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	var fw FileWritten
	if err := json.NewDecoder(resp.Body).Decode(&fw); err != nil {
		return nil, fmt.Errorf("warren: decode answer of PUT %s: %w", path, err)
	}
	return &fw, nil
}

// readerLen is how many bytes r will yield, when that can be known without reading it.
func readerLen(r io.Reader) (int64, bool) {
	switch v := r.(type) {
	case *bytes.Buffer:
		return int64(v.Len()), true
	case *bytes.Reader:
		return int64(v.Len()), true
	case *strings.Reader:
		return int64(v.Len()), true
	case interface {
		Stat() (fs.FileInfo, error)
		io.Seeker
	}:
		fi, err := v.Stat()
		if err != nil || !fi.Mode().IsRegular() {
			return 0, false
		}
		off, err := v.Seek(0, io.SeekCurrent)
		if err != nil || off > fi.Size() {
			return 0, false
		}
		return fi.Size() - off, true
	}
	return 0, false
}

// List returns the entries of the directory at path.
func (s *Sandbox) List(ctx context.Context, path string) ([]FileInfo, error) {
	var l wire.FileList
	if err := s.c.doJSON(ctx, http.MethodGet, "/v1/sandbox/files/list", pathQuery(path), nil, &l); err != nil {
		return nil, err
	}
	return l.Entries, nil
}

// Remove deletes the file at path; a directory needs recursive.
func (s *Sandbox) Remove(ctx context.Context, path string, recursive bool) error {
	q := pathQuery(path)
	if recursive {
		q.Set("recursive", "true")
	}
	return s.c.doJSON(ctx, http.MethodDelete, "/v1/sandbox/files", q, nil, nil)
}
