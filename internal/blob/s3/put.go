package s3

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"

	"github.com/aws/aws-sdk-go-v2/aws"
	"github.com/aws/aws-sdk-go-v2/service/s3"
	"github.com/aws/aws-sdk-go-v2/service/s3/types"
)

// The multipart upload is written here rather than with feature/s3/manager's Uploader: that package is
// deprecated in favour of feature/s3/transfermanager (still v0), and its abort runs on the caller's
// context, so a cancelled Put would also fail to abort, silently. Parts go up one after another, so a Put
// holds one part in memory (the Uploader holds Concurrency+1).

// Put reads the first part; if the reader ends within it, the object goes up in one PutObject, else in a
// multipart upload. With size >= 0 a reader that yields a different number of bytes fails the Put before
// anything becomes visible.
func (s *Store) Put(ctx context.Context, key string, r io.Reader, size int64) error {
	k, err := s.objectKey(key)
	if err != nil {
		return err
	}
	if err := ctx.Err(); err != nil {
		return fmt.Errorf("%s %s: %w", opPut, key, err)
	}
	if size > MaxParts*s.cfg.PartSize {
		return fmt.Errorf("%s %s: %d bytes is more than %d parts of %d bytes", opPut, key, size, MaxParts, s.cfg.PartSize)
	}
	src := r
	if size >= 0 {
		src = io.LimitReader(r, size+1) // one byte more than promised reveals a longer reader
	}
	pr := &partReader{r: bufio.NewReader(&ctxReader{ctx: ctx, r: src})}
	var (
		first []byte
		n     int
		last  bool
	)
	switch {
	case size < 0:
		first, last, err = pr.fillGrow(s.cfg.PartSize)
		n = len(first)
	case size < s.cfg.PartSize:
		first = make([]byte, size+1) // room for the byte that must not be there
		n, last, err = pr.fill(first)
	default:
		first = make([]byte, s.cfg.PartSize)
		n, last, err = pr.fill(first)
	}
	if err != nil {
		return fmt.Errorf("%s %s: %w", opPut, key, err)
	}
	if !last {
		return s.putMultipart(ctx, key, k, first[:n], pr, size)
	}
	if size >= 0 && int64(n) != size {
		return fmt.Errorf("%s %s: %w", opPut, key, sizeMismatch(int64(n), size))
	}
	cctx, cancel := context.WithTimeout(ctx, s.dataTimeout(n))
	defer cancel()
	_, err = s.client.PutObject(cctx, &s3.PutObjectInput{
		Bucket:        &s.cfg.Bucket,
		Key:           &k,
		Body:          bytes.NewReader(first[:n]),
		ContentLength: aws.Int64(int64(n)),
	})
	if err != nil {
		return s.wrapErr(ctx, opPut, key, err, cctx.Err() != nil)
	}
	return nil
}

// putMultipart uploads first and the rest of pr as the parts of a multipart upload, completing it only
// once pr has ended with the promised size (if size >= 0), and aborting it on any failure.
func (s *Store) putMultipart(ctx context.Context, key, k string, first []byte, pr *partReader, size int64) (err error) {
	cctx, cancel := context.WithTimeout(ctx, s.cfg.Timeout)
	created, err := s.client.CreateMultipartUpload(cctx, &s3.CreateMultipartUploadInput{Bucket: &s.cfg.Bucket, Key: &k})
	timedOut := cctx.Err() != nil
	cancel()
	if err != nil {
		return s.wrapErr(ctx, opPut, key, err, timedOut)
	}
	id := aws.ToString(created.UploadId)
	if id == "" {
		return fmt.Errorf("%s %s: the server sent no upload ID", opPut, key)
	}
	defer func() {
		if err != nil {
			s.abort(ctx, key, k, id)
		}
	}()

	var (
		parts []types.CompletedPart
		buf   = first
		total int64
		last  bool
	)
	for num := int32(1); ; num++ {
		total += int64(len(buf))
		etag, err := s.uploadPart(ctx, key, k, id, num, buf)
		if err != nil {
			return err
		}
		parts = append(parts, types.CompletedPart{ETag: aws.String(etag), PartNumber: aws.Int32(num)})
		if last {
			break
		}
		if num == MaxParts {
			return fmt.Errorf("%s %s: more than %d parts of %d bytes", opPut, key, MaxParts, s.cfg.PartSize)
		}
		if int64(cap(buf)) < s.cfg.PartSize {
			buf = make([]byte, s.cfg.PartSize)
		}
		var n int
		n, last, err = pr.fill(buf[:s.cfg.PartSize])
		if err != nil {
			return fmt.Errorf("%s %s: %w", opPut, key, err)
		}
		buf = buf[:n]
		if n == 0 {
			break // the previous part ended exactly at the end
		}
	}
	if size >= 0 && total != size {
		return fmt.Errorf("%s %s: %w", opPut, key, sizeMismatch(total, size))
	}

	cctx, cancel = context.WithTimeout(ctx, s.cfg.Timeout)
	defer cancel()
	_, err = s.client.CompleteMultipartUpload(cctx, &s3.CompleteMultipartUploadInput{
		Bucket:          &s.cfg.Bucket,
		Key:             &k,
		UploadId:        &id,
		MultipartUpload: &types.CompletedMultipartUpload{Parts: parts},
	})
	if err != nil {
		return s.wrapErr(ctx, opPut, key, err, cctx.Err() != nil)
	}
	return nil
}

