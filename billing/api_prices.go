package billing

import (
	"fmt"
	"maps"
	"net/http"
	"slices"

	"github.com/warren-mesh/warren/internal/httpx"
)

// priceRequest is the body of PUT /v1/prices/{model}, microdollars per million tokens; every field is
// required.
type priceRequest struct {
	Input         *int64 `json:"input"`
	Output        *int64 `json:"output"`
	CacheRead     *int64 `json:"cache_read"`
	CacheCreation *int64 `json:"cache_creation"`
}

// modelPrice is one entry of the effective price table. Custom says whether it is an override set through
// the API rather than a built-in price.
type modelPrice struct {
	Model  string `json:"model"`
	Price  Price  `json:"price"`
	Custom bool   `json:"custom"`
}

// priceOfModel is GET /v1/prices/{model}: the price a model is charged at and the table entry it comes
// from (Matched: the longest model-name prefix; empty for the default price).
type priceOfModel struct {
	Model   string `json:"model"`
	Price   Price  `json:"price"`
	Matched string `json:"matched"`
	Custom  bool   `json:"custom"`
}

func (a *API) listPrices(w http.ResponseWriter, r *http.Request) error {
	overrides, err := a.cfg.Store.ListPrices(r.Context())
	if err != nil {
		return storeError(err, "")
	}
	ps := withOverrides(overrides)
	out := struct {
		Default Price        `json:"default"`
		Models  []modelPrice `json:"models"`
	}{Default: ps.Default, Models: []modelPrice{}}
	for _, m := range slices.Sorted(maps.Keys(ps.Models)) {
		_, custom := overrides[m]
		out.Models = append(out.Models, modelPrice{Model: m, Price: ps.Models[m], Custom: custom})
	}
	return httpx.WriteJSON(w, http.StatusOK, out)
}

func (a *API) getPrice(w http.ResponseWriter, r *http.Request) error {
	model, err := pathName(r, "model")
	if err != nil {
		return err
	}
	overrides, err := a.cfg.Store.ListPrices(r.Context())
	if err != nil {
		return storeError(err, "")
	}
	matched, p := withOverrides(overrides).Match(model)
	_, custom := overrides[matched]
	return httpx.WriteJSON(w, http.StatusOK, priceOfModel{Model: model, Price: p, Matched: matched, Custom: custom && matched != ""})
}

func (a *API) putPrice(w http.ResponseWriter, r *http.Request) error {
	model, err := pathName(r, "model")
	if err != nil {
		return err
	}
	var req priceRequest
	if err := a.decodeBody(w, r, &req); err != nil {
		return err
	}
	for _, f := range []struct {
		field string
		v     *int64
	}{{"input", req.Input}, {"output", req.Output}, {"cache_read", req.CacheRead}, {"cache_creation", req.CacheCreation}} {
		switch {
		case f.v == nil:
			return invalidField(f.field, "%s is required, in microdollars per million tokens", f.field)
		case *f.v < 0 || *f.v > MaxPrice:
			return invalidField(f.field, "%s must be 0 to %d microdollars per million tokens", f.field, int64(MaxPrice))
		}
	}
	p := Price{Input: *req.Input, Output: *req.Output, CacheRead: *req.CacheRead, CacheCreation: *req.CacheCreation}
	if err := a.cfg.Store.PutPrice(r.Context(), model, p); err != nil {
		return storeError(err, "")
	}
	return httpx.WriteJSON(w, http.StatusOK, priceOfModel{Model: model, Price: p, Matched: model, Custom: true})
}

// deletePrice removes a model's override, so its built-in price (if any) applies again. Answers 204.
func (a *API) deletePrice(w http.ResponseWriter, r *http.Request) error {
	model, err := pathName(r, "model")
	if err != nil {
		return err
	}
	if err := a.cfg.Store.DeletePrice(r.Context(), model); err != nil {
		return storeError(err, fmt.Sprintf("model %q has no price override to delete", model))
	}
	a.logger(r).Info("price override deleted", "model", model)
	w.WriteHeader(http.StatusNoContent)
	return nil
}

// withOverrides is DefaultPrices with overrides on top (EffectivePrices for a table already read).
func withOverrides(overrides map[string]Price) Prices {
	ps := DefaultPrices()
	maps.Copy(ps.Models, overrides)
	return ps
}
