package token

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/warren-mesh/warren/internal/strictjson"
	"github.com/warren-mesh/warren/internal/wire"
)

const (
	// maxNameLen bounds iss, sub, aud entries, tool names, the model and kid.
	maxNameLen = 256
	// maxNumericDate is 9999-12-31T23:59:59Z; exp, nbf, iat and budget.windowStart outside [0,
	// maxNumericDate] are invalid.
	maxNumericDate = 253402300799
)

// payload is the JWT payload's JSON form. The nested claims stay raw so they can be decoded strictly after
// the signature is checked.
type payload struct {
	Iss         string          `json:"iss,omitempty"`
	Sub         string          `json:"sub,omitempty"`
	Aud         audience        `json:"aud,omitzero"`
	Exp         *numericDate    `json:"exp,omitempty"`
	Nbf         *numericDate    `json:"nbf,omitempty"`
	Iat         *numericDate    `json:"iat,omitempty"`
	Budget      json.RawMessage `json:"budget,omitempty"`
	Permissions json.RawMessage `json:"permissions,omitempty"`
	SDKConfig   json.RawMessage `json:"sdkConfig,omitempty"`
	Template    *string         `json:"template,omitempty"`
}

// claimError is an invalid claim. detail is fixed text naming the claim (it reaches clients); cause, when
// set, is the decoder's error and is only logged.
type claimError struct {
	detail string
	cause  error
}

func (e *claimError) Error() string {
	if e.cause != nil {
		return e.detail + ": " + e.cause.Error()
	}
	return e.detail
}

func (e *claimError) Unwrap() error { return e.cause }

func badClaim(detail string) error { return &claimError{detail: detail} }

// decodeClaims turns a signed payload into validated Claims. Registered claims must have their JSON types
// (exp a number, not a string); budget and permissions must not hold unknown fields, so a misspelt
// restriction is refused rather than ignored. Unknown top-level claims (jti, custom ones) are ignored.
// Names are case-sensitive and a name twice in one object is refused, at every depth (strictjson): "Sub"
// is an unknown claim, never sub.
func decodeClaims(data []byte) (*Claims, error) {
	var p payload
	if err := strictjson.Unmarshal(data, &p); err != nil {
		return nil, jsonClaimError("", err, "payload is not a JSON object with claims of the right types")
	}
	c := &Claims{Issuer: p.Iss, Subject: p.Sub, Audience: []string(p.Aud)}
	if p.Exp != nil {
		c.ExpiresAt = time.Time(*p.Exp)
	}
	if p.Nbf != nil {
		c.NotBefore = time.Time(*p.Nbf)
	}
	if p.Iat != nil {
		c.IssuedAt = time.Time(*p.Iat)
	}
	if present(p.Budget) {
		c.HasBudget = true
		if err := wire.DecodeStrict(p.Budget, &c.Budget); err != nil {
			return nil, jsonClaimError("/budget", err, "budget has a wrong type or an unknown field")
		}
		c.Budget.WindowStart = c.Budget.WindowStart.UTC()
	}
	if present(p.Permissions) {
		if err := wire.DecodeStrict(p.Permissions, &c.Permissions); err != nil {
			return nil, jsonClaimError("/permissions", err, "permissions has a wrong type or an unknown field")
		}
	}
	if present(p.SDKConfig) {
		var buf bytes.Buffer
		if err := json.Compact(&buf, p.SDKConfig); err != nil {
			return nil, &claimError{detail: "sdkConfig must be a JSON object", cause: err}
		}
		c.SDKConfig = buf.Bytes()
	}
	if p.Template != nil {
		if *p.Template == "" {
			return nil, badClaim(templateDetail)
		}
		c.Template = *p.Template
	}
	if err := c.validate(); err != nil {
		return nil, err
	}
	return c, nil
}

// claimPointers are the members Warren reads, by JSON Pointer: a duplicate of one is named in the detail.
var claimPointers = []string{
	"/iss", "/sub", "/aud", "/exp", "/nbf", "/iat", "/template", "/budget", "/permissions", "/sdkConfig",
	"/budget/ai", "/budget/compute", "/budget/window", "/budget/windowStart",
	"/permissions/tools", "/permissions/blockedTools", "/permissions/maxTurns", "/permissions/model",
}

