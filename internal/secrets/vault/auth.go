package vault

import (
	"context"
	"errors"
	"fmt"
	"time"

	vaultapi "github.com/hashicorp/vault/api"

	"github.com/warren-mesh/warren/internal/secrets"
)

// Login retry delays: doubling from the first to the last while Vault refuses or cannot be reached.
const (
	loginRetryFirst = 250 * time.Millisecond
	loginRetryMax   = 10 * time.Second
)

// run keeps the Store's token alive until ctx ends: it renews the token with a LifetimeWatcher and, with a
// login method, logs in again when the token can no longer be renewed (its max TTL is near, or renewals kept
// failing until it expired). first is the token New logged in with, nil if there is none yet. A static
// token is renewed while it is renewable and then left to expire: there is nothing to log in with.
func (s *Store) run(ctx context.Context, first *vaultapi.Secret) {
	defer close(s.done)
	sec := first
	for {
		if sec == nil {
			var err error
			if sec, err = s.authenticateRetrying(ctx); err != nil {
				return
			}
		}
		if sec.Auth == nil || sec.Auth.LeaseDuration <= 0 {
			return // a token that never expires: nothing to keep alive
		}
		s.watch(ctx, sec)
		if ctx.Err() != nil || s.login == nil {
			return
		}
		sec = nil
	}
}

// authenticateRetrying calls authenticate until it succeeds or ctx ends; with a static token it gives up on
// a refusal (the token is invalid: no retry can help).
func (s *Store) authenticateRetrying(ctx context.Context) (*vaultapi.Secret, error) {
	delay := loginRetryFirst
	for {
		sec, err := s.authenticate(ctx)
		if err == nil {
			return sec, nil
		}
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		if s.login == nil && !errors.Is(err, secrets.ErrUnavailable) {
			s.log.Error("vault token lookup refused; the token is not renewed", "err", err)
			return nil, err
		}
		s.log.Warn("vault login failed; retrying", "method", s.method(), "retry_in", delay, "err", err)
		s.mu.Lock()
		s.loginErr = err
		s.mu.Unlock()
		t := time.NewTimer(delay)
		select {
		case <-ctx.Done():
			t.Stop()
			return nil, ctx.Err()
		case <-t.C:
		}
		delay = min(2*delay, loginRetryMax)
	}
}

// authenticate logs in once (AppRole or JWT) and installs the new token, or, with a static token, looks it
// up to learn whether and for how long it can be renewed. A refusal wraps ErrLogin; no answer is
// secrets.ErrUnavailable.
func (s *Store) authenticate(ctx context.Context) (*vaultapi.Secret, error) {
	ctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	if s.login == nil {
		return s.lookupSelf(ctx)
	}
	var path string
	var body map[string]any
	switch {
	case s.cfg.AppRole != nil:
		path = "auth/" + s.cfg.AppRole.Mount + "/login"
		body = map[string]any{"role_id": s.cfg.AppRole.RoleID, "secret_id": s.cfg.AppRole.SecretID}
	default:
		jwt, err := s.readJWT()
		if err != nil {
			return nil, err
		}
		path = "auth/" + s.cfg.JWT.Mount + "/login"
		body = map[string]any{"role": s.cfg.JWT.Role, "jwt": jwt}
	}
	sec, err := s.login.Logical().WriteWithContext(ctx, path, body)
	if err != nil {
		err = classify("vault login at "+path, "nothing (login paths are unauthenticated)", err)
		if errors.Is(err, secrets.ErrUnavailable) || errors.Is(err, context.Canceled) {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %w", ErrLogin, err)
	}
	if sec == nil || sec.Auth == nil || sec.Auth.ClientToken == "" {
		return nil, fmt.Errorf("%w: vault login at %s answered without a token", ErrLogin, path)
	}
	s.client.SetToken(sec.Auth.ClientToken)
	s.mu.Lock()
	s.authErr, s.loginErr = nil, nil
	s.setExpiryLocked(sec.Auth.LeaseDuration)
	s.mu.Unlock()
	s.log.Info("vault login", "method", s.method(), "ttl", time.Duration(sec.Auth.LeaseDuration)*time.Second,
		"renewable", sec.Auth.Renewable)
	return sec, nil
}

// lookupSelf describes the static token as a login answer, for the LifetimeWatcher.
func (s *Store) lookupSelf(ctx context.Context) (*vaultapi.Secret, error) {
	sec, err := s.client.Auth().Token().LookupSelfWithContext(ctx)
	if err != nil {
		return nil, classify("vault token lookup", "read on auth/token/lookup-self (the default policy)", err)
	}
	if sec == nil || sec.Data == nil {
		return nil, errors.New("vault token lookup: empty answer")
	}
	ttl, err := intField(sec.Data["ttl"])
	if err != nil {
		return nil, fmt.Errorf("vault token lookup: ttl: %w", err)
	}
	renewable, _ := sec.Data["renewable"].(bool)
	if ttl > 0 && !renewable {
		ttl = 0 // it will expire and nothing can be done about it
	}
	s.mu.Lock()
	if ttl > 0 {
		s.setExpiryLocked(ttl)
	}
	s.mu.Unlock()
	return &vaultapi.Secret{Auth: &vaultapi.SecretAuth{ClientToken: s.cfg.Token, LeaseDuration: ttl, Renewable: renewable}}, nil
}

func (s *Store) setExpiryLocked(leaseSeconds int) {
	if leaseSeconds <= 0 {
		s.expiry = time.Time{}
		return
	}
	s.expiry = s.wall().Add(time.Duration(leaseSeconds) * time.Second)
}

// watch renews sec's token until it can no longer be renewed or ctx ends, and waits for the watcher.
func (s *Store) watch(ctx context.Context, sec *vaultapi.Secret) {
	w, err := s.client.NewLifetimeWatcher(&vaultapi.LifetimeWatcherInput{
		Secret:        sec,
		RenewBehavior: vaultapi.RenewBehaviorIgnoreErrors,
	})
	if err != nil {
		s.log.Error("vault token watcher", "err", err)
		return
	}
	go w.Start()
	for {
		select {
		case <-ctx.Done():
			w.Stop()
			<-w.DoneCh()
			return
		case err := <-w.DoneCh():
			if err != nil {
				s.log.Warn("vault token renewal ended", "method", s.method(), "err", err)
			} else {
				s.log.Info("vault token can no longer be renewed", "method", s.method())
			}
			return
		case r := <-w.RenewCh():
			if r == nil || r.Secret == nil || r.Secret.Auth == nil {
				continue
			}
			lease := r.Secret.Auth.LeaseDuration
			s.mu.Lock()
			if lease > 0 {
				s.setExpiryLocked(lease)
			} else {
				s.expiry = s.wall() // renewed to nothing: expired
			}
			s.mu.Unlock()
			s.log.Debug("vault token renewed", "ttl", time.Duration(lease)*time.Second)
			// A renewal shorter than the login's TTL means the token's max TTL is near: with a way to log in,
			// do it now, while the token is still valid, rather than in the watcher's last grace fraction.
			if s.login != nil && lease < sec.Auth.LeaseDuration {
				s.log.Info("vault token nears its max TTL; logging in again", "method", s.method())
				w.Stop()
				<-w.DoneCh()
				return
			}
		}
	}
}
