package s3_test

import (
	"bytes"
	"context"
	"crypto/sha256"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	awss3 "github.com/aws/aws-sdk-go-v2/service/s3"

	"github.com/warren-mesh/warren/internal/blob"
	"github.com/warren-mesh/warren/internal/blob/blobtest"
	"github.com/warren-mesh/warren/internal/blob/s3"
	"github.com/warren-mesh/warren/internal/testenv"
)

// config is a Config for bucket on srv.
func config(srv *testenv.S3Server, bucket string) s3.Config {
	return s3.Config{
		Endpoint:  srv.Endpoint(),
		Region:    srv.Region(),
		Bucket:    bucket,
		AccessKey: srv.AccessKey(),
		SecretKey: srv.SecretKey(),
		PathStyle: true,
	}
}

func open(t testing.TB, cfg s3.Config) *s3.Store {
	t.Helper()
	s, err := s3.New(t.Context(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// rawClient talks to srv directly, to look at what the Store cannot show (pending multipart uploads).
func rawClient(srv *testenv.S3Server) *awss3.Client {
	return awss3.New(awss3.Options{
		Region:                     srv.Region(),
		BaseEndpoint:               aws.String(srv.Endpoint()),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKey(), srv.SecretKey(), ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
	})
}

func TestContract(t *testing.T) {
	srv := testenv.StartS3(t)
	blobtest.Run(t, func(t *testing.T) blob.Store { return open(t, config(srv, srv.CreateBucket(t))) },
		blobtest.ServerLacksNestedKeys("versitygw's posix backend stores key a/b as the file a/b, so it "+
			"answers a Put of a with 409 ExistingObjectIsDirectory (TestNestedKeysOnVersitygw pins this)"))
}

// TestNestedKeysOnVersitygw pins the limitation the contract run excuses: if versitygw ever stores "a"
// beside "a/b", this fails and the excuse should go. The adapter passes the error on, descriptive.
func TestNestedKeysOnVersitygw(t *testing.T) {
	srv := testenv.StartS3(t)
	s := open(t, config(srv, srv.CreateBucket(t)))
	blobPut(t, s, "a/b", "ab")
	err := s.Put(t.Context(), "a", strings.NewReader("a"), 1)
	if err == nil || !strings.Contains(err.Error(), "ExistingObjectIsDirectory") {
		t.Fatalf("Put(a) beside a/b = %v, want versitygw's ExistingObjectIsDirectory", err)
	}
	if errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrNotFound) || errors.Is(err, blob.ErrPrecondition) {
		t.Fatalf("Put(a) beside a/b = %v, a port sentinel it is not", err)
	}
}

// Stores with different prefixes share a bucket without seeing each other's objects, and a key is stored
// under its prefix.
func TestPrefix(t *testing.T) {
	srv := testenv.StartS3(t)
	bucket := srv.CreateBucket(t)
	ctx := t.Context()
	cfgA, cfgB := config(srv, bucket), config(srv, bucket)
	cfgA.Prefix, cfgB.Prefix = "tenants/a", "tenants/b"
	a, b := open(t, cfgA), open(t, cfgB)
	if _, err := a.PutIf(ctx, "latest", []byte("a's"), ""); err != nil {
		t.Fatal(err)
	}
	if _, err := b.PutIf(ctx, "latest", []byte("b's"), ""); err != nil {
		t.Fatalf("create-only PutIf under another prefix: %v", err)
	}
	if data, _, err := a.Read(ctx, "latest"); err != nil || string(data) != "a's" {
		t.Fatalf("Read = %q, %v; want %q", data, err, "a's")
	}
	out, err := rawClient(srv).GetObject(ctx, &awss3.GetObjectInput{Bucket: &bucket, Key: aws.String("tenants/b/latest")})
	if err != nil {
		t.Fatalf("the object is not at prefix/key: %v", err)
	}
	out.Body.Close()
	if err := a.Delete(ctx, "latest"); err != nil {
		t.Fatal(err)
	}
	if ok, err := b.Exists(ctx, "latest"); !ok || err != nil {
		t.Fatalf("b's object after a's Delete: Exists = %v, %v", ok, err)
	}
	// A key valid for the port but too long with the prefix is refused before any request.
	long := strings.Repeat("k", blob.MaxKeyLen)
	if err := a.Put(ctx, long, strings.NewReader("x"), 1); !errors.Is(err, blob.ErrInvalidKey) {
		t.Fatalf("Put of a key too long with the prefix = %v, want ErrInvalidKey", err)
	}
}

// The contract suite again with List pages of 4 objects, so every List crosses pages; with a prefix, List
// sees only the store's own objects, named without the prefix.
func TestListPagesAndPrefix(t *testing.T) {
	srv := testenv.StartS3(t)
	t.Run("contract", func(t *testing.T) {
		blobtest.Run(t, func(t *testing.T) blob.Store {
			return open(t, s3.WithListPageSize(config(srv, srv.CreateBucket(t)), 4))
		}, blobtest.ServerLacksNestedKeys("see TestNestedKeysOnVersitygw"))
	})
	bucket := srv.CreateBucket(t)
	cfgA, cfgB := s3.WithListPageSize(config(srv, bucket), 2), config(srv, bucket)
	cfgA.Prefix, cfgB.Prefix = "tenants/a", "tenants/ab"
	a, b := open(t, cfgA), open(t, cfgB)
	for _, k := range []string{"x/1", "x/2", "x/3", "y"} {
		blobPut(t, a, k, k)
		blobPut(t, b, k, "other "+k)
	}
	got := map[string]int64{}
	for o, err := range a.List(t.Context(), "") {
		if err != nil {
			t.Fatal(err)
		}
		got[o.Key] = o.Size
	}
	if len(got) != 4 || got["x/1"] != 3 || got["y"] != 1 {
		t.Fatalf("List under prefix tenants/a = %v, want its 4 objects by their keys", got)
	}
}

// Objects larger than PartSize go up in parts, with a known or an unknown size; a reader that fails or
// a context that ends midway leaves the old object and no pending upload behind.
func TestMultipart(t *testing.T) {
	srv := testenv.StartS3(t)
	bucket := srv.CreateBucket(t)
	cfg := config(srv, bucket)
	cfg.PartSize = s3.MinPartSize
	s := open(t, cfg)
	ctx := t.Context()
	const size = 12 << 20 // three parts: 5, 5 and 2 MiB
	data := make([]byte, size)
	rand.NewChaCha8([32]byte{7}).Read(data)
	want := sha256.Sum256(data)

	// The server lists pending uploads, so assertNoUploads can see one left behind.
	raw := rawClient(srv)
	mu, err := raw.CreateMultipartUpload(ctx, &awss3.CreateMultipartUploadInput{Bucket: &bucket, Key: aws.String("probe")})
	if err != nil {
		t.Fatal(err)
	}
	if out, err := raw.ListMultipartUploads(ctx, &awss3.ListMultipartUploadsInput{Bucket: &bucket}); err != nil || len(out.Uploads) != 1 {
		t.Fatalf("ListMultipartUploads with one pending: %v, %v", out, err)
	}
	if _, err := raw.AbortMultipartUpload(ctx, &awss3.AbortMultipartUploadInput{Bucket: &bucket, Key: aws.String("probe"), UploadId: mu.UploadId}); err != nil {
		t.Fatal(err)
	}

	for _, tc := range []struct {
		name string
		size int64
	}{{"known", size}, {"unknown", -1}} {
		t.Run(tc.name, func(t *testing.T) {
			key := "multi/" + tc.name
			// A plain reader: no Len, Seek or ReadAt to take a shortcut through.
			if err := s.Put(ctx, key, io.MultiReader(bytes.NewReader(data)), tc.size); err != nil {
				t.Fatalf("Put: %v", err)
			}
			rc, err := s.Get(ctx, key)
			if err != nil {
				t.Fatal(err)
			}
			h := sha256.New()
			n, err := io.Copy(h, rc)
			rc.Close()
			if err != nil || n != size || !bytes.Equal(h.Sum(nil), want[:]) {
				t.Fatalf("Get: %d bytes, %v; want the %d bytes put", n, err, size)
			}
			// S3 names a multipart object's ETag after its number of parts.
			_, etag, err := s.Read(ctx, key)
			if err != nil || !strings.HasSuffix(etag, `-3"`) {
				t.Fatalf("Read: etag %s, %v; want the ETag of a 3-part upload", etag, err)
			}
		})
	}

	t.Run("ReaderError", func(t *testing.T) {
		blobPut(t, s, "multi/failed", "old")
		boom := errors.New("boom")
		r := io.MultiReader(bytes.NewReader(data[:7<<20]), &errReader{boom})
		if err := s.Put(ctx, "multi/failed", r, size); !errors.Is(err, boom) {
			t.Fatalf("Put = %v, want the reader's error", err)
		}
		if got, _, err := s.Read(ctx, "multi/failed"); err != nil || string(got) != "old" {
			t.Fatalf("after a failed Put: %d bytes, %v; want %q", len(got), err, "old")
		}
		assertNoUploads(t, srv, bucket)
	})

	t.Run("Cancelled", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		r := io.MultiReader(bytes.NewReader(data[:7<<20]), &cancelReader{cancel})
		if err := s.Put(cctx, "multi/cancelled", r, -1); !errors.Is(err, context.Canceled) {
			t.Fatalf("Put = %v, want context.Canceled", err)
		}
		if ok, err := s.Exists(ctx, "multi/cancelled"); ok || err != nil {
			t.Fatalf("Exists after a cancelled Put = %v, %v; want false, nil", ok, err)
		}
		assertNoUploads(t, srv, bucket)
	})
}

func assertNoUploads(t *testing.T, srv *testenv.S3Server, bucket string) {
	t.Helper()
	out, err := rawClient(srv).ListMultipartUploads(t.Context(), &awss3.ListMultipartUploadsInput{Bucket: &bucket})
	if err != nil {
		t.Fatal(err)
	}
	for _, u := range out.Uploads {
		t.Errorf("multipart upload of %s (%s) left pending", aws.ToString(u.Key), aws.ToString(u.UploadId))
	}
}

// While the server is down every method fails with ErrUnavailable after its bounded retries, and the
// store works again once the server is back.
func TestServerDown(t *testing.T) {
	srv := testenv.StartS3(t)
	cfg := config(srv, srv.CreateBucket(t))
	cfg.Timeout, cfg.MaxAttempts = 2*time.Second, 2
	s := open(t, cfg)
	ctx := t.Context()
	etag, err := s.PutIf(ctx, "k", []byte("before"), "")
	if err != nil {
		t.Fatal(err)
	}
	srv.Stop(t)
	calls := map[string]func() error{
		"Put":    func() error { return s.Put(ctx, "k", strings.NewReader("x"), 1) },
		"Get":    func() error { _, err := s.Get(ctx, "k"); return err },
		"Exists": func() error { _, err := s.Exists(ctx, "k"); return err },
		"Read":   func() error { _, _, err := s.Read(ctx, "k"); return err },
		"PutIf":  func() error { _, err := s.PutIf(ctx, "k", []byte("x"), etag); return err },
		"Delete": func() error { return s.Delete(ctx, "k") },
		"Check":  func() error { return s.Check(ctx) },
	}
	for name, call := range calls {
		start := time.Now()
		err := call()
		if !errors.Is(err, blob.ErrUnavailable) {
			t.Errorf("%s while the server is down = %v, want ErrUnavailable", name, err)
		}
		// Two attempts with a backoff of at most 2 s between them; the bound is loose for a busy machine.
		if d := time.Since(start); d > 30*time.Second {
			t.Errorf("%s took %v to give up", name, d)
		}
	}
	srv.Start(t)
	data, got, err := s.Read(ctx, "k")
	if err != nil || string(data) != "before" || got != etag {
		t.Fatalf("Read after restart = %q, %s, %v; want %q, %s", data, got, err, "before", etag)
	}
	if _, err := s.PutIf(ctx, "k", []byte("after"), etag); err != nil {
		t.Fatalf("PutIf after restart: %v", err)
	}
}

// A server that accepts connections but does not answer, or stalls in the middle of a body, costs a
// call its Timeout and then ErrUnavailable.
func TestHungServer(t *testing.T) {
	release := make(chan struct{})
	var once sync.Once
	stop := func() { once.Do(func() { close(release) }) }
	hung := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet && strings.HasSuffix(r.URL.Path, "/stall") {
			w.Header().Set("Content-Length", "100")
			w.Header().Set("ETag", `"x"`)
			w.Write([]byte("ten bytes."))
			w.(http.Flusher).Flush()
		}
		select {
		case <-release:
		case <-r.Context().Done():
		}
	}))
	t.Cleanup(hung.Close)
	t.Cleanup(stop) // runs first: handlers return, so Close does not wait for them
	s := open(t, s3.Config{
		Endpoint: hung.URL, Bucket: "b", AccessKey: "k", SecretKey: "s", PathStyle: true,
		Timeout: 300 * time.Millisecond, MaxAttempts: 1,
	})
	ctx := t.Context()
	if _, _, err := s.Read(ctx, "k"); !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Read from a server that does not answer = %v, want ErrUnavailable", err)
	}
	if err := s.Put(ctx, "k", strings.NewReader("x"), 1); !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Put to a server that does not answer = %v, want ErrUnavailable", err)
	}
	rc, err := s.Get(ctx, "stall")
	if err != nil {
		t.Fatalf("Get: %v", err)
	}
	defer rc.Close()
	got, err := io.ReadAll(rc)
	if string(got) != "ten bytes." || !errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("reading a stalled body = %q, %v; want the bytes sent and ErrUnavailable", got, err)
	}
	// The caller's own cancellation is not an outage.
	cctx, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	cfg := s3.Config{Endpoint: hung.URL, Bucket: "b", AccessKey: "k", SecretKey: "s", PathStyle: true, Timeout: time.Minute}
	if _, err := open(t, cfg).Exists(cctx, "k"); !errors.Is(err, context.DeadlineExceeded) || errors.Is(err, blob.ErrUnavailable) {
		t.Errorf("Exists with an expiring context = %v, want context.DeadlineExceeded, not ErrUnavailable", err)
	}
}

