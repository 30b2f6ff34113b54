package edge

import "sync"

// relayBuffers are the ReverseProxy copy buffers of relayed responses: without a pool, every exec and file
// call allocated (and the GC then swept) a fresh 32 KiB buffer.
var relayBuffers = &bufferPool{p: sync.Pool{New: func() any { b := make([]byte, 32<<10); return &b }}}

// bufferPool is an httputil.BufferPool over a sync.Pool.
type bufferPool struct{ p sync.Pool }

func (b *bufferPool) Get() []byte  { return *b.p.Get().(*[]byte) }
func (b *bufferPool) Put(x []byte) { b.p.Put(&x) }
