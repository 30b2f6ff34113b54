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
	"github.com/prometheus/client_golang/prometheus"

	"github.com/warren-mesh/warren/billing"
	"github.com/warren-mesh/warren/billing/spool"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	"github.com/warren-mesh/warren/cmd/warren/internal/help"
	"github.com/warren-mesh/warren/internal/registry/consul"
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

// schedulerFlags are warren scheduler's flags.
type schedulerFlags struct {
	common                         roleCommon
	prod                           prodFlags
	nomadAddr, binary, drv, dcs    string
	cpu, mem, warmPool             int
	startTimeout, killTimeout      time.Duration
	leaseTTL                       time.Duration
	runnerArgs, runnerEnv          multiFlag
	templatePath, spoolPath        string
	runnerWebhook, runnerVaultRole string
}

// register defines every flag of warren scheduler on fs.
func (f *schedulerFlags) register(fs *flag.FlagSet) {
	f.common.register(fs, ":7300")
	f.prod.registerConsul(fs)
	f.prod.registerDB(fs)
	fs.StringVar(&f.nomadAddr, "nomad", env.First("WARREN_NOMAD_ADDR", "NOMAD_ADDR"), "Nomad HTTP address; token from $NOMAD_TOKEN ($WARREN_NOMAD_ADDR, $NOMAD_ADDR)")
	fs.StringVar(&f.dcs, "datacenter", env.Or("WARREN_DATACENTER", "dc1"), "Nomad datacenter of sandboxes ($WARREN_DATACENTER)")
	fs.StringVar(&f.binary, "runner-binary", env.Or("WARREN_RUNNER_BINARY", "/usr/local/bin/warren"), "path of warren on the Nomad clients ($WARREN_RUNNER_BINARY)")
	fs.StringVar(&f.drv, "nomad-driver", env.Or("WARREN_NOMAD_DRIVER", "exec"), "task driver of sandboxes: exec (production) or raw_exec (tests)")
	fs.IntVar(&f.warmPool, "warm-pool", 0, "warm runners to keep started ahead of demand (claimed in milliseconds, refilled in the background)")
	fs.IntVar(&f.cpu, "runner-cpu", 500, "CPU of a sandbox, MHz")
	fs.IntVar(&f.mem, "runner-memory", 1024, "memory of a sandbox, MiB")
	fs.DurationVar(&f.startTimeout, "start-timeout", 60*time.Second, "how long a sandbox may take to become ready")
	fs.DurationVar(&f.killTimeout, "kill-timeout", 45*time.Second, "grace between SIGTERM and SIGKILL of a sandbox (covers its final snapshot)")
	fs.DurationVar(&f.leaseTTL, "lease-ttl", 30*time.Second, "how long a user stays held by this region without a renewal; a runner not told of a renewal stops before its lease ends (a scheduler restart must adopt its runners within it)")
	fs.StringVar(&f.spoolPath, "spool", env.Or("WARREN_SCHEDULER_SPOOL", "scheduler-usage.spool"), "file where compute usage waits while CockroachDB is unreachable, replayed when it is back; keep it on a disk that outlives a restart ($WARREN_SCHEDULER_SPOOL)")
	fs.StringVar(&f.templatePath, "sandbox-template", os.Getenv("WARREN_SANDBOX_TEMPLATE"), "sandbox job template (HCL2 with the variables of jobs/sandbox.nomad.hcl); default: the built-in one. Use your own to add Vault templates for the runners' secrets (model key, database URL, S3 keys) instead of -runner-env")
	fs.Var(&f.runnerArgs, "runner-arg", "extra flag for every runner (repeatable), e.g. -runner-arg=-idle-timeout=10m")
	fs.Var(&f.runnerEnv, "runner-env", "K=V in every runner's environment (repeatable; prefer Vault templates for secrets)")
	fs.StringVar(&f.runnerWebhook, "runner-webhook-secret", "", "Vault KV v2 path of the operator's task webhook secret (key secret) each sandbox job renders for its runner's -webhook-secret-file (the template's webhook_secret_path); unset: task webhooks are refused")
	fs.StringVar(&f.runnerVaultRole, "runner-vault-role", "", "with -runner-webhook-secret: the Vault role the sandbox jobs log in with (default: the template's, warren-runner)")
}