// jsonClaimError is the claimError of a decoding error of the value at prefix. A duplicated name gets a
// detail of its own naming the claim (from claimPointers, never a name taken from the token); anything
// else gets fallback. The strictjson error, with the member's full pointer, is the logged cause.
func jsonClaimError(prefix string, err error, fallback string) error {
	var je *strictjson.Error
	if !errors.As(err, &je) || je.Kind != strictjson.Duplicate {
		return &claimError{detail: fallback, cause: err}
	}
	ptr := prefix + je.Pointer
	cause := fmt.Errorf("duplicate member %s: %w", ptr, err)
	if slices.Contains(claimPointers, ptr) {
		return &claimError{detail: "duplicate claim " + claimName(ptr), cause: cause}
	}
	for _, obj := range []string{"/budget/", "/permissions/", "/sdkConfig/"} {
		if strings.HasPrefix(ptr, obj) {
			return &claimError{detail: "duplicate member in " + claimName(strings.TrimSuffix(obj, "/")), cause: cause}
		}
	}
	return &claimError{detail: "duplicate claim", cause: cause}
}

// claimName is a claim's pointer as PROTOCOL names it: "/budget/ai" is budget.ai.
func claimName(ptr string) string {
	return strings.ReplaceAll(strings.TrimPrefix(ptr, "/"), "/", ".")
}

// validate checks the claims' shape (not their times against a clock): what Verify requires of every token
// and what Mint refuses to sign without.
func (c *Claims) validate() error {
	switch {
	case !validName(c.Issuer):
		return badClaim("iss must be 1 to 256 bytes without control characters")
	case !validName(c.Subject):
		return badClaim("sub must be 1 to 256 bytes without control characters")
	case c.ExpiresAt.IsZero():
		return badClaim("exp is required")
	case !validDate(c.ExpiresAt):
		return badClaim("exp is out of range")
	case !c.NotBefore.IsZero() && !validDate(c.NotBefore):
		return badClaim("nbf is out of range")
	case !c.IssuedAt.IsZero() && !validDate(c.IssuedAt):
		return badClaim("iat is out of range")
	}
	for _, a := range c.Audience {
		if !validName(a) {
			return badClaim("aud entries must be 1 to 256 bytes without control characters")
		}
	}
	if err := c.validateBudget(); err != nil {
		return err
	}
	if err := c.Permissions.validate(); err != nil {
		return err
	}
	if c.SDKConfig != nil && !isObject(c.SDKConfig) {
		return badClaim("sdkConfig must be a JSON object")
	}
	if c.Template != "" && !ValidTemplate(c.Template) {
		return badClaim(templateDetail)
	}
	return nil
}

// templateDetail is the refusal of a template claim that is not a template name.
const templateDetail = "template must be 1 to 64 bytes of a-z, 0-9, '.', '_' or '-', starting with a letter or digit"

func (c *Claims) validateBudget() error {
	b := c.Budget
	if !c.HasBudget {
		if b.AIMicros != 0 || b.ComputeSeconds != 0 || b.Window != "" || !b.WindowStart.IsZero() {
			return badClaim("budget is set but HasBudget is false")
		}
		return nil
	}
	switch {
	case b.AIMicros < 0:
		return badClaim("budget.ai must not be negative")
	case b.ComputeSeconds < 0:
		return badClaim("budget.compute must not be negative")
	case !b.Window.Valid():
		return badClaim("budget.window must be one of hour, day, week, month, lifetime")
	case b.Window != WindowLifetime && b.WindowStart.IsZero():
		return badClaim("budget.windowStart is required unless budget.window is lifetime")
	case !b.WindowStart.IsZero() && !validDate(b.WindowStart):
		return badClaim("budget.windowStart is out of range")
	}
	return nil
}

