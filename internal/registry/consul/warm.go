package consul

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"sort"
	"sync"
	"time"

	"github.com/hashicorp/consul/api"

	"github.com/warren-mesh/warren/internal/registry"
)

// The warm pool (issue 4): runners started before anyone needs them, without a user. Each announces itself
// under <prefix>warm/<region>/<alloc>, held by its own session (so the key vanishes with the process); a
// scheduler claims one by deleting its key with a check-and-set, so of many claimants exactly one gets it,
// then tells the runner which sandbox it now is.

var warmName = regexp.MustCompile(`^[A-Za-z0-9._-]{1,128}$`)

func validateWarm(w registry.Warm) error {
	if !warmName.MatchString(w.Region) || !warmName.MatchString(w.Alloc) || w.Addr == "" || w.Key == "" ||
		(w.Job != "" && !warmName.MatchString(w.Job)) {
		return fmt.Errorf("%w: a warm runner needs region and alloc of [A-Za-z0-9._-]{1,128}, an address and a key", ErrBadEntry)
	}
	return nil
}

// decodeWarm parses a warm key's value (written by another process: untrusted).
func decodeWarm(b []byte) (registry.Warm, error) {
	var w registry.Warm
	d := json.NewDecoder(bytes.NewReader(b))
	d.DisallowUnknownFields()
	if err := d.Decode(&w); err != nil {
		return registry.Warm{}, fmt.Errorf("%w: warm runner: %v", ErrBadEntry, err)
	}
	if d.More() {
		return registry.Warm{}, fmt.Errorf("%w: warm runner: trailing data", ErrBadEntry)
	}
	if err := validateWarm(w); err != nil {
		return registry.Warm{}, err
	}
	return w, nil
}

func (r *Registry) warmPrefix(region string) string { return r.cfg.Prefix + "warm/" + region + "/" }

// WarmLease keeps a warm runner announced until Release or until its session is lost.
type WarmLease struct {
	r           *Registry
	key         string
	session     string
	lost        chan struct{}
	once        sync.Once
	claimed     chan struct{}
	claimedOnce sync.Once
	cancel      context.CancelFunc
	wg          sync.WaitGroup
}

// Lost is closed when the session is gone (Consul unreachable for a whole TTL, or destroyed).
func (l *WarmLease) Lost() <-chan struct{} { return l.lost }

// Claimed is closed once the announcement is no longer this lease's: a scheduler claimed it (deleted the
// key), or the session ended and took the key with it. A claimed runner expects its assignment next; one
// that does not arrive means the claimant gave up or died, and the runner should exit rather than wait
// for ever, unclaimable.
func (l *WarmLease) Claimed() <-chan struct{} { return l.claimed }

// Release stops renewing, deletes the announcement if this session still holds it (a missing key is fine)
// and destroys the session.
func (l *WarmLease) Release(ctx context.Context) error {
	l.cancel()
	l.wg.Wait()
	// Delete, not KV().Release: a released key stays without a session and would count as a warm runner
	// nobody can claim. The session check keeps a key some other session holds now.
	if _, err := l.r.txn(ctx, api.KVTxnOps{
		{Verb: api.KVCheckSession, Key: l.key, Session: l.session},
		{Verb: api.KVDelete, Key: l.key},
	}); err != nil {
		return wrap(ctx, err, "release warm runner %s", l.key)
	}
	w, cancel := l.r.write(ctx)
	defer cancel()
	if _, err := l.r.client.Session().Destroy(l.session, w); err != nil {
		return wrap(ctx, err, "release warm runner %s: destroy session", l.key)
	}
	return nil
}

// watchClaim closes claimed once l's key is gone or held by another session, with blocking queries on the
// key until ctx ends. While Consul is unreachable it keeps trying (Lost reports that).
func (l *WarmLease) watchClaim(ctx context.Context) {
	if l.r.awaitNotHeld(ctx, l.key, l.session, 0) == nil {
		l.claimedOnce.Do(func() { close(l.claimed) })
	}
}