// Wrong credentials are ErrAccessDenied from every method, neither an outage nor a missing object.
func TestWrongCredentials(t *testing.T) {
	srv := testenv.StartS3(t)
	cfg := config(srv, srv.CreateBucket(t))
	ctx := t.Context()
	if err := open(t, cfg).Put(ctx, "k", strings.NewReader("x"), 1); err != nil {
		t.Fatal(err)
	}
	wrongSecret, wrongKey := cfg, cfg
	wrongSecret.SecretKey += "x"
	wrongKey.AccessKey = "nobody"
	for name, cfg := range map[string]s3.Config{"secret": wrongSecret, "access key": wrongKey} {
		t.Run(name, func(t *testing.T) {
			s := open(t, cfg)
			calls := map[string]func() error{
				"Put":    func() error { return s.Put(ctx, "k", strings.NewReader("y"), 1) },
				"Get":    func() error { _, err := s.Get(ctx, "k"); return err },
				"Exists": func() error { _, err := s.Exists(ctx, "k"); return err },
				"Read":   func() error { _, _, err := s.Read(ctx, "k"); return err },
				"PutIf":  func() error { _, err := s.PutIf(ctx, "k", []byte("y"), ""); return err },
				"Delete": func() error { return s.Delete(ctx, "k") },
				"Check":  func() error { return s.Check(ctx) },
			}
			for op, call := range calls {
				err := call()
				if !errors.Is(err, s3.ErrAccessDenied) || errors.Is(err, blob.ErrUnavailable) || errors.Is(err, blob.ErrNotFound) {
					t.Errorf("%s = %v, want ErrAccessDenied only", op, err)
				}
				if err != nil && strings.Contains(err.Error(), cfg.SecretKey) {
					t.Errorf("%s: the error shows the secret: %v", op, err)
				}
			}
		})
	}
	if got := getAll(t, open(t, cfg), "k"); got != "x" {
		t.Fatalf("object after refused writes = %q, want %q", got, "x")
	}
}

