package roles

import (
	"context"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/hashicorp/nomad/api"

	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/scheduler"
	schedcockroach "github.com/warren-mesh/warren/scheduler/cockroach"
	"github.com/warren-mesh/warren/scheduler/nomad"
	"github.com/warren-mesh/warren/scheduler/remote"
	"github.com/warren-mesh/warren/scheduler/runnerlease"
)

func init() {
	register("scheduler", "run the scheduler role: placements (CockroachDB), sandboxes on Nomad, runners found through Consul", runScheduler)
}

// schedulerKeyEnv is the shared key between edges and schedulers (the scheduler API hands out runner keys).
const schedulerKeyEnv = "WARREN_SCHEDULER_KEY"

func schedulerKey() (string, error) {
	k := os.Getenv(schedulerKeyEnv)
	_ = os.Unsetenv(schedulerKeyEnv)
	if err := remote.CheckKey(k); err != nil {
		return "", fmt.Errorf("$%s: %w", schedulerKeyEnv, err)
	}
	return k, nil
}

func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	var (
		c                           roleCommon
		p                           prodFlags
		nomadAddr, binary, drv, dcs string
		cpu, mem, warmPool          int
		startTimeout, killTimeout   time.Duration
		leaseTTL                    time.Duration
		runnerArgs                  multiFlag
		runnerEnv                   multiFlag
	)
	c.register(fs, ":7300")
	p.registerConsul(fs)
	p.registerDB(fs)
	fs.StringVar(&nomadAddr, "nomad", env.First("WARREN_NOMAD_ADDR", "NOMAD_ADDR"), "Nomad HTTP address; token from $NOMAD_TOKEN ($WARREN_NOMAD_ADDR, $NOMAD_ADDR)")
	fs.StringVar(&dcs, "datacenter", env.Or("WARREN_DATACENTER", "dc1"), "Nomad datacenter of sandboxes ($WARREN_DATACENTER)")
	fs.StringVar(&binary, "runner-binary", env.Or("WARREN_RUNNER_BINARY", "/usr/local/bin/warren"), "path of warren on the Nomad clients ($WARREN_RUNNER_BINARY)")
	fs.StringVar(&drv, "nomad-driver", env.Or("WARREN_NOMAD_DRIVER", "exec"), "task driver of sandboxes: exec (production) or raw_exec (tests)")
	fs.IntVar(&warmPool, "warm-pool", 0, "warm runners to keep started ahead of demand (claimed in milliseconds, refilled in the background)")
	fs.IntVar(&cpu, "runner-cpu", 500, "CPU of a sandbox, MHz")
	fs.IntVar(&mem, "runner-memory", 1024, "memory of a sandbox, MiB")
	fs.DurationVar(&startTimeout, "start-timeout", 60*time.Second, "how long a sandbox may take to become ready")
	fs.DurationVar(&killTimeout, "kill-timeout", 45*time.Second, "grace between SIGTERM and SIGKILL of a sandbox (covers its final snapshot)")
	fs.DurationVar(&leaseTTL, "lease-ttl", 30*time.Second, "how long a user stays held by this region without a renewal; a runner not told of a renewal stops before its lease ends (a scheduler restart must adopt its runners within it)")
	var templatePath, spoolPath string
	fs.StringVar(&spoolPath, "spool", env.Or("WARREN_SCHEDULER_SPOOL", "scheduler-usage.spool"), "file where compute usage waits while CockroachDB is unreachable, replayed when it is back; keep it on a disk that outlives a restart ($WARREN_SCHEDULER_SPOOL)")
	fs.StringVar(&templatePath, "sandbox-template", os.Getenv("WARREN_SANDBOX_TEMPLATE"), "sandbox job template (HCL2 with the variables of jobs/sandbox.nomad.hcl); default: the built-in one. Use your own to add Vault templates for the runners' secrets (model key, database URL, S3 keys) instead of -runner-env")
	fs.Var(&runnerArgs, "runner-arg", "extra flag for every runner (repeatable), e.g. -runner-arg=-idle-timeout=10m")
	fs.Var(&runnerEnv, "runner-env", "K=V in every runner's environment (repeatable; prefer Vault templates for secrets)")
	runnerWebhook := fs.String("runner-webhook-secret", "", "Vault KV v2 path of the operator's task webhook secret (key secret) each sandbox job renders for its runner's -webhook-secret-file (the template's webhook_secret_path); unset: task webhooks are refused")
	runnerVaultRole := fs.String("runner-vault-role", "", "with -runner-webhook-secret: the Vault role the sandbox jobs log in with (default: the template's, warren-runner)")
	log, err := c.parse(fs, args, stderr, "scheduler")
	if err != nil {
		return err
	}
	key, err := schedulerKey()
	if err != nil {
		return err
	}
	reg, err := p.openConsul(false)
	if err != nil {
		return err
	}
	defer reg.Close(context.WithoutCancel(ctx))
	pool, ledger, err := p.openLedger(ctx)
	if err != nil {
		return err
	}
	defer pool.Close()
	placements, err := schedcockroach.New(ctx, schedcockroach.Config{Pool: pool})
	if err != nil {
		return err
	}
	ncfg := api.DefaultConfig()
	if nomadAddr != "" {
		ncfg.Address = nomadAddr
	}
	nc, err := api.NewClient(ncfg)
	if err != nil {
		return fmt.Errorf("nomad client: %w", err)
	}
	var template []byte
	if templatePath != "" {
		if template, err = os.ReadFile(templatePath); err != nil {
			return fmt.Errorf("-sandbox-template: %w", err)
		}
	}
	env, err := runnerEnv.pairs()
	if err != nil {
		return fmt.Errorf("-runner-env: %w", err)
	}
	metrics := newRoleMetrics()
	// Runners register themselves in Consul; they find it at the scheduler's address.
	args2 := append([]string{"-consul", p.consulAddr}, runnerArgs...)
	driver, err := nomad.New(nomad.Config{
		Client: nc, Registry: reg, Template: template, Datacenters: []string{dcs}, Binary: binary, Driver: drv,
		RunnerArgs: args2, Env: env, CPU: cpu, MemoryMB: mem, KillTimeout: killTimeout,
		WebhookSecretPath: *runnerWebhook, VaultRole: *runnerVaultRole,
		Logger: log.With("component", "nomad"), Metrics: metrics,
		Pool: nomad.PoolConfig{Size: warmPool, Region: c.region, Registry: reg},
	})
	if err != nil {
		return err
	}
	defer driver.Close()
	// Compute usage the ledger cannot take now waits in the spool and is replayed (docs/ARCHITECTURE.md#spool).
	sp, err := spool.Open(spoolPath, ledger, spool.Options{Logger: log.With("component", "spool"), Metrics: metrics})
	if err != nil {
		return fmt.Errorf("usage spool: %w", err)
	}
	defer func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sp.Flush(fctx) // what stays is replayed by the next scheduler that opens the file
		_ = sp.Close()
	}()
	s, err := scheduler.New(scheduler.Config{
		Region: c.region, Placements: placements, Registry: reg, Driver: driver, Ledger: sp, RunnerRegisters: true,
		StartTimeout: startTimeout, LeaseTTL: leaseTTL, Leases: &runnerlease.Client{}, Logger: log, Metrics: metrics,
	})
	if err != nil {
		return err
	}
	defer func() {
		// The runners keep serving: closing records their compute buckets that are over, bounded.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), schedulerCloseTimeout)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			log.Warn("close the scheduler", "err", err)
		}
	}()
	adoptCtx, stopAdopting := context.WithCancel(ctx)
	var adopting sync.WaitGroup
	adopting.Go(func() { adoptRunners(adoptCtx, s, log) })
	defer adopting.Wait() // before s.Close and the stores' closing
	defer stopAdopting()
	return serveRole(ctx, "scheduler", c, remote.Handler(s, key, log), metrics, stdout, log)
}

// schedulerCloseTimeout bounds the scheduler role's Scheduler.Close: recording the supervised runners'
// last compute buckets (each write bounded by 5 s) before the process exits.
const schedulerCloseTimeout = time.Minute

// adoptRunners takes over the region's runners that a previous scheduler process left serving (so their
// compute is metered again and their placements sleep when they exit), retrying with backoff (5 s doubling
// to 5 min) while the registry, the placements or Nomad cannot be reached, until it succeeds or ctx ends.
func adoptRunners(ctx context.Context, s *scheduler.Scheduler, log *slog.Logger) {
	wait := 5 * time.Second
	for {
		n, err := s.Adopt(ctx)
		if err == nil {
			log.Info("runners of the previous scheduler adopted", "count", n)
			return
		}
		if ctx.Err() != nil {
			return
		}
		log.Warn("adopt the previous scheduler's runners; retrying", "adopted", n, "retry_in", wait, "err", err)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(2*wait, 5*time.Minute)
	}
}