// driverConfig is the Nomad driver's configuration over the Consul registry reg.
func (f *schedulerFlags) driverConfig(reg *consul.Registry, log *slog.Logger, metrics prometheus.Registerer) (nomad.Config, error) {
	ncfg := api.DefaultConfig()
	if f.nomadAddr != "" {
		ncfg.Address = f.nomadAddr
	}
	nc, err := api.NewClient(ncfg)
	if err != nil {
		return nomad.Config{}, fmt.Errorf("nomad client: %w", err)
	}
	var template []byte
	if f.templatePath != "" {
		if template, err = os.ReadFile(f.templatePath); err != nil {
			return nomad.Config{}, fmt.Errorf("-sandbox-template: %w", err)
		}
	}
	env, err := f.runnerEnv.pairs()
	if err != nil {
		return nomad.Config{}, fmt.Errorf("-runner-env: %w", err)
	}
	// Runners register themselves in Consul; they find it at the scheduler's address.
	runnerArgs := append([]string{"-consul", f.prod.consulAddr}, f.runnerArgs...)
	return nomad.Config{
		Client: nc, Registry: reg, Template: template, Datacenters: []string{f.dcs}, Binary: f.binary, Driver: f.drv,
		RunnerArgs: runnerArgs, Env: env, CPU: f.cpu, MemoryMB: f.mem, KillTimeout: f.killTimeout,
		WebhookSecretPath: f.runnerWebhook, VaultRole: f.runnerVaultRole,
		Logger: log.With("component", "nomad"), Metrics: metrics,
		Pool: nomad.PoolConfig{Size: f.warmPool, Region: f.common.region, Registry: reg},
	}, nil
}

// config is the scheduler's configuration over its placements, registry, driver and usage ledger.
func (f *schedulerFlags) config(placements scheduler.Placements, reg *consul.Registry, driver scheduler.Driver, ledger billing.Ledger, log *slog.Logger, metrics prometheus.Registerer) scheduler.Config {
	return scheduler.Config{
		Region: f.common.region, Placements: placements, Registry: reg, Driver: driver, Ledger: ledger, RunnerRegisters: true,
		StartTimeout: f.startTimeout, LeaseTTL: f.leaseTTL, Leases: &runnerlease.Client{}, Logger: log, Metrics: metrics,
	}
}

func runScheduler(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("scheduler", flag.ContinueOnError)
	fs.SetOutput(stderr)
	help.Set(fs, "usage: warren scheduler [flags]\n\nRuns the scheduler role: places and starts sandboxes.")
	var f schedulerFlags
	f.register(fs)
	log, err := f.common.parse(fs, args, stderr, "scheduler")
	if err != nil {
		return err
	}
	key, err := schedulerKey()
	if err != nil {
		return err
	}
	var cl closers
	defer cl.close()
	reg, err := f.prod.openConsul(false)
	if err != nil {
		return err
	}
	cl.add(func() { _ = reg.Close(context.WithoutCancel(ctx)) })
	pool, ledger, err := f.prod.openLedger(ctx)
	if err != nil {
		return err
	}
	cl.add(pool.Close)
	placements, err := schedcockroach.New(ctx, schedcockroach.Config{Pool: pool})
	if err != nil {
		return err
	}
	metrics := newRoleMetrics()
	dcfg, err := f.driverConfig(reg, log, metrics)
	if err != nil {
		return err
	}
	driver, err := nomad.New(dcfg)
	if err != nil {
		return err
	}
	cl.add(func() { driver.Close() })
	sp, err := openSchedulerSpool(f.spoolPath, ledger, log, metrics, &cl)
	if err != nil {
		return err
	}
	s, err := scheduler.New(f.config(placements, reg, driver, sp, log, metrics))
	if err != nil {
		return err
	}
	superviseScheduler(ctx, s, log, &cl)
	return serveRole(ctx, "scheduler", f.common, remote.Handler(s, key, log), metrics, stdout, log)
}

// openSchedulerSpool opens the spool where compute usage the ledger cannot take now waits and is replayed
// (docs/ARCHITECTURE.md#spool); cl gets its flushing and closing.
func openSchedulerSpool(path string, ledger billing.Ledger, log *slog.Logger, metrics prometheus.Registerer, cl *closers) (*spool.Spool, error) {
	sp, err := spool.Open(path, ledger, spool.Options{Logger: log.With("component", "spool"), Metrics: metrics})
	if err != nil {
		return nil, fmt.Errorf("usage spool: %w", err)
	}
	cl.add(func() {
		fctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = sp.Flush(fctx) // what stays is replayed by the next scheduler that opens the file
		_ = sp.Close()
	})
	return sp, nil
}

// superviseScheduler adopts the previous scheduler's runners in the background; cl gets, in this order of
// running, the end of the adopting and then the scheduler's closing (before the stores close).
func superviseScheduler(ctx context.Context, s *scheduler.Scheduler, log *slog.Logger, cl *closers) {
	cl.add(func() {
		// The runners keep serving: closing records their compute buckets that are over, bounded.
		cctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), schedulerCloseTimeout)
		defer cancel()
		if err := s.Close(cctx); err != nil {
			log.Warn("close the scheduler", "err", err)
		}
	})
	adoptCtx, stopAdopting := context.WithCancel(ctx)
	var adopting sync.WaitGroup
	adopting.Go(func() { adoptRunners(adoptCtx, s, log) })
	cl.add(func() { stopAdopting(); adopting.Wait() })
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
