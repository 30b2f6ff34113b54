// Package sse is Warren's one parser of server-sent event streams (text/event-stream): the Go SDK reads
// exec output, process logs and file watches with it (Reader), and the runner's model proxy reads the
// usage of the Messages API's streamed answers as the bytes pass through (Parser.Feed). Both used to
// carry a parser of their own.
//
// It follows the WHATWG HTML "event stream interpretation": lines end in CRLF, LF or CR; a leading BOM
// is dropped; lines starting with ':' are comments; "field: value" drops one leading space of the value;
// "data" lines are joined with "\n"; an empty line dispatches the event unless no data was given; "id"
// sets the last event id (unless it holds a NUL) which later events keep; "retry" and unknown fields are
// ignored; an event cut off by the end of the stream is discarded. A line or an event's data longer than
// the bound is refused (ErrTooLarge) or, with SkipOversize, skipped.
package sse

import (
	"bufio"
	"bytes"
	"errors"
	"io"
)

// DefaultMax bounds a line and an event's data when Parser.Max is 0.
const DefaultMax = 16 << 20

// ErrTooLarge is a line or an event's data over the bound.
var ErrTooLarge = errors.New("server-sent event exceeds the size limit")

// Event is one dispatched event.
type Event struct {
	// Type is the event's "event" field; "" when it had none (the spec's "message").
	Type string
	// Data is its data lines joined by "\n". It is valid until the parser reads on.
	Data []byte
	// ID is the last event id seen, this event's or an earlier one's.
	ID string
}

// Parser reads a stream fed to it in chunks of any size. The zero Parser is ready to use.
type Parser struct {
	// Max bounds a line and an event's data (DefaultMax when 0).
	Max int
	// SkipOversize drops an event whose line or data outgrows Max and reads on; without it Feed returns
	// ErrTooLarge and the Parser must not be used again.
	SkipOversize bool

	line     []byte
	lineOver bool // the current line outgrew Max and is being skipped
	afterCR  bool // the last byte was '\r': a following '\n' ends the same line
	started  bool // the first line (which may start with a BOM) was read
	event    []byte
	data     []byte
	hasData  bool
	dataOver bool // the current event's data outgrew Max: it is dropped
	lastID   string
}

var bom = []byte("\uFEFF")

// Feed parses b, the next bytes of the stream, calling emit with each event it completes, in order.
func (p *Parser) Feed(b []byte, emit func(Event)) error {
	for len(b) > 0 {
		if p.afterCR {
			p.afterCR = false
			if b[0] == '\n' {
				b = b[1:]
				continue
			}
		}
		i := bytes.IndexAny(b, "\r\n")
		if i < 0 {
			return p.appendLine(b)
		}
		if err := p.appendLine(b[:i]); err != nil {
			return err
		}
		p.afterCR = b[i] == '\r'
		b = b[i+1:]
		ev, ok, err := p.endLine()
		if err != nil {
			return err
		}
		if ok {
			emit(ev)
		}
	}
	return nil
}

func (p *Parser) max() int {
	if p.Max > 0 {
		return p.Max
	}
	return DefaultMax
}

func (p *Parser) appendLine(b []byte) error {
	if p.lineOver {
		return nil
	}
	if len(p.line)+len(b) > p.max() {
		if !p.SkipOversize {
			return ErrTooLarge
		}
		p.lineOver, p.dataOver, p.line = true, true, p.line[:0]
		return nil
	}
	p.line = append(p.line, b...)
	return nil
}

// endLine processes the line read so far; ok when it dispatched an event.
func (p *Parser) endLine() (ev Event, ok bool, err error) {
	line, over := p.line, p.lineOver
	p.line, p.lineOver = p.line[:0], false
	if !p.started {
		p.started = true
		line = bytes.TrimPrefix(line, bom)
	}
	switch {
	case over:
		return Event{}, false, nil
	case len(line) == 0:
		ev, ok = p.dispatch()
		return ev, ok, nil
	case line[0] == ':':
		return Event{}, false, nil // a comment
	}
	name, value, found := bytes.Cut(line, []byte(":"))
	if found && len(value) > 0 && value[0] == ' ' {
		value = value[1:]
	}
	switch string(name) {
	case "event":
		p.event = append(p.event[:0], value...)
	case "data":
		return Event{}, false, p.addData(value)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			p.lastID = string(value)
		}
	}
	return Event{}, false, nil
}

func (p *Parser) addData(value []byte) error {
	if p.dataOver {
		return nil
	}
	if len(p.data)+len(value)+1 > p.max() {
		if !p.SkipOversize {
			return ErrTooLarge
		}
		p.dataOver, p.data = true, p.data[:0]
		return nil
	}
	if p.hasData {
		p.data = append(p.data, '\n')
	}
	p.data = append(p.data, value...)
	p.hasData = true
	return nil
}

// dispatch ends the current event; ok unless it had no data (or its data was dropped).
func (p *Parser) dispatch() (Event, bool) {
	ev, ok := Event{Type: string(p.event), Data: p.data, ID: p.lastID}, p.hasData && !p.dataOver
	p.event, p.data, p.hasData, p.dataOver = p.event[:0], p.data[:0], false, false
	return ev, ok
}

// Reader returns the events of a stream one at a time. It returns each event as soon as its terminating
// empty line has arrived, reading no further.
type Reader struct {
	br *bufio.Reader
	p  Parser
}

// NewReader reads r with a bound of max bytes per line and per event's data (DefaultMax when 0);
// events over it are ErrTooLarge.
func NewReader(r io.Reader, max int) *Reader {
	return &Reader{br: bufio.NewReader(r), p: Parser{Max: max}}
}

// Next returns the next event (its Data valid until the next call), io.EOF at the end of the stream, or
// the reader's error or ErrTooLarge.
func (r *Reader) Next() (Event, error) {
	var (
		ev  Event
		got bool
	)
	emit := func(e Event) { ev, got = e, true }
	var one [1]byte
	for {
		c, err := r.br.ReadByte()
		if err != nil {
			return Event{}, err
		}
		one[0] = c
		if err := r.p.Feed(one[:], emit); err != nil {
			return Event{}, err
		}
		if got {
			return ev, nil
		}
	}
}
