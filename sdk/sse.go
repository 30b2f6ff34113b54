package warren

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	"github.com/warren-mesh/warren/internal/sse"
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

// sseReader reads a text/event-stream with Warren's one parser (internal/sse: the WHATWG rules, each
// event returned as soon as its empty line arrives).
type sseReader struct{ r *sse.Reader }

func newSSEReader(r io.Reader) *sseReader { return &sseReader{r: sse.NewReader(r, maxSSEEvent)} }

// Next returns the next event, io.EOF at the end of the stream, errSSETooLarge, or the reader's error.
func (p *sseReader) Next() (sseEvent, error) {
	ev, err := p.r.Next()
	switch {
	case errors.Is(err, sse.ErrTooLarge):
		return sseEvent{}, errSSETooLarge
	case err != nil:
		return sseEvent{}, err
	}
	typ := ev.Type
	if typ == "" {
		typ = "message"
	}
	return sseEvent{Event: typ, Data: string(ev.Data), ID: ev.ID}, nil
}

// eachEvent hands the events of a text/event-stream body to handle until handle answers false or an
// error. A stream that ends before that is an error wrapping io.ErrUnexpectedEOF that names what ended; a
// read that fails because ctx ended is ctx's error.
func eachEvent(ctx context.Context, body io.Reader, what string, handle func(sseEvent) (bool, error)) error {
	events := newSSEReader(body)
	for {
		ev, err := events.Next()
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