// HoldWarm announces w as a warm runner of its region. The session has the Registry's TTL and the delete
// behaviour: the announcement disappears when the runner does.
func (r *Registry) HoldWarm(ctx context.Context, w registry.Warm) (*WarmLease, error) {
	if err := validateWarm(w); err != nil {
		return nil, err
	}
	value, err := json.Marshal(w)
	if err != nil {
		return nil, err
	}
	wo, cancel := r.write(ctx)
	defer cancel()
	session, _, err := r.client.Session().Create(&api.SessionEntry{
		Name: "warren-warm-" + w.Alloc, TTL: r.cfg.SessionTTL.String(), Behavior: api.SessionBehaviorDelete,
		LockDelay: r.cfg.LockDelay, NodeChecks: []string{"serfHealth"},
	}, wo)
	if err != nil {
		return nil, wrap(ctx, err, "create warm session")
	}
	key := r.warmPrefix(w.Region) + w.Alloc
	ok, _, err := r.client.KV().Acquire(&api.KVPair{Key: key, Value: value, Session: session}, wo)
	if err != nil || !ok {
		_, _ = r.client.Session().Destroy(session, nil)
		if err == nil {
			err = fmt.Errorf("key %s is held by another session", key)
		}
		return nil, wrap(ctx, err, "announce warm runner")
	}
	lctx, lcancel := context.WithCancel(r.ctx)
	l := &WarmLease{r: r, key: key, session: session, lost: make(chan struct{}), claimed: make(chan struct{}), cancel: lcancel}
	l.wg.Go(func() { l.watchClaim(lctx) })
	l.wg.Add(1)
	go func() {
		defer l.wg.Done()
		last := time.Now()
		t := time.NewTicker(r.cfg.SessionTTL / 3)
		defer t.Stop()
		for {
			select {
			case <-lctx.Done():
				return
			case <-t.C:
			}
			q, cancel := r.write(lctx)
			entry, _, err := r.client.Session().Renew(session, q)
			cancel()
			switch {
			case err == nil && entry == nil: // Consul no longer knows the session
				l.once.Do(func() { close(l.lost) })
				return
			case err == nil:
				last = time.Now()
			case time.Since(last) > r.cfg.SessionTTL:
				l.once.Do(func() { close(l.lost) })
				return
			}
		}
	}()
	return l, nil
}

// CountWarm is the number of warm runners announced in region: keys held by a session. A key without one
// (its runner is gone) is not counted; ClaimWarm deletes it.
func (r *Registry) CountWarm(ctx context.Context, region string) (int, error) {
	ws, err := r.ListWarm(ctx, region)
	return len(ws), err
}

// ListWarm returns the warm runners announced in region (held by a session; malformed ones left out).
func (r *Registry) ListWarm(ctx context.Context, region string) ([]registry.Warm, error) {
	q, cancel := r.query(ctx)
	defer cancel()
	pairs, _, err := r.client.KV().List(r.warmPrefix(region), q)
	if err != nil {
		return nil, wrap(ctx, err, "list warm runners")
	}
	var out []registry.Warm
	for _, p := range pairs {
		if p.Session == "" {
			continue
		}
		if w, err := decodeWarm(p.Value); err == nil {
			out = append(out, w)
		}
	}
	return out, nil
}

// ClaimWarm takes one warm runner of region out of the pool: its announcement is deleted with a
// check-and-set, so no other claimant gets it. registry.ErrNoWarm when none is left. Malformed announcements
// and keys no session holds (their runners are gone) are deleted on the way.
func (r *Registry) ClaimWarm(ctx context.Context, region string) (registry.Warm, error) {
	q, cancel := r.query(ctx)
	pairs, _, err := r.client.KV().List(r.warmPrefix(region), q)
	cancel()
	if err != nil {
		return registry.Warm{}, wrap(ctx, err, "list warm runners")
	}
	sort.Slice(pairs, func(i, j int) bool { return pairs[i].CreateIndex < pairs[j].CreateIndex }) // oldest first
	for _, p := range pairs {
		w, decErr := decodeWarm(p.Value)
		// check-index fails on a key that is gone or changed (a plain delete-cas succeeds on a missing key).
		res, err := r.txn(ctx, api.KVTxnOps{
			{Verb: api.KVCheckIndex, Key: p.Key, Index: p.ModifyIndex},
			{Verb: api.KVDelete, Key: p.Key},
		})
		if err != nil {
			return registry.Warm{}, wrap(ctx, err, "claim warm runner")
		}
		switch {
		case !res.ok:
			continue // another scheduler was faster, or the key changed
		case p.Session == "":
			r.log.Info("deleted a warm runner announcement no session holds", "key", p.Key)
			continue
		case decErr != nil:
			r.log.Warn("deleted a malformed warm runner announcement", "key", p.Key, "err", decErr)
			continue
		}
		return w, nil
	}
	return registry.Warm{}, registry.ErrNoWarm
}
