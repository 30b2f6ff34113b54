package scheduler_test

import (
	"testing"
	"testing/synctest"
	"time"

	"github.com/warren-mesh/warren/scheduler"
)

// Status follows a sandbox's life without starting one: absent before, running while it runs, asleep after
// it exits, absent again once a running placement's lease lapsed (its region is gone).
func TestStatusFollowsTheSandbox(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newCore(t, false)
		s := c.start(scheduler.Config{LeaseTTL: 30 * time.Second})
		status := func() scheduler.Status {
			t.Helper()
			st, err := s.Status(t.Context(), "iss", "u", time.Now())
			if err != nil {
				t.Fatal(err)
			}
			return st
		}
		if st := status(); st != (scheduler.Status{State: scheduler.StateAbsent}) {
			t.Fatalf("before any start: %+v", st)
		}
		if st := status(); st.State != scheduler.StateAbsent || s.Live() != 0 {
			t.Fatalf("Status started a sandbox: %+v, %d live", st, s.Live())
		}
		e, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "u", Account: lifetime("u"), ComputeLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		if st := status(); st.State != scheduler.StateRunning || st.Region != "r1" || st.Epoch != e.Epoch || st.Since.IsZero() {
			t.Fatalf("while running: %+v (entry epoch %d)", st, e.Epoch)
		}
		c.driver.end(e.Alloc)
		synctest.Wait()
		if st := status(); st.State != scheduler.StateAsleep || st.Epoch != e.Epoch {
			t.Fatalf("after the exit: %+v", st)
		}

		// A running placement whose lease lapsed reads absent.
		e2, err := s.Ensure(t.Context(), scheduler.Request{Issuer: "iss", User: "v", Account: lifetime("v"), ComputeLimit: -1})
		if err != nil {
			t.Fatal(err)
		}
		lease := c.placement("v").Lease
		st, err := s.Status(t.Context(), "iss", "v", lease)
		if err != nil || st.State != scheduler.StateAbsent || st.Epoch != e2.Epoch {
			t.Fatalf("at the lease's end: %+v, %v; want absent", st, err)
		}
	})
}
