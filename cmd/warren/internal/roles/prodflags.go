package roles

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"strconv"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"

	billingcockroach "github.com/warren-mesh/warren/billing/cockroach"
	"github.com/warren-mesh/warren/cmd/warren/internal/env"
	blobs3 "github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/cockroachdb"
	"github.com/warren-mesh/warren/internal/registry/consul"
	"github.com/warren-mesh/warren/internal/secrets/vault"
)

// prodFlags are the production adapters' settings shared by the roles: each flag defaults from a WARREN_*
// variable (or the tool's own, e.g. VAULT_ADDR), and secrets come only from the environment or files,
// never from flags (flags show in `ps`).
type prodFlags struct {
	vaultAddr, vaultMount, vaultPrefix, vaultRoleID, vaultSecretIDFile, vaultJWTRole, vaultJWTFile string
	consulAddr                                                                                     string
	db                                                                                             string
	s3Endpoint, s3Bucket, s3Region, s3Prefix                                                       string
	s3PathStyle                                                                                    bool
}

// Each register* method adds one adapter's flags.
func (p *prodFlags) registerVault(fs *flag.FlagSet) {
	fs.StringVar(&p.vaultAddr, "vault", env.First("WARREN_VAULT_ADDR", "VAULT_ADDR"), "Vault address; token from $VAULT_TOKEN, or AppRole, or JWT below ($WARREN_VAULT_ADDR, $VAULT_ADDR)")
	fs.StringVar(&p.vaultMount, "vault-mount", env.Or("WARREN_VAULT_MOUNT", "secret"), "KV v2 mount ($WARREN_VAULT_MOUNT)")
	fs.StringVar(&p.vaultPrefix, "vault-prefix", env.Or("WARREN_VAULT_PREFIX", "warren"), "path prefix inside the mount ($WARREN_VAULT_PREFIX)")
	fs.StringVar(&p.vaultRoleID, "vault-approle-role-id", os.Getenv("WARREN_VAULT_ROLE_ID"), "AppRole role id; the secret id is read from -vault-approle-secret-id-file ($WARREN_VAULT_ROLE_ID)")
	fs.StringVar(&p.vaultSecretIDFile, "vault-approle-secret-id-file", os.Getenv("WARREN_VAULT_SECRET_ID_FILE"), "file holding the AppRole secret id")
	fs.StringVar(&p.vaultJWTRole, "vault-jwt-role", os.Getenv("WARREN_VAULT_JWT_ROLE"), "JWT auth role (Nomad workload identity); the JWT is read from -vault-jwt-file")
	fs.StringVar(&p.vaultJWTFile, "vault-jwt-file", env.First("WARREN_VAULT_JWT_FILE"), "file holding the workload identity JWT (e.g. ${NOMAD_SECRETS_DIR}/nomad_token)")
}

func (p *prodFlags) registerConsul(fs *flag.FlagSet) {
	fs.StringVar(&p.consulAddr, "consul", env.First("WARREN_CONSUL_ADDR", "CONSUL_HTTP_ADDR"), "Consul HTTP address host:port; ACL token from $CONSUL_HTTP_TOKEN ($WARREN_CONSUL_ADDR)")
}

func (p *prodFlags) registerDB(fs *flag.FlagSet) {
	fs.StringVar(&p.db, "db", os.Getenv("WARREN_DB"), "CockroachDB (or PostgreSQL) URL, postgres://… ($WARREN_DB)")
}

func (p *prodFlags) registerS3(fs *flag.FlagSet) {
	fs.StringVar(&p.s3Endpoint, "s3-endpoint", os.Getenv("WARREN_S3_ENDPOINT"), "S3-compatible endpoint URL; empty: AWS; credentials from $AWS_ACCESS_KEY_ID/$AWS_SECRET_ACCESS_KEY ($WARREN_S3_ENDPOINT)")
	fs.StringVar(&p.s3Bucket, "s3-bucket", os.Getenv("WARREN_S3_BUCKET"), "bucket of snapshots ($WARREN_S3_BUCKET)")
	fs.StringVar(&p.s3Region, "s3-region", env.Or("WARREN_S3_REGION", "us-east-1"), "bucket region ($WARREN_S3_REGION)")
	fs.StringVar(&p.s3Prefix, "s3-prefix", os.Getenv("WARREN_S3_PREFIX"), "key prefix inside the bucket ($WARREN_S3_PREFIX)")
	pathStyle, _ := strconv.ParseBool(os.Getenv("WARREN_S3_PATH_STYLE"))
	fs.BoolVar(&p.s3PathStyle, "s3-path-style", pathStyle, "path-style URLs (MinIO, versitygw) ($WARREN_S3_PATH_STYLE=true)")
}

