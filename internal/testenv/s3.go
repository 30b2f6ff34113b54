package testenv

import (
	"cmp"
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
)

// This file starts versitygw, the S3 server the S3 adapter of the BlobStore port is tested against: the
// posix backend on a temporary directory (a bucket is a directory, an object a file), listening only on
// 127.0.0.1, with a random root access key and secret so that requests are signed and checked as by S3.
// The credentials are handed to versitygw in its environment, not on its command line.

// S3Server is a versitygw server that a test owns. It may be stopped and started again, to test what
// clients do while S3 is down; its address, credentials and data stay the same across restarts. Methods
// may be called from one goroutine at a time.
type S3Server struct {
	bin       string
	dir       string // temporary directory: data/ (the posix backend's root) and the log
	port      int
	access    string
	secret    string
	proc      proc
	buckets   atomic.Int64
	keepAlive bool
}

const (
	s3Region     = "us-east-1"
	s3DataDir    = "data"
	s3IAMDir     = "iam"
	s3LogFile    = "versitygw.log"
	s3HealthPath = "/health"
)

// StartS3 starts a versitygw server for t alone and stops it when t ends (its files go with t's temporary
// directory). Skips under -short; fails when versitygw is missing (`make tools` builds it).
func StartS3(t testing.TB) *S3Server {
	t.Helper()
	return StartS3With(t, S3Options{})
}

// S3Options configures StartS3With.
type S3Options struct {
	// AccessKey and SecretKey are the root user's credentials; empty: random ones. Servers given the same
	// stand for buckets one set of credentials reaches (one account's buckets in two regions).
	AccessKey, SecretKey string
	// KeepAlive keeps client connections open between requests, as S3 and R2 do; versitygw closes each
	// after one request by default, which makes every request pay a new connection.
	KeepAlive bool
}

// StartS3With is StartS3 with options.
func StartS3With(t testing.TB, opts S3Options) *S3Server {
	t.Helper()
	dir := t.TempDir()
	s := &S3Server{
		keepAlive: opts.KeepAlive,
		bin:       Binary(t, "versitygw"),
		dir:       dir,
		access:    cmp.Or(opts.AccessKey, "warren"+randomHex(t, 8)),
		secret:    cmp.Or(opts.SecretKey, randomHex(t, 20)),
		proc: proc{
			title:   "versitygw",
			stopSig: syscall.SIGTERM,
			grace:   30 * time.Second,
			logPath: filepath.Join(dir, s3LogFile),
		},
	}
	for _, d := range []string{s3DataDir, s3IAMDir} {
		if err := os.Mkdir(filepath.Join(s.dir, d), 0o700); err != nil {
			t.Fatal(err)
		}
	}
	err := withFreePorts(1, func(p []int) error {
		s.port = p[0]
		return s.start()
	})
	if err != nil {
		t.Fatalf("start versitygw: %v", err)
	}
	s.proc.stopAtCleanup(t, nil)
	return s
}

// Endpoint is the server's base URL, http://127.0.0.1:port.
func (s *S3Server) Endpoint() string {
	return "http://" + net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port))
}

// AccessKey is the root user's access key ID.
func (s *S3Server) AccessKey() string { return s.access }

// SecretKey is the root user's secret access key.
func (s *S3Server) SecretKey() string { return s.secret }

// Region is the region the server signs for.
func (s *S3Server) Region() string { return s3Region }

// DataDir is the posix backend's root: bucket b is the directory DataDir()/b.
func (s *S3Server) DataDir() string { return filepath.Join(s.dir, s3DataDir) }

var bucketUnsafe = regexp.MustCompile(`[^a-z0-9]+`)

// CreateBucket creates a new, empty bucket named after t and returns its name.
func (s *S3Server) CreateBucket(t testing.TB) string {
	t.Helper()
	name := strings.Trim(bucketUnsafe.ReplaceAllString(strings.ToLower(t.Name()), "-"), "-")
	name = fmt.Sprintf("t%d-%s", s.buckets.Add(1), name)
	if len(name) > 63 {
		name = strings.TrimRight(name[:63], "-")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, err := s.client().CreateBucket(ctx, &s3.CreateBucketInput{Bucket: aws.String(name)}); err != nil {
		t.Fatalf("create bucket %s: %v", name, err)
	}
	return name
}

// client is an S3 client of the root user.
func (s *S3Server) client() *s3.Client {
	return s3.New(s3.Options{
		Region:                     s3Region,
		BaseEndpoint:               aws.String(s.Endpoint()),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(s.access, s.secret, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

// Running reports whether the server process is up.
func (s *S3Server) Running() bool { return s.proc.running() }

// Stop shuts the server down; clients get connection errors until Start. Objects are kept.
func (s *S3Server) Stop(t testing.TB) {
	t.Helper()
	s.proc.stopOrFatal(t)
}

// Start starts a stopped server again on the same address, credentials and data.
func (s *S3Server) Start(t testing.TB) {
	t.Helper()
	s.proc.restartOrFatal(t, s.start)
}

// start runs versitygw as a child of the test binary and waits until it answers.
func (s *S3Server) start() error {
	args := []string{
		"--port", net.JoinHostPort("127.0.0.1", strconv.Itoa(s.port)),
		"--region", s3Region,
		"--health", s3HealthPath,
		"--quiet",
		// The internal IAM service (a file) rather than single-account mode, which answers an unknown
		// access key with 404 XAdminUserNotFound instead of S3's 403 InvalidAccessKeyId.
		"--iam-dir", filepath.Join(s.dir, s3IAMDir),
	}
	if s.keepAlive {
		args = append(args, "--keep-alive")
	}
	cmd := exec.Command(s.bin, append(args, "posix", s.DataDir())...)
	// Only what versitygw needs: no VGW_* or AWS_* setting of the developer's leaks in.
	cmd.Env = []string{"ROOT_ACCESS_KEY=" + s.access, "ROOT_SECRET_KEY=" + s.secret, "HOME=" + s.dir, "TZ=UTC"}
	cmd.Dir = s.dir
	if err := s.proc.start(cmd); err != nil {
		return err
	}
	health := func() error { return getJSON(s.Endpoint()+s3HealthPath, nil) }
	if err := s.proc.awaitReady(30*time.Second, 20*time.Millisecond, health); err != nil {
		return fmt.Errorf("versitygw on port %d: %w", s.port, err)
	}
	return nil
}

func randomHex(t testing.TB, n int) string {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		t.Fatal(err)
	}
	return hex.EncodeToString(b)
}
