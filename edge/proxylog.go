package edge

import (
	"context"
	"log"
	"log/slog"
)

// proxyErrorLog is the ErrorLog of a reverse proxy answering a request whose context is ctx: its errors
// are warnings, but once ctx has ended (the client closed its connection or cancelled the request: a
// `proc logs -f` or `files watch` interrupted) the broken body copy that follows is the client leaving,
// logged at debug level.
func proxyErrorLog(ctx context.Context, h slog.Handler) *log.Logger {
	return slog.NewLogLogger(clientGoneHandler{Handler: h, req: ctx}, slog.LevelWarn)
}

// clientGoneHandler lowers records to debug once req has ended.
type clientGoneHandler struct {
	slog.Handler
	req context.Context
}

func (h clientGoneHandler) Handle(ctx context.Context, r slog.Record) error {
	if h.req.Err() == nil {
		return h.Handler.Handle(ctx, r)
	}
	if !h.Handler.Enabled(ctx, slog.LevelDebug) {
		return nil
	}
	r.Level = slog.LevelDebug
	return h.Handler.Handle(ctx, r)
}
