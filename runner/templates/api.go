package templates

import (
	"fmt"
	"io"
	"log/slog"
	"net/http"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

// Routes of the templates admin API (docs/PROTOCOL.md#templates), mounted beside the billing API and
// authenticated by its admin keys.
const (
	RoutePut    = "PUT /v1/admin/templates/{issuer}/{name}"
	RouteList   = "GET /v1/admin/templates/{issuer}/{name}"
	RouteUse    = "POST /v1/admin/templates/{issuer}/{name}/current"
	RouteDelete = "DELETE /v1/admin/templates/{issuer}/{name}"
)

// Handler serves the templates admin API. Every route asks authenticate first (billing.API.Authenticate:
// the admin keys), unknown paths and methods included, so an unauthenticated client learns nothing, not
// even whether a template exists; with the key those are wire errors (httpx.Mux).
func Handler(s *Store, authenticate func(*http.Request) error, log *slog.Logger) http.Handler {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	mux := &httpx.Mux{What: "templates admin API", Authorize: authenticate}
	handle := func(pattern string, serve func(w http.ResponseWriter, r *http.Request, iss, name string) error) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			if err := authenticate(r); err != nil {
				wire.WriteHTTPError(w, log, err)
				return
			}
			iss, name := r.PathValue("issuer"), r.PathValue("name")
			if err := serve(w, r, iss, name); err != nil {
				log.Info("templates admin request failed", "route", pattern, "issuer", iss, "template", name,
					"code", wire.CodeOf(err))
				wire.WriteHTTPError(w, log, err)
			}
		})
	}
	handle(RoutePut, func(w http.ResponseWriter, r *http.Request, iss, name string) error {
		// Bounded twice: the unpacking counts file bytes, this bounds the stream (headers and padding too).
		limit := s.cfg.Limits.MaxBytes + int64(s.cfg.Limits.MaxFiles)*4096 + 1<<20
		body := http.MaxBytesReader(w, r.Body, limit)
		v, err := s.Deploy(r.Context(), iss, name, body)
		if err != nil {
			if mbe := (*http.MaxBytesError)(nil); asMaxBytes(err, &mbe) {
				return wire.Wrap(wire.PayloadTooLarge, ErrTooLarge, fmt.Sprintf("the archive is over %d bytes", limit))
			}
			return err
		}
		return httpx.WriteJSON(w, http.StatusCreated, v)
	})
	handle(RouteList, func(w http.ResponseWriter, r *http.Request, iss, name string) error {
		vs, err := s.List(r.Context(), iss, name)
		if err != nil {
			return err
		}
		return httpx.WriteJSON(w, http.StatusOK, map[string]any{"issuer": iss, "name": name, "versions": vs})
	})
	handle(RouteUse, func(w http.ResponseWriter, r *http.Request, iss, name string) error {
		var req struct {
			Version string `json:"version"`
		}
		if err := strictjson.Read(io.LimitReader(r.Body, 4<<10), &req, strictjson.RejectUnknown); err != nil {
			return wire.Errorf(wire.InvalidArgument, "want {\"version\": \"N\"}: %v", err)
		}
		v, err := s.Use(r.Context(), iss, name, req.Version)
		if err != nil {
			return err
		}
		return httpx.WriteJSON(w, http.StatusOK, v)
	})
	handle(RouteDelete, func(w http.ResponseWriter, r *http.Request, iss, name string) error {
		if err := s.Delete(r.Context(), iss, name); err != nil {
			return err
		}
		w.WriteHeader(http.StatusNoContent)
		return nil
	})
	return mux
}
