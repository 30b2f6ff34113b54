package billing

import (
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"

	"github.com/warren-mesh/warren/internal/httpx"
	"github.com/warren-mesh/warren/internal/wire"
)

// quotaRequest is the body of PUT /v1/quotas/...: the budget fields are required, so a forgotten one is an
// error rather than a zero that allows nothing. The admission fields after them and the sandbox limits are
// optional: left out they are 0, not set (Quota).
type quotaRequest struct {
	AIMicros                *int64  `json:"ai_microdollars"`
	ComputeSeconds          *int64  `json:"compute_seconds"`
	Window                  *string `json:"window"`
	MaxConcurrentSessions   *int64  `json:"max_concurrent_sessions"`
	Revision                *int64  `json:"revision"`
	MaxIssuerSessions       int64   `json:"max_issuer_sessions"`
	ConnectsPerMinute       int64   `json:"connects_per_minute"`
	IssuerConnectsPerMinute int64   `json:"issuer_connects_per_minute"`
	PromptsPerMinute        int64   `json:"prompts_per_minute"`
	IssuerPromptsPerMinute  int64   `json:"issuer_prompts_per_minute"`
	SandboxQuota
}

// quotaResponse is a quota with the issuer and user it belongs to.
type quotaResponse struct {
	Issuer string `json:"iss"`
	User   string `json:"sub,omitempty"`
	Quota
}

// quotaKey reads {iss} and, on the user routes, {sub}.
func quotaKey(r *http.Request) (QuotaKey, error) {
	iss, err := pathName(r, "iss")
	if err != nil {
		return QuotaKey{}, err
	}
	k := QuotaKey{Issuer: iss}
	if strings.HasSuffix(r.Pattern, "/users/{sub}") {
		if k.User, err = pathName(r, "sub"); err != nil {
			return QuotaKey{}, err
		}
	}
	return k, nil
}

func (a *API) getQuota(w http.ResponseWriter, r *http.Request) error {
	k, err := quotaKey(r)
	if err != nil {
		return err
	}
	q, err := a.cfg.Store.GetQuota(r.Context(), k)
	if err != nil {
		msg := fmt.Sprintf("issuer %q has no quota", k.Issuer)
		if k.User != "" {
			msg = fmt.Sprintf("user %q of issuer %q has no quota of its own: the issuer's applies", k.User, k.Issuer)
		}
		return storeError(err, msg)
	}
	return httpx.WriteJSON(w, http.StatusOK, quotaResponse{Issuer: k.Issuer, User: k.User, Quota: q})
}

func (a *API) putQuota(w http.ResponseWriter, r *http.Request) error {
	k, err := quotaKey(r)
	if err != nil {
		return err
	}
	var req quotaRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	q, expected, err := req.quota(k)
	if err != nil {
		return err
	}
	stored, err := a.cfg.Store.PutQuota(r.Context(), k, q, expected)
	if errors.Is(err, ErrConflict) {
		details := map[string]any{"field": "revision"}
		if cur, gerr := a.cfg.Store.GetQuota(r.Context(), k); gerr == nil {
			details["current_revision"] = cur.Revision
		}
		return wire.Wrap(wire.Conflict, err, fmt.Sprintf(
			"revision %d is stale: the quota was changed; read it again and retry with its revision", expected)).WithDetails(details)
	}
	if err != nil {
		return storeError(err, fmt.Sprintf("issuer %q is not registered: PUT /v1/issuers/%s first", k.Issuer, k.Issuer))
	}
	return httpx.WriteJSON(w, http.StatusOK, quotaResponse{Issuer: k.Issuer, User: k.User, Quota: stored})
}