// A missing bucket is a descriptive error, never ErrNotFound, which would read as an empty store.
func TestMissingBucket(t *testing.T) {
	srv := testenv.StartS3(t)
	s := open(t, config(srv, "no-such-bucket"))
	ctx := t.Context()
	if err := s.Check(ctx); err == nil || !strings.Contains(err.Error(), "does not exist") {
		t.Errorf("Check = %v, want a missing bucket", err)
	}
	if _, _, err := s.Read(ctx, "latest"); err == nil || errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Read = %v, want an error other than ErrNotFound", err)
	}
	if _, err := s.Get(ctx, "latest"); err == nil || errors.Is(err, blob.ErrNotFound) {
		t.Errorf("Get = %v, want an error other than ErrNotFound", err)
	}
}

// With PathStyle the bucket is the first path segment and the Host is the endpoint's, as a server without
// wildcard DNS needs; the requests go through a recording proxy to versitygw.
func TestPathStyle(t *testing.T) {
	srv := testenv.StartS3(t)
	bucket := srv.CreateBucket(t)
	target, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu   sync.Mutex
		seen []string
	)
	rp := httputil.NewSingleHostReverseProxy(target)
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Host+r.URL.Path)
		mu.Unlock()
		rp.ServeHTTP(w, r)
	}))
	t.Cleanup(proxy.Close)
	cfg := config(srv, bucket)
	cfg.Endpoint = proxy.URL
	s := open(t, cfg)
	ctx := t.Context()
	// The proxy keeps the Host header, which the signature covers.
	if _, err := s.PutIf(ctx, "a/b", []byte("x"), ""); err != nil {
		t.Fatal(err)
	}
	if data, _, err := s.Read(ctx, "a/b"); err != nil || string(data) != "x" {
		t.Fatalf("Read = %q, %v", data, err)
	}
	proxyHost := strings.TrimPrefix(proxy.URL, "http://")
	mu.Lock()
	defer mu.Unlock()
	if len(seen) == 0 {
		t.Fatal("no request reached the proxy")
	}
	for _, hp := range seen {
		if hp != proxyHost+"/"+bucket+"/a/b" {
			t.Errorf("request to %s, want %s/%s/a/b", hp, proxyHost, bucket)
		}
	}
}

