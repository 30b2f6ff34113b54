// Package s3 is the S3 adapter of the BlobStore port (blob.Store): objects in a bucket of AWS S3 or of any
// S3-compatible server (Cloudflare R2, MinIO, versitygw, …), optionally under a key prefix. The contract
// suite (blobtest) runs against versitygw in the tests.
//
// It is written on aws-sdk-go-v2, AWS's maintained SDK: it speaks to every S3-compatible server (with
// path-style addressing where virtual hosts are not set up), has native If-None-Match and If-Match on
// PutObject, and multipart uploads. minio-go would also work, but aws-sdk-go-v2 is the reference
// implementation of S3's semantics, and R2 and versitygw document it. The SDK's default request and
// response checksums are turned off (sent and checked only where an operation requires them), since not
// every S3-compatible server accepts them.
//
// Put holds about one part (Config.PartSize) in memory. An object of at most PartSize bytes, of known size
// or not, goes up in one PutObject; a larger one in a multipart upload whose parts are sent one after
// another. The object appears only when the upload completes; an upload that
// fails is aborted, and if even the abort fails (the server is down) its parts stay invisible but stored
// until the bucket's lifecycle rule for incomplete multipart uploads removes them: give production
// buckets one (AbortIncompleteMultipartUpload after a day).
//
// PutIf is a conditional PutObject (If-None-Match: * to create, If-Match: <etag> to replace), the
// compare-and-set S3 offers since 2024; a server that ignored those headers would break fencing, and the
// suite's race cases catch that. ETags are the server's, quotes included, so content-derived (MD5 for a
// PutObject). A PutIf whose write landed but whose response was lost is retried by the SDK and then fails
// with ErrPrecondition: callers that get ErrPrecondition re-read the object before deciding anything, as
// the snapshotter does.
//
// Errors: connection failures, timeouts, 429 and 5xx, once the SDK's retryer (Config.MaxAttempts
// attempts per request) has given up, are blob.ErrUnavailable; 401 and 403 are ErrAccessDenied; a missing
// bucket is a descriptive error of its own (never ErrNotFound). Messages name the operation and key,
// never the credentials.
package s3

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"iter"
	"log/slog"
	"net"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/aws/ratelimit"
	"github.com/aws/aws-sdk-go-v2/aws/retry"
	awshttp "github.com/aws/aws-sdk-go-v2/aws/transport/http"
	"github.com/aws/aws-sdk-go-v2/config"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"

	"github.com/warren-mesh/warren/internal/blob"
)

// Limits and defaults.
const (
	// DefaultPartSize is Config.PartSize when it is zero.
	DefaultPartSize = 16 << 20
	// MinPartSize and MaxPartSize are S3's limits on a multipart upload's parts (but the last).
	MinPartSize = 5 << 20
	MaxPartSize = 5 << 30
	// MaxParts is S3's limit on the number of parts: an object is at most MaxParts × PartSize bytes.
	MaxParts = 10000
	// DefaultTimeout is Config.Timeout when it is zero.
	DefaultTimeout = 30 * time.Second
	// DefaultMaxAttempts is Config.MaxAttempts when it is zero.
	DefaultMaxAttempts = 3
	// DefaultRegion is Config.Region when it is empty.
	DefaultRegion = "us-east-1"

	// maxIdleConns is how many idle connections to the server are kept for reuse.
	maxIdleConns = 128

	// minThroughput is the rate, in bytes per second, a request carrying data is given time for on top
	// of Config.Timeout.
	minThroughput = 1 << 20
)