// openVault logs in with the first configured method: token ($VAULT_TOKEN), AppRole, or JWT.
func (p *prodFlags) openVault(ctx context.Context) (*vault.Store, error) {
	if p.vaultAddr == "" {
		return nil, errors.New("-vault (or $WARREN_VAULT_ADDR) is required")
	}
	cfg := vault.Config{Addr: p.vaultAddr, Mount: p.vaultMount, Prefix: p.vaultPrefix, Token: os.Getenv("VAULT_TOKEN")}
	switch {
	case p.vaultRoleID != "":
		secretID, err := readSecretFile(p.vaultSecretIDFile, "-vault-approle-secret-id-file")
		if err != nil {
			return nil, err
		}
		cfg.Token, cfg.AppRole = "", &vault.AppRole{RoleID: p.vaultRoleID, SecretID: secretID}
	case p.vaultJWTRole != "":
		cfg.Token, cfg.JWT = "", &vault.JWT{Role: p.vaultJWTRole, JWTFile: p.vaultJWTFile}
	case cfg.Token == "":
		return nil, errors.New("no Vault credentials: set $VAULT_TOKEN, or -vault-approle-role-id, or -vault-jwt-role")
	}
	_ = os.Unsetenv("VAULT_TOKEN")
	return vault.New(ctx, cfg)
}

func readSecretFile(path, flagName string) (string, error) {
	if path == "" {
		return "", fmt.Errorf("%s is required", flagName)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return "", fmt.Errorf("%s: %w", flagName, err)
	}
	return strings.TrimSpace(string(b)), nil
}

func (p *prodFlags) openConsul(watch bool) (*consul.Registry, error) {
	if p.consulAddr == "" {
		return nil, errors.New("-consul (or $WARREN_CONSUL_ADDR) is required")
	}
	return consul.New(consul.Config{Addr: p.consulAddr, Token: os.Getenv("CONSUL_HTTP_TOKEN"), Watch: watch})
}

func (p *prodFlags) openDB(ctx context.Context) (*pgxpool.Pool, error) {
	if p.db == "" {
		return nil, errors.New("-db (or $WARREN_DB) is required")
	}
	return cockroachdb.Open(ctx, p.db)
}

// openLedger opens the database and the CockroachDB ledger over it (migrations applied); closing the pool
// is the caller's.
func (p *prodFlags) openLedger(ctx context.Context) (*pgxpool.Pool, *billingcockroach.Ledger, error) {
	pool, err := p.openDB(ctx)
	if err != nil {
		return nil, nil, err
	}
	l, err := billingcockroach.New(ctx, billingcockroach.Config{Pool: pool})
	if err != nil {
		pool.Close()
		return nil, nil, err
	}
	return pool, l, nil
}

func (p *prodFlags) openS3(ctx context.Context) (*blobs3.Store, error) {
	if p.s3Bucket == "" {
		return nil, errors.New("-s3-bucket (or $WARREN_S3_BUCKET) is required")
	}
	return blobs3.New(ctx, blobs3.Config{
		Endpoint: p.s3Endpoint, Region: p.s3Region, Bucket: p.s3Bucket, Prefix: p.s3Prefix, PathStyle: p.s3PathStyle,
		AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"), SessionToken: os.Getenv("AWS_SESSION_TOKEN"),
	})
}

// multiFlag is a repeatable string flag.
type multiFlag []string

func (m *multiFlag) String() string     { return strings.Join(*m, " ") }
func (m *multiFlag) Set(v string) error { *m = append(*m, v); return nil }

// pairs reads K=V values into a map.
func (m multiFlag) pairs() (map[string]string, error) {
	out := map[string]string{}
	for _, v := range m {
		k, val, ok := strings.Cut(v, "=")
		if !ok || k == "" {
			return nil, fmt.Errorf("want K=V, got %q", v)
		}
		out[k] = val
	}
	return out, nil
}
