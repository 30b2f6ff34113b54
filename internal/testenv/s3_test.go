package testenv_test

import (
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/credentials"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/smithy-go"

	"github.com/warren-mesh/warren/internal/testenv"
)

func s3Client(srv *testenv.S3Server, secret string) *s3.Client {
	return s3.New(s3.Options{
		Region:                     srv.Region(),
		BaseEndpoint:               aws.String(srv.Endpoint()),
		UsePathStyle:               true,
		Credentials:                credentials.NewStaticCredentialsProvider(srv.AccessKey(), secret, ""),
		RequestChecksumCalculation: aws.RequestChecksumCalculationWhenRequired,
		ResponseChecksumValidation: aws.ResponseChecksumValidationWhenRequired,
		RetryMaxAttempts:           1,
	})
}

// The server stores objects, checks signatures, hands out distinct buckets and keeps its data across a
// restart on the same endpoint.
func TestS3Server(t *testing.T) {
	srv := testenv.StartS3(t)
	ctx := t.Context()
	c := s3Client(srv, srv.SecretKey())
	b1, b2 := srv.CreateBucket(t), srv.CreateBucket(t)
	if b1 == b2 {
		t.Fatalf("CreateBucket returned %q twice", b1)
	}
	put := func(c *s3.Client, bucket, key, data string) error {
		_, err := c.PutObject(ctx, &s3.PutObjectInput{Bucket: &bucket, Key: &key, Body: strings.NewReader(data)})
		return err
	}
	get := func(bucket, key string) string {
		t.Helper()
		out, err := c.GetObject(ctx, &s3.GetObjectInput{Bucket: &bucket, Key: &key})
		if err != nil {
			t.Fatalf("get %s/%s: %v", bucket, key, err)
		}
		defer out.Body.Close()
		b, err := io.ReadAll(out.Body)
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	if err := put(c, b1, "k", "hello"); err != nil {
		t.Fatal(err)
	}
	if got := get(b1, "k"); got != "hello" {
		t.Fatalf("get = %q, want hello", got)
	}

	var apiErr smithy.APIError
	err := put(s3Client(srv, srv.SecretKey()+"x"), b1, "k", "forged")
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "SignatureDoesNotMatch" {
		t.Fatalf("put with a wrong secret = %v, want SignatureDoesNotMatch", err)
	}
	// An unknown access key is S3's 403 InvalidAccessKeyId (single-account mode would answer 404).
	other := s3.New(s3.Options{
		Region: srv.Region(), BaseEndpoint: aws.String(srv.Endpoint()), UsePathStyle: true, RetryMaxAttempts: 1,
		Credentials: credentials.NewStaticCredentialsProvider("nobody", srv.SecretKey(), ""),
	})
	err = put(other, b1, "k", "forged")
	if !errors.As(err, &apiErr) || apiErr.ErrorCode() != "InvalidAccessKeyId" {
		t.Fatalf("put with an unknown access key = %v, want InvalidAccessKeyId", err)
	}
	resp, err := http.Get(srv.Endpoint() + "/" + b1 + "/k")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusForbidden {
		t.Fatalf("unsigned GET = %s, want 403", resp.Status)
	}

	srv.Stop(t)
	if srv.Running() {
		t.Fatal("Running after Stop")
	}
	if err := put(c, b2, "k", "while down"); err == nil {
		t.Fatal("put while stopped succeeded")
	}
	srv.Start(t)
	if got := get(b1, "k"); got != "hello" {
		t.Fatalf("after restart: get = %q, want hello", got)
	}
}