func TestNewErrors(t *testing.T) {
	base := s3.Config{Endpoint: "http://127.0.0.1:1", Bucket: "b", AccessKey: "k", SecretKey: "s"}
	for name, mod := range map[string]func(*s3.Config){
		"no bucket":         func(c *s3.Config) { c.Bucket = "" },
		"bad endpoint":      func(c *s3.Config) { c.Endpoint = "127.0.0.1:7070" },
		"endpoint query":    func(c *s3.Config) { c.Endpoint = "http://h/?x=1" },
		"prefix slash":      func(c *s3.Config) { c.Prefix = "a/" },
		"prefix dots":       func(c *s3.Config) { c.Prefix = "a/../b" },
		"secret only":       func(c *s3.Config) { c.AccessKey = "" },
		"access key only":   func(c *s3.Config) { c.SecretKey = "" },
		"small parts":       func(c *s3.Config) { c.PartSize = s3.MinPartSize - 1 },
		"negative timeout":  func(c *s3.Config) { c.Timeout = -time.Second },
		"negative attempts": func(c *s3.Config) { c.MaxAttempts = -1 },
	} {
		cfg := base
		mod(&cfg)
		if _, err := s3.New(t.Context(), cfg); err == nil {
			t.Errorf("%s: New succeeded", name)
		}
	}
	if _, err := s3.New(t.Context(), base); err != nil {
		t.Errorf("New(%+v): %v", base, err)
	}
}