// Config configures a Store. It is passed by value and validated by New.
type Config struct {
	// Endpoint is the base URL of an S3-compatible server, e.g. "https://<account>.r2.cloudflarestorage.com"
	// or "http://127.0.0.1:7070"; empty means AWS S3 in Region.
	Endpoint string
	// Region is the region requests are signed for (default us-east-1; R2 wants "auto").
	Region string
	// Bucket holds the objects (required). It must exist.
	Bucket string
	// Prefix, if set, is prepended with a slash to every key: key k is the object Prefix/k. It follows the
	// key rules (no leading or trailing slash); a key too long for S3 together with it is ErrInvalidKey.
	Prefix string
	// AccessKey, SecretKey and SessionToken (optional) are static credentials. Without AccessKey, the
	// SDK's default chain finds them (environment, shared files, web identity, instance role).
	AccessKey, SecretKey, SessionToken string
	// PathStyle addresses the bucket in the path (endpoint/bucket/key) instead of as a virtual host
	// (bucket.endpoint/key): needed by most S3-compatible servers without wildcard DNS.
	PathStyle bool
	// PartSize is the multipart threshold and part size, MinPartSize to MaxPartSize (default
	// DefaultPartSize). Each Put holds up to one part in memory.
	PartSize int64
	// MaxAttempts bounds the attempts of one request, retries included (default DefaultMaxAttempts).
	MaxAttempts int
	// Timeout bounds each call that moves no bulk data (Exists, Read, PutIf, Delete), the time to a Get's
	// response and every pause in its body, and, per request, connecting and waiting for response headers;
	// a request carrying n bytes gets Timeout plus n at 1 MiB/s (default DefaultTimeout).
	Timeout time.Duration
	// Logger reports what no caller sees, e.g. a failed abort of a multipart upload; nil discards.
	Logger *slog.Logger

	// listPageSize, when set, is List's page size (S3's default is 1000); tests make it small.
	listPageSize int32
}

// Operation names, in errors.
const (
	opPut    = "put"
	opGet    = "get"
	opExists = "exists"
	opRead   = "read"
	opPutIf  = "put-if"
	opDelete = "delete"
	opStat   = "stat"
	opList   = "list"
	opCheck  = "check bucket"
)

// Store is a blob.Store on an S3 bucket. It is safe for concurrent use, also with other Stores on the same
// bucket in other processes: PutIf's compare-and-set happens in the server.
type Store struct {
	cfg    Config
	client *s3.Client
}

var _ blob.Store = (*Store)(nil)

// New validates cfg and creates the client; it sends no request (see Check). ctx bounds finding default
// credentials.
func New(ctx context.Context, cfg Config) (*Store, error) {
	if err := cfg.validate(); err != nil {
		return nil, fmt.Errorf("s3 blob store: %w", err)
	}
	var creds aws.CredentialsProvider
	if cfg.AccessKey != "" {
		creds = credentials.NewStaticCredentialsProvider(cfg.AccessKey, cfg.SecretKey, cfg.SessionToken)
	} else {
		// Only the credentials are taken from the default configuration: endpoint, retries and
		// checksums stay as configured here.
		ac, err := config.LoadDefaultConfig(ctx, config.WithRegion(cfg.Region))
		if err != nil {
			return nil, fmt.Errorf("s3 blob store: load default credentials: %w", err)
		}
		creds = ac.Credentials
	}
	timeout := cfg.Timeout
	httpClient := awshttp.NewBuildableClient().
		WithDialerOptions(func(d *net.Dialer) { d.Timeout = timeout }).
		WithTransportOptions(func(tr *http.Transport) {
			// The SDK keeps 10 idle connections per host: readers fetching in parallel (a restore
			// runs dozens of GETs at once) would open and close one per request beyond that.
			tr.MaxIdleConns = maxIdleConns
			tr.MaxIdleConnsPerHost = maxIdleConns
			tr.TLSHandshakeTimeout = timeout
			tr.ResponseHeaderTimeout = timeout
		})
	opts := s3.Options{
		Region:       cfg.Region,
		Credentials:  creds,
		UsePathStyle: cfg.PathStyle,
		HTTPClient:   httpClient,
		// No retry quota: every request gets its MaxAttempts, so an outage costs each call the same
		// bounded time instead of failing fast once a shared bucket of tokens is spent.
		Retryer: retry.NewStandard(func(o *retry.StandardOptions) {
			o.MaxAttempts = cfg.MaxAttempts
			o.RateLimiter = ratelimit.None
		}),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	}
	if cfg.Endpoint != "" {
		opts.BaseEndpoint = aws.String(cfg.Endpoint)
	}
	return &Store{cfg: cfg, client: s3.New(opts)}, nil
}

