package isolate

import (
	"github.com/google/nftables"
	"github.com/mdlayher/netlink"
	"golang.org/x/sys/unix"
)

// nftReadBuffer is the netlink receive (and send) buffer of the runner's nftables connections. A flush sends every rule
// of a table in one batch and the kernel answers each with an acknowledgement before the first is read; with
// the egress filter's ~70 rules the default buffer (rmem_default, about 208 KiB of skb truesize) overflowed
// under load, and the flush failed with ENOBUFS ("no buffer space available"), failing the sandbox's start.
// The send side is raised as well: the batch goes out in one sendmsg, refused with EMSGSIZE ("message too
// long") when it is larger than the socket's send buffer (wmem_default, about 208 KiB), which failed sandbox
// starts in CI.
const nftReadBuffer = 8 << 20

// newNFT opens an nftables connection with a receive buffer large enough for a whole table's answers: forced
// past rmem_max where the runner may (root, as it is whenever it makes networks), else as large as allowed.
func newNFT(opts ...nftables.ConnOption) (*nftables.Conn, error) {
	opts = append(opts, nftables.WithSockOptions(func(c *netlink.Conn) error {
		rc, err := c.SyscallConn()
		if err == nil {
			var serr error
			if cerr := rc.Control(func(fd uintptr) {
				serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_RCVBUFFORCE, nftReadBuffer)
				if serr == nil {
					serr = unix.SetsockoptInt(int(fd), unix.SOL_SOCKET, unix.SO_SNDBUFFORCE, nftReadBuffer)
				}
			}); cerr == nil && serr == nil {
				return nil
			}
		}
		if err := c.SetReadBuffer(nftReadBuffer); err != nil {
			return err
		}
		return c.SetWriteBuffer(nftReadBuffer)
	}))
	return nftables.New(opts...)
}