func (p Permissions) validate() error {
	if p.MaxTurns < 0 {
		return badClaim("permissions.maxTurns must not be negative")
	}
	if p.Model != "" && !validName(p.Model) {
		return badClaim("permissions.model must be at most 256 bytes without control characters")
	}
	for _, list := range [][]string{p.Tools, p.BlockedTools} {
		for _, t := range list {
			if !validName(t) {
				return badClaim("permissions tool names must be 1 to 256 bytes without control characters")
			}
		}
	}
	return nil
}

// marshal is the payload JSON of valid claims. Times are written as whole Unix seconds.
func (c *Claims) marshal() ([]byte, error) {
	if err := c.validate(); err != nil {
		return nil, err
	}
	p := payload{Iss: c.Issuer, Sub: c.Subject, Aud: audience(c.Audience), SDKConfig: c.SDKConfig}
	p.Exp = dateOf(c.ExpiresAt)
	p.Nbf = dateOf(c.NotBefore)
	p.Iat = dateOf(c.IssuedAt)
	if c.Template != "" {
		p.Template = &c.Template
	}
	var err error
	if c.HasBudget {
		b := c.Budget
		b.WindowStart = b.WindowStart.UTC()
		if p.Budget, err = json.Marshal(b); err != nil {
			return nil, err
		}
	}
	if !c.Permissions.IsZero() {
		if p.Permissions, err = json.Marshal(c.Permissions); err != nil {
			return nil, err
		}
	}
	return json.Marshal(p)
}

// validName: 1 to 256 bytes of UTF-8 without control characters (C0, DEL, C1) or format characters (bidi
// overrides, zero-width), which have no place in ids that end up in logs, paths and dashboards.
func validName(s string) bool {
	if s == "" || len(s) > maxNameLen || !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if unicode.IsControl(r) || unicode.Is(unicode.Cf, r) {
			return false
		}
	}
	return true
}

func validDate(t time.Time) bool {
	u := t.Unix()
	return u >= 0 && u <= maxNumericDate
}

// present reports whether a raw claim was given and is not null.
func present(raw json.RawMessage) bool {
	return len(raw) > 0 && !bytes.Equal(bytes.TrimSpace(raw), []byte("null"))
}

func isObject(raw json.RawMessage) bool {
	raw = bytes.TrimSpace(raw)
	return len(raw) > 0 && raw[0] == '{' && json.Valid(raw)
}

// numericDate is a JWT NumericDate: a JSON number of seconds since the epoch, possibly fractional. Strings
// are refused (encoding/json would otherwise accept "123" into a json.Number).
type numericDate time.Time

func (d *numericDate) UnmarshalJSON(b []byte) error {
	if len(b) == 0 || (b[0] != '-' && (b[0] < '0' || b[0] > '9')) {
		return errors.New("date claim must be a number")
	}
	f, err := strconv.ParseFloat(string(b), 64)
	if err != nil {
		return errors.New("date claim is not a valid number")
	}
	if f < 0 || f > maxNumericDate {
		return errors.New("date claim is out of range")
	}
	sec, frac := math.Modf(f)
	*d = numericDate(time.Unix(int64(sec), int64(frac*1e9)).UTC())
	return nil
}

func (d numericDate) MarshalJSON() ([]byte, error) {
	return strconv.AppendInt(nil, time.Time(d).Unix(), 10), nil
}

func dateOf(t time.Time) *numericDate {
	if t.IsZero() {
		return nil
	}
	d := numericDate(t)
	return &d
}

// audience is the aud claim: one string or an array of strings; written as a string when it has one entry.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	b = bytes.TrimSpace(b)
	switch {
	case bytes.Equal(b, []byte("null")):
		return nil
	case len(b) > 0 && b[0] == '"':
		var s string
		if err := strictjson.Unmarshal(b, &s); err != nil {
			return err
		}
		*a = audience{s}
		return nil
	}
	var list []string
	if err := strictjson.Unmarshal(b, &list); err != nil {
		return errors.New("aud must be a string or an array of strings")
	}
	*a = list
	return nil
}

func (a audience) MarshalJSON() ([]byte, error) {
	if len(a) == 1 {
		return json.Marshal(a[0])
	}
	return json.Marshal([]string(a))
}