// validate checks cfg and fills in defaults.
func (c *Config) validate() error {
	if c.Endpoint != "" {
		u, err := url.Parse(c.Endpoint)
		if err != nil {
			return fmt.Errorf("endpoint: %w", err)
		}
		if u.Scheme != "http" && u.Scheme != "https" || u.Host == "" || u.User != nil || u.RawQuery != "" || u.Fragment != "" {
			return fmt.Errorf("endpoint %q: want http(s)://host[:port][/path]", c.Endpoint)
		}
	}
	if c.Region == "" {
		c.Region = DefaultRegion
	}
	if c.Bucket == "" || strings.ContainsAny(c.Bucket, "/ ") {
		return fmt.Errorf("bucket %q: want a bucket name", c.Bucket)
	}
	if c.Prefix != "" {
		if err := blob.CheckKey(c.Prefix); err != nil {
			return fmt.Errorf("prefix: %w", err)
		}
	}
	if c.AccessKey == "" && (c.SecretKey != "" || c.SessionToken != "") || c.AccessKey != "" && c.SecretKey == "" {
		return errors.New("static credentials need both an access key and a secret key")
	}
	switch {
	case c.PartSize == 0:
		c.PartSize = DefaultPartSize
	case c.PartSize < MinPartSize || c.PartSize > MaxPartSize:
		return fmt.Errorf("part size %d: want %d to %d bytes", c.PartSize, MinPartSize, int64(MaxPartSize))
	}
	switch {
	case c.MaxAttempts == 0:
		c.MaxAttempts = DefaultMaxAttempts
	case c.MaxAttempts < 0:
		return fmt.Errorf("max attempts %d: want at least 1", c.MaxAttempts)
	}
	switch {
	case c.Timeout == 0:
		c.Timeout = DefaultTimeout
	case c.Timeout < 0:
		return fmt.Errorf("timeout %v: want a positive duration", c.Timeout)
	}
	if c.Logger == nil {
		c.Logger = slog.New(slog.DiscardHandler)
	}
	return nil
}

// Check sends one request (HeadBucket) to find out whether the bucket exists and the credentials work:
// for a server's start-up, which should fail on a misconfiguration rather than on its first snapshot.
func (s *Store) Check(ctx context.Context) error {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_, err := s.client.HeadBucket(cctx, &s3.HeadBucketInput{Bucket: &s.cfg.Bucket})
	if err == nil {
		return nil
	}
	if ctx.Err() == nil && cctx.Err() == nil && classify(err, true) == classNotFound {
		return fmt.Errorf("%s %s: the bucket does not exist: %w", opCheck, s.cfg.Bucket, err)
	}
	return s.wrapErr(ctx, opCheck, s.cfg.Bucket, err, cctx.Err() != nil)
}

// objectKey validates key and returns the object's key in the bucket.
func (s *Store) objectKey(key string) (string, error) {
	if err := blob.CheckKey(key); err != nil {
		return "", err
	}
	if s.cfg.Prefix == "" {
		return key, nil
	}
	k := s.cfg.Prefix + "/" + key
	if len(k) > blob.MaxKeyLen {
		return "", fmt.Errorf("%w: %.40q…: %d bytes with the prefix, S3's limit is %d", blob.ErrInvalidKey, key, len(k), blob.MaxKeyLen)
	}
	return k, nil
}

// dataTimeout is the deadline of a request carrying n bytes.
func (s *Store) dataTimeout(n int) time.Duration {
	return s.cfg.Timeout + time.Duration(int64(n)*int64(time.Second)/minThroughput)
}

// Get opens the object for streaming. Timeout bounds the wait for the response and each wait for more
// of the body; ctx bounds the whole read.
func (s *Store) Get(ctx context.Context, key string) (io.ReadCloser, error) {
	return s.get(ctx, key, nil)
}

// GetRange is Get with an HTTP Range; S3's 416 for a range starting at or past the end is an empty body.
func (s *Store) GetRange(ctx context.Context, key string, off, n int64) (io.ReadCloser, error) {
	if err := blob.CheckRange(off, n); err != nil {
		return nil, fmt.Errorf("%s %s: %w", opGet, key, err)
	}
	rc, err := s.get(ctx, key, aws.String(fmt.Sprintf("bytes=%d-%d", off, off+n-1)))
	if errors.Is(err, errRangeNotSatisfiable) {
		return io.NopCloser(bytes.NewReader(nil)), nil
	}
	return rc, err
}

// errRangeNotSatisfiable is S3's answer to a range that starts at or past the object's end.
var errRangeNotSatisfiable = errors.New("range not satisfiable")

