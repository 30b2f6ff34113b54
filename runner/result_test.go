package runner_test

import (
	"context"
	"encoding/json"
	"math"
	"path/filepath"
	"testing"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/sqlite"
	"github.com/warren-mesh/warren/internal/modelserver"
	"github.com/warren-mesh/warren/internal/testenv"
	"github.com/warren-mesh/warren/internal/wire"
	"github.com/warren-mesh/warren/runner"
)

// agentRunner is a runner with the real CLI against a model server answering with scenario ("": auto) and
// a SQLite ledger as its Reserver; mut, when set, adjusts the model config.
func agentRunner(t *testing.T, scenario string, mut func(*runner.ModelConfig), mods ...func(*runner.Config)) (*harness, *modelserver.Server) {
	t.Helper()
	cli := testenv.ClaudeCLI(t)
	ms := modelserver.New(modelserver.Options{DefaultScenario: scenario})
	msURL, err := ms.Start("127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ms.Close() })
	ledger, err := sqlite.New(context.Background(), sqlite.Config{Path: filepath.Join(t.TempDir(), "ledger.db")})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = ledger.Close() })
	home := t.TempDir()
	h := startRunner(t, append([]func(*runner.Config){func(c *runner.Config) {
		c.Model = &runner.ModelConfig{CLIPath: cli, Home: home, Upstream: msURL, APIKey: "sk-real-key", Reserver: ledger}
		if mut != nil {
			mut(c.Model)
		}
	}}, mods...)...)
	return h, ms
}

// pricedRunner is agentRunner with a default model and prices other than the CLI's list prices, so that
// the CLI's own cost estimate and Warren's charge differ.
func pricedRunner(t *testing.T, scenario string) *harness {
	h, _ := agentRunner(t, scenario, func(mc *runner.ModelConfig) {
		price := billing.Price{Input: 1_000_000, Output: 2_000_000, CacheRead: 100_000, CacheCreation: 1_250_000}
		mc.DefaultModel, mc.Prices = "claude-sonnet-4-5", billing.Prices{Default: price}
	})
	return h
}

// costsAgree checks that a result's total_cost_usd, its models' costUSD and Warren's cost extension are
// the same amount.
func costsAgree(t *testing.T, res map[string]any) float64 {
	t.Helper()
	total, _ := res["total_cost_usd"].(float64)
	cost, _ := res["cost"].(map[string]any)
	micros, _ := cost["ai_microdollars"].(float64)
	sum := 0.0
	usage, _ := res["modelUsage"].(map[string]any)
	for name, u := range usage {
		c, ok := u.(map[string]any)["costUSD"].(float64)
		if !ok {
			t.Errorf("modelUsage[%s] has no costUSD: %v", name, u)
		}
		sum += c
	}
	if len(usage) == 0 || math.Abs(sum-total) > 1e-9 || math.Abs(micros/1e6-total) > 1e-9 {
		b, _ := json.Marshal(res)
		t.Errorf("costs disagree: total_cost_usd %v, modelUsage sum %v, cost.ai_microdollars %v in %s", total, sum, micros, b)
	}
	return total
}

// TestResultCostsAgree: within one result, total_cost_usd, modelUsage[*].costUSD and the cost extension
// are Warren's charge, not the CLI's own estimate.
func TestResultCostsAgree(t *testing.T) {
	h := pricedRunner(t, "plain")
	grant := wire.Grant{Issuer: "acme", User: "alice", Window: "lifetime", AIMicros: 50_000_000, ComputeSeconds: -1}
	res, _ := turn(t, h.dialAs(t, grant), "", "hello")
	if res["is_error"] == true {
		t.Fatalf("result %v", res)
	}
	if total := costsAgree(t, res); total <= 0 {
		t.Errorf("total_cost_usd %v", total)
	}
}

// TestBudgetErrorResult: a turn the AI budget ends is the Agent SDK's error result: subtype
// error_max_budget_usd, is_error, and an errors list saying why; its costs agree too.
func TestBudgetErrorResult(t *testing.T) {
	h := pricedRunner(t, "huge_usage") // one answer reports 5M output tokens: far beyond the budget
	grant := wire.Grant{Issuer: "acme", User: "bob", Window: "lifetime", AIMicros: 1_000_000, ComputeSeconds: -1}
	res, _ := turn(t, h.dialAs(t, grant), "", "hello")
	if res["subtype"] != "error_max_budget_usd" || res["is_error"] != true {
		t.Fatalf("result %v, want error_max_budget_usd", res)
	}
	errs, _ := res["errors"].([]any)
	if len(errs) == 0 {
		t.Fatalf("error result without errors: %v", res)
	}
	for _, e := range errs {
		if s, _ := e.(string); s == "" {
			t.Errorf("errors %v: want messages", errs)
		}
	}
	costsAgree(t, res)
}