func blobPut(t *testing.T, s blob.Store, key, data string) {
	t.Helper()
	if err := s.Put(t.Context(), key, strings.NewReader(data), int64(len(data))); err != nil {
		t.Fatalf("Put(%s): %v", key, err)
	}
}

func getAll(t *testing.T, s blob.Store, key string) string {
	t.Helper()
	rc, err := s.Get(t.Context(), key)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	defer rc.Close()
	b, err := io.ReadAll(rc)
	if err != nil {
		t.Fatalf("Get(%s): %v", key, err)
	}
	return string(b)
}

type errReader struct{ err error }

func (r *errReader) Read([]byte) (int, error) { return 0, r.err }

// cancelReader cancels the Put's context when the reader gets to it, then yields more data.
type cancelReader struct{ cancel context.CancelFunc }

func (r *cancelReader) Read(p []byte) (int, error) {
	r.cancel()
	return len(p), nil
}

// Parallel readers reuse their connections: a restore runs dozens of GETs at once, and a store that kept
// fewer idle connections than that (the SDK's default is 10 per host) would open and close one for most
// requests. The server is a proxy in front of versitygw that keeps connections alive, as S3 does, and
// counts the connections clients open.
func TestParallelGetsReuseConnections(t *testing.T) {
	srv := testenv.StartS3(t)
	bucket := srv.CreateBucket(t)
	target, err := url.Parse(srv.Endpoint())
	if err != nil {
		t.Fatal(err)
	}
	var opened atomic.Int64
	proxy := httptest.NewUnstartedServer(httputil.NewSingleHostReverseProxy(target))
	proxy.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			opened.Add(1)
		}
	}
	proxy.Start()
	t.Cleanup(proxy.Close)
	cfg := config(srv, bucket)
	cfg.Endpoint = proxy.URL
	s := open(t, cfg)
	ctx := t.Context()
	if err := s.Put(ctx, "obj", strings.NewReader("content"), 7); err != nil {
		t.Fatal(err)
	}
	// Each round, every reader's connection goes back to the pool at once, as when a restore's GETs of
	// small files finish together.
	const readers, rounds = 32, 5
	for range rounds {
		var wg sync.WaitGroup
		for range readers {
			wg.Go(func() {
				rc, err := s.Get(ctx, "obj")
				if err != nil {
					t.Error(err)
					return
				}
				if b, err := io.ReadAll(rc); err != nil || string(b) != "content" {
					t.Errorf("Get = %q, %v", b, err)
				}
				rc.Close()
			})
		}
		wg.Wait()
	}
	// At most one connection per reader, and some slack for a dial that loses its race to a freed one.
	if n := opened.Load(); n > readers*3/2 {
		t.Fatalf("%d readers × %d GETs opened %d connections, want at most %d", readers, rounds, n, readers*3/2)
	}
}