// deleteQuota deletes the quota under k at ?revision=N, the revision read: a user's override then gives
// way to the issuer's default, an issuer's default to no cap. Answers 204.
func (a *API) deleteQuota(w http.ResponseWriter, r *http.Request) error {
	k, err := quotaKey(r)
	if err != nil {
		return err
	}
	q := r.URL.Query()
	for name := range q {
		if name != "revision" {
			return invalidField(name, "unknown query parameter %q (want revision)", name)
		}
	}
	rev, err := strconv.ParseInt(q.Get("revision"), 10, 64)
	if err != nil || rev < 1 || len(q["revision"]) != 1 {
		return invalidField("revision", "revision is required once, the revision read (1 or more): DELETE %s?revision=N", r.URL.Path)
	}
	err = a.cfg.Store.DeleteQuota(r.Context(), k, rev)
	if errors.Is(err, ErrConflict) {
		return wire.Wrap(wire.Conflict, err, fmt.Sprintf(
			"revision %d is stale: the quota was changed; read it again and retry with its revision", rev)).WithDetails(map[string]any{"field": "revision"})
	}
	if err != nil {
		return storeError(err, fmt.Sprintf("%s has no quota to delete", k))
	}
	a.logger(r).Info("quota deleted", "issuer", k.Issuer, "user", k.User, "revision", rev)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// quota checks the request for the quota stored under k field by field, naming the first bad one.
func (req quotaRequest) quota(k QuotaKey) (Quota, int64, error) {
	limits := []struct {
		field string
		v     *int64
	}{
		{"ai_microdollars", req.AIMicros},
		{"compute_seconds", req.ComputeSeconds},
		{"max_concurrent_sessions", req.MaxConcurrentSessions},
	}
	for _, l := range limits {
		switch {
		case l.v == nil:
			return Quota{}, 0, invalidField(l.field, "%s is required (-1 for unlimited)", l.field)
		case *l.v < Unlimited:
			return Quota{}, 0, invalidField(l.field, "%s must be -1 (unlimited) or more, not %d", l.field, *l.v)
		}
	}
	optional := []struct {
		field       string
		v           int64
		issuerWide  bool
		notSetMeans string
	}{
		{"max_issuer_sessions", req.MaxIssuerSessions, true, "no issuer-wide cap"},
		{"connects_per_minute", req.ConnectsPerMinute, false, "the edge's default"},
		{"issuer_connects_per_minute", req.IssuerConnectsPerMinute, true, "the edge's default"},
		{"prompts_per_minute", req.PromptsPerMinute, false, "the edge's default"},
		{"issuer_prompts_per_minute", req.IssuerPromptsPerMinute, true, "the edge's default"},
	}
	for _, o := range optional {
		switch {
		case o.v < Unlimited:
			return Quota{}, 0, invalidField(o.field, "%s must be -1 (unlimited), 0 (not set: %s) or more, not %d", o.field, o.notSetMeans, o.v)
		case o.issuerWide && k.User != "" && o.v != 0:
			return Quota{}, 0, invalidField(o.field,
				"%s applies to all of the issuer's users together: set it on the issuer's quota, PUT /v1/quotas/%s", o.field, k.Issuer)
		}
	}
	if field, why := req.SandboxQuota.invalidField(); why != "" {
		return Quota{}, 0, invalidField(field, "%s", why)
	}
	switch {
	case req.Window == nil:
		return Quota{}, 0, invalidField("window", "window is required: hour, day, week, month or lifetime")
	case !Window(*req.Window).Valid():
		return Quota{}, 0, invalidField("window", "window %q: want hour, day, week, month or lifetime", *req.Window)
	case req.Revision == nil:
		return Quota{}, 0, invalidField("revision", "revision is required: the revision read, or 0 to create")
	case *req.Revision < 0:
		return Quota{}, 0, invalidField("revision", "revision must not be negative")
	}
	return Quota{AIMicros: *req.AIMicros, ComputeSeconds: *req.ComputeSeconds, Window: Window(*req.Window),
		MaxConcurrentSessions: *req.MaxConcurrentSessions, MaxIssuerSessions: req.MaxIssuerSessions,
		ConnectsPerMinute: req.ConnectsPerMinute, IssuerConnectsPerMinute: req.IssuerConnectsPerMinute,
		PromptsPerMinute: req.PromptsPerMinute, IssuerPromptsPerMinute: req.IssuerPromptsPerMinute,
		SandboxQuota: req.SandboxQuota}, *req.Revision, nil
}