func (s *Store) get(ctx context.Context, key string, rng *string) (io.ReadCloser, error) {
	k, err := s.objectKey(key)
	if err != nil {
		return nil, err
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("%s %s: %w", opGet, key, err)
	}
	cctx, cancel := context.WithCancel(ctx)
	w := newWatchdog(s.cfg.Timeout, cancel)
	w.arm()
	out, err := s.client.GetObject(cctx, &s3.GetObjectInput{Bucket: &s.cfg.Bucket, Key: &k, Range: rng})
	fired := w.disarm()
	if err == nil && fired {
		out.Body.Close()
		err = context.DeadlineExceeded
	}
	if err != nil {
		cancel()
		if rng != nil && ctx.Err() == nil && !fired && classify(err, false) == classRange {
			return nil, errRangeNotSatisfiable
		}
		return nil, s.wrapErr(ctx, opGet, key, err, fired)
	}
	return &body{rc: out.Body, s: s, ctx: ctx, key: key, w: w, cancel: cancel}, nil
}

// body is a Get's object: it maps read errors to the port's and cancels the request when a read waits
// longer than Timeout.
type body struct {
	rc     io.ReadCloser
	s      *Store
	ctx    context.Context // the caller's
	key    string
	w      *watchdog
	cancel context.CancelFunc
}

func (b *body) Read(p []byte) (int, error) {
	b.w.arm()
	n, err := b.rc.Read(p)
	fired := b.w.disarm()
	if err != nil && err != io.EOF {
		err = b.s.wrapErr(b.ctx, opGet, b.key, err, fired)
	}
	return n, err
}

func (b *body) Close() error {
	b.w.timer.Stop()
	err := b.rc.Close()
	b.cancel()
	return err
}

// watchdog calls cancel when it stays armed for longer than its timeout; once fired it stays fired.
type watchdog struct {
	timeout time.Duration
	timer   *time.Timer
	fired   atomic.Bool
}

func newWatchdog(timeout time.Duration, cancel context.CancelFunc) *watchdog {
	w := &watchdog{timeout: timeout}
	w.timer = time.AfterFunc(time.Hour, func() {
		w.fired.Store(true)
		cancel()
	})
	w.timer.Stop()
	return w
}

func (w *watchdog) arm() { w.timer.Reset(w.timeout) }

// disarm stops the timer and reports whether it has fired (or is about to: its function may still be
// on its way).
func (w *watchdog) disarm() bool {
	stopped := w.timer.Stop()
	return !stopped || w.fired.Load()
}

