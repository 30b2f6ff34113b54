package warren

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
)

// maxSSEEvent bounds one server-sent event (a line, or the data of one event) so a broken or hostile
// stream cannot make the client buffer without limit.
const maxSSEEvent = 16 << 20

// sseEvent is one dispatched server-sent event.
type sseEvent struct {
	Event string // "message" when the stream named none
	Data  string // data lines joined by "\n"
	ID    string // the last event id seen, per the spec
}

// sseReader parses a text/event-stream incrementally, following the WHATWG HTML "event stream
// interpretation": lines end in CRLF, LF or CR; lines starting with ':' are comments; "field: value" drops
// one leading space of the value; an empty line dispatches the event unless no data was given; an event cut
// off by the end of the stream is discarded. It never reads ahead of the line it needs, so each event is
// returned as soon as its terminating empty line arrives.
type sseReader struct {
	br      *bufio.Reader
	max     int
	started bool // the optional leading BOM has been dealt with
	skipLF  bool // the previous line ended in CR: a following LF belongs to it
	line    []byte
	event   []byte
	data    []byte
	lastID  string
}

func newSSEReader(r io.Reader) *sseReader {
	return &sseReader{br: bufio.NewReader(r), max: maxSSEEvent}
}

// Next returns the next event, io.EOF at the end of the stream, or the reader's error.
func (p *sseReader) Next() (sseEvent, error) {
	for {
		line, err := p.readLine()
		if err != nil {
			return sseEvent{}, err
		}
		if !p.started {
			p.started = true
			line = bytes.TrimPrefix(line, []byte("\uFEFF"))
		}
		if len(line) == 0 {
			if len(p.data) == 0 {
				p.event = p.event[:0]
				continue
			}
			ev := sseEvent{Event: "message", Data: string(p.data[:len(p.data)-1]), ID: p.lastID}
			if len(p.event) > 0 {
				ev.Event = string(p.event)
			}
			p.event, p.data = p.event[:0], p.data[:0]
			return ev, nil
		}
		if line[0] == ':' {
			continue
		}
		name, value := line, []byte(nil)
		if i := bytes.IndexByte(line, ':'); i >= 0 {
			name, value = line[:i], line[i+1:]
			if len(value) > 0 && value[0] == ' ' {
				value = value[1:]
			}
		}
		switch string(name) {
		case "event":
			p.event = append(p.event[:0], value...)
		case "data":
			if len(p.data)+len(value)+1 > p.max {
				return sseEvent{}, errSSETooLarge
			}
			p.data = append(p.data, value...)
			p.data = append(p.data, '\n')
		case "id":
			if bytes.IndexByte(value, 0) < 0 {
				p.lastID = string(value)
			}
		}
		// retry and unknown fields are ignored.
	}
}

// readLine returns the next line without its terminator. The returned slice is valid until the next call.
// A final line with no terminator is not a line: the stream ended mid-event, which the spec discards.
func (p *sseReader) readLine() ([]byte, error) {
	p.line = p.line[:0]
	for {
		c, err := p.br.ReadByte()
		if err != nil {
			return nil, err
		}
		if p.skipLF {
			p.skipLF = false
			if c == '\n' {
				continue
			}
		}
		switch c {
		case '\r':
			p.skipLF = true
			return p.line, nil
		case '\n':
			return p.line, nil
		}
		if len(p.line) >= p.max {
			return nil, errSSETooLarge
		}
		p.line = append(p.line, c)
	}
}

// eachEvent hands the events of a text/event-stream body to handle until handle answers false or an
// error. A stream that ends before that is an error wrapping io.ErrUnexpectedEOF that names what ended; a
// read that fails because ctx ended is ctx's error.
func eachEvent(ctx context.Context, body io.Reader, what string, handle func(sseEvent) (bool, error)) error {
	sse := newSSEReader(body)
	for {
		ev, err := sse.Next()
		if errors.Is(err, io.EOF) {
			err = fmt.Errorf("warren: %s ended before the exit event: %w", what, io.ErrUnexpectedEOF)
		}
		if err != nil {
			if ctx.Err() != nil {
				err = ctx.Err()
			}
			return err
		}
		if more, err := handle(ev); err != nil || !more {
			return err
		}
	}
}

// decodeSSE decodes an event's JSON data into v.
func decodeSSE(ev sseEvent, v any) error {
	if err := json.Unmarshal([]byte(ev.Data), v); err != nil {
		return fmt.Errorf("warren: malformed %s event: %w", ev.Event, err)
	}
	return nil
}