func (s *Store) uploadPart(ctx context.Context, key, k, id string, num int32, data []byte) (string, error) {
	cctx, cancel := context.WithTimeout(ctx, s.dataTimeout(len(data)))
	defer cancel()
	out, err := s.client.UploadPart(cctx, &s3.UploadPartInput{
		Bucket:        &s.cfg.Bucket,
		Key:           &k,
		UploadId:      &id,
		PartNumber:    aws.Int32(num),
		Body:          bytes.NewReader(data),
		ContentLength: aws.Int64(int64(len(data))),
	})
	if err != nil {
		return "", s.wrapErr(ctx, fmt.Sprintf("%s (part %d)", opPut, num), key, err, cctx.Err() != nil)
	}
	if out.ETag == nil || *out.ETag == "" {
		return "", fmt.Errorf("%s %s: the server sent no ETag for part %d", opPut, key, num)
	}
	return *out.ETag, nil
}

// abort aborts a failed multipart upload, also when ctx has ended (that is often why it failed).
func (s *Store) abort(ctx context.Context, key, k, id string) {
	actx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.cfg.Timeout)
	defer cancel()
	_, err := s.client.AbortMultipartUpload(actx, &s3.AbortMultipartUploadInput{Bucket: &s.cfg.Bucket, Key: &k, UploadId: &id})
	if err != nil && classify(err, false) != classNotFound {
		s.cfg.Logger.Warn("s3: abort of a failed multipart upload failed; its parts stay stored until the bucket's lifecycle rule removes them",
			"bucket", s.cfg.Bucket, "key", key, "upload_id", id, "err", err)
	}
}

// partReader reads parts and tells whether a part is the last one.
type partReader struct{ r *bufio.Reader }

// fill reads until buf is full or the reader ends; last reports that nothing follows the bytes read.
// Only io.EOF ends the reader: any other error, io.ErrUnexpectedEOF included, fails the Put.
func (p *partReader) fill(buf []byte) (n int, last bool, err error) {
	for n < len(buf) {
		k, err := p.r.Read(buf[n:])
		n += k
		if err == io.EOF {
			return n, true, nil
		}
		if err != nil {
			return n, false, err
		}
	}
	last, err = p.atEOF()
	return n, last, err
}

// fillGrow reads up to limit bytes into a buffer grown as needed, for a reader of unknown size that may
// well be small.
func (p *partReader) fillGrow(limit int64) (data []byte, last bool, err error) {
	var b bytes.Buffer
	n, err := b.ReadFrom(io.LimitReader(p.r, limit)) // nil at EOF
	if err != nil {
		return nil, false, err
	}
	if n < limit {
		return b.Bytes(), true, nil
	}
	last, err = p.atEOF()
	return b.Bytes(), last, err
}

// atEOF reports whether the reader has ended, without consuming what follows if it has not.
func (p *partReader) atEOF() (bool, error) {
	_, err := p.r.Peek(1)
	if err == io.EOF {
		return true, nil
	}
	return false, err
}

func sizeMismatch(n, size int64) error {
	if n > size {
		return fmt.Errorf("reader yielded more than %d bytes, size is %d", size, size)
	}
	return fmt.Errorf("reader yielded %d bytes, size is %d", n, size)
}

// ctxReader stops a long copy when the context ends.
type ctxReader struct {
	ctx context.Context
	r   io.Reader
}

func (c *ctxReader) Read(p []byte) (int, error) {
	if err := c.ctx.Err(); err != nil {
		return 0, err
	}
	return c.r.Read(p)
}