// Exists sends a HeadObject.
func (s *Store) Exists(ctx context.Context, key string) (bool, error) {
	k, err := s.objectKey(key)
	if err != nil {
		return false, err
	}
	if err := ctx.Err(); err != nil {
		return false, fmt.Errorf("%s %s: %w", opExists, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_, err = s.client.HeadObject(cctx, &s3.HeadObjectInput{Bucket: &s.cfg.Bucket, Key: &k})
	if err == nil {
		return true, nil
	}
	if ctx.Err() == nil && cctx.Err() == nil && classify(err, true) == classNotFound {
		return false, nil
	}
	return false, s.wrapErr(ctx, opExists, key, err, cctx.Err() != nil)
}

// Read gets the whole object and the ETag it was read at.
func (s *Store) Read(ctx context.Context, key string) ([]byte, string, error) {
	k, err := s.objectKey(key)
	if err != nil {
		return nil, "", err
	}
	if err := ctx.Err(); err != nil {
		return nil, "", fmt.Errorf("%s %s: %w", opRead, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	out, err := s.client.GetObject(cctx, &s3.GetObjectInput{Bucket: &s.cfg.Bucket, Key: &k})
	if err != nil {
		return nil, "", s.wrapErr(ctx, opRead, key, err, cctx.Err() != nil)
	}
	defer out.Body.Close()
	data, err := io.ReadAll(out.Body)
	if err != nil {
		return nil, "", s.wrapErr(ctx, opRead, key, err, cctx.Err() != nil)
	}
	etag := aws.ToString(out.ETag)
	if etag == "" {
		return nil, "", fmt.Errorf("%s %s: the server sent no ETag", opRead, key)
	}
	return data, etag, nil
}

// PutIf sends a conditional PutObject: If-None-Match: * with ifMatch "", else If-Match: ifMatch.
func (s *Store) PutIf(ctx context.Context, key string, data []byte, ifMatch string) (string, error) {
	k, err := s.objectKey(key)
	if err != nil {
		return "", err
	}
	if err := ctx.Err(); err != nil {
		return "", fmt.Errorf("%s %s: %w", opPutIf, key, err)
	}
	in := &s3.PutObjectInput{
		Bucket:        &s.cfg.Bucket,
		Key:           &k,
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	}
	if ifMatch == "" {
		in.IfNoneMatch = aws.String("*")
	} else {
		in.IfMatch = aws.String(ifMatch)
	}
	cctx, cancel := context.WithTimeout(ctx, s.dataTimeout(len(data)))
	defer cancel()
	out, err := s.client.PutObject(cctx, in)
	if err != nil {
		// S3 answers If-Match on a missing object with 404 NoSuchKey.
		if ifMatch != "" && ctx.Err() == nil && cctx.Err() == nil && classify(err, false) == classNotFound {
			return "", fmt.Errorf("%s %s: %w: no object, want etag %s", opPutIf, key, blob.ErrPrecondition, ifMatch)
		}
		return "", s.wrapErr(ctx, opPutIf, key, err, cctx.Err() != nil)
	}
	etag := aws.ToString(out.ETag)
	if etag == "" {
		return "", fmt.Errorf("%s %s: the server sent no ETag", opPutIf, key)
	}
	return etag, nil
}

// Delete sends a DeleteObject; S3 does not mind a missing key, and NoSuchKey from a server that does is
// ignored.
func (s *Store) Delete(ctx context.Context, key string) error {
	k, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", opDelete, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_, err = s.client.DeleteObject(cctx, &s3.DeleteObjectInput{Bucket: &s.cfg.Bucket, Key: &k})
	if err != nil {
		if ctx.Err() == nil && cctx.Err() == nil && classify(err, false) == classNotFound {
			return nil
		}
		return s.wrapErr(ctx, opDelete, key, err, cctx.Err() != nil)
	}
	return nil
}

// Stat sends a HeadObject.
func (s *Store) Stat(ctx context.Context, key string) (blob.Object, error) {
	k, err := s.objectKey(key)
	if err != nil {
		return blob.Object{}, err
	}
	if err := ctx.Err(); err != nil {
		return blob.Object{}, fmt.Errorf("%s %s: %w", opStat, key, err)
	}
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	out, err := s.client.HeadObject(cctx, &s3.HeadObjectInput{Bucket: &s.cfg.Bucket, Key: &k})
	if err != nil {
		return blob.Object{}, s.wrapErr(ctx, opStat, key, err, cctx.Err() != nil)
	}
	return blob.Object{Key: key, Size: aws.ToInt64(out.ContentLength), Modified: aws.ToTime(out.LastModified)}, nil
}

// List pages through ListObjectsV2 under the store's prefix, each page bounded by Timeout.
func (s *Store) List(ctx context.Context, prefix string) iter.Seq2[blob.Object, error] {
	if err := blob.CheckPrefix(prefix); err != nil {
		return blob.ListErr(err)
	}
	full := prefix
	if s.cfg.Prefix != "" {
		full = s.cfg.Prefix + "/" + prefix
	}
	return func(yield func(blob.Object, error) bool) {
		in := &s3.ListObjectsV2Input{Bucket: &s.cfg.Bucket, Prefix: aws.String(full)}
		if s.cfg.listPageSize > 0 {
			in.MaxKeys = aws.Int32(s.cfg.listPageSize)
		}
		for {
			if err := ctx.Err(); err != nil {
				yield(blob.Object{}, fmt.Errorf("%s %s: %w", opList, prefix, err))
				return
			}
			cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
			out, err := s.client.ListObjectsV2(cctx, in)
			timedOut := cctx.Err() != nil
			cancel()
			if err != nil {
				yield(blob.Object{}, s.wrapErr(ctx, opList, prefix, err, timedOut))
				return
			}
			for _, o := range out.Contents {
				if !s.yieldObject(o, yield) {
					return
				}
			}
			if !aws.ToBool(out.IsTruncated) || aws.ToString(out.NextContinuationToken) == "" {
				return
			}
			in.ContinuationToken = out.NextContinuationToken
		}
	}
}

// yieldObject yields a listed object by its key in the port (without the store's prefix), skipping any
// that is not a key of this store (an object written by other means).
func (s *Store) yieldObject(o types.Object, yield func(blob.Object, error) bool) bool {
	key := aws.ToString(o.Key)
	if s.cfg.Prefix != "" {
		var ok bool
		if key, ok = strings.CutPrefix(key, s.cfg.Prefix+"/"); !ok {
			return true
		}
	}
	if blob.CheckKey(key) != nil {
		return true
	}
	return yield(blob.Object{Key: key, Size: aws.ToInt64(o.Size), Modified: aws.ToTime(o.LastModified)}, nil)
}
