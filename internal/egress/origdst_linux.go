package egress

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"golang.org/x/sys/unix"
)

// ip6tSoOriginalDst is IP6T_SO_ORIGINAL_DST of linux/netfilter_ipv6/ip6_tables.h.
const ip6tSoOriginalDst = 80

// originalDst is where the sandbox sent a connection the nftables redirect brought to the gateway
// (SO_ORIGINAL_DST, read from the connection tracking entry). The socket's family decides the option:
// the proxy listens on one socket per family, never on a dual-stack one.
func originalDst(c *net.TCPConn) (netip.AddrPort, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return netip.AddrPort{}, err
	}
	local, _ := netip.ParseAddrPort(c.LocalAddr().String())
	var dst netip.AddrPort
	var serr error
	err = raw.Control(func(fd uintptr) {
		if local.Addr().Is4() {
			// struct sockaddr_in fits the 16 bytes of an ipv6_mreq's address.
			m, err := unix.GetsockoptIPv6Mreq(int(fd), unix.SOL_IP, unix.SO_ORIGINAL_DST)
			if err != nil {
				serr = err
				return
			}
			port := binary.BigEndian.Uint16(m.Multiaddr[2:4])
			dst = netip.AddrPortFrom(netip.AddrFrom4([4]byte(m.Multiaddr[4:8])), port)
			return
		}
		// struct sockaddr_in6 fits an ip6_mtuinfo.
		m, err := unix.GetsockoptIPv6MTUInfo(int(fd), unix.SOL_IPV6, ip6tSoOriginalDst)
		if err != nil {
			serr = err
			return
		}
		var b [2]byte // the port is in network order in memory
		binary.NativeEndian.PutUint16(b[:], m.Addr.Port)
		port := binary.BigEndian.Uint16(b[:])
		dst = netip.AddrPortFrom(netip.AddrFrom16(m.Addr.Addr), port)
	})
	if err == nil {
		err = serr
	}
	if err != nil {
		return netip.AddrPort{}, fmt.Errorf("original destination: %w", err)
	}
	return dst, nil
}
