package announce

import (
	"encoding/binary"
	"fmt"
	"net"
	"net/netip"

	"github.com/vishvananda/netlink"
	"golang.org/x/sys/unix"
)

// LinkAddresses holds VIPs as /32 (or /128) addresses on a link (the
// loopback by default, so routing and source address choice on the node
// do not change) and announces them on the interface facing the network:
// Linux answers ARP there for any local address (arp_ignore 0).
type LinkAddresses struct {
	link  netlink.Link
	iface *net.Interface
}

// NewLinkAddresses holds VIPs on link and announces them on the
// interface that holds nodeIP.
func NewLinkAddresses(link string, nodeIP netip.Addr) (*LinkAddresses, error) {
	l, err := netlink.LinkByName(link)
	if err != nil {
		return nil, fmt.Errorf("link %s: %w", link, err)
	}
	iface, err := interfaceOf(nodeIP)
	if err != nil {
		return nil, err
	}
	return &LinkAddresses{link: l, iface: iface}, nil
}

func hostPrefix(ip netip.Addr) *net.IPNet {
	return &net.IPNet{IP: ip.AsSlice(), Mask: net.CIDRMask(ip.BitLen(), ip.BitLen())}
}

// List implements Addresses.
func (l *LinkAddresses) List(pool netip.Prefix) ([]netip.Addr, error) {
	family := netlink.FAMILY_V4
	if pool.Addr().Is6() {
		family = netlink.FAMILY_V6
	}
	addrs, err := netlink.AddrList(l.link, family)
	if err != nil {
		return nil, err
	}
	var out []netip.Addr
	for _, a := range addrs {
		ip, ok := netip.AddrFromSlice(a.IP)
		if !ok {
			continue
		}
		ip = ip.Unmap()
		if ones, bits := a.Mask.Size(); ones == bits && pool.Contains(ip) {
			out = append(out, ip)
		}
	}
	return out, nil
}

// Add implements Addresses.
func (l *LinkAddresses) Add(ip netip.Addr) error {
	return netlink.AddrReplace(l.link, &netlink.Addr{IPNet: hostPrefix(ip)})
}

// Remove implements Addresses.
func (l *LinkAddresses) Remove(ip netip.Addr) error {
	err := netlink.AddrDel(l.link, &netlink.Addr{IPNet: hostPrefix(ip)})
	if err == unix.EADDRNOTAVAIL {
		return nil
	}
	return err
}

// Announce sends a gratuitous ARP for ip from the network interface, so
// neighbours that cached another node's address for it switch at once
// instead of after their cache entry goes stale. IPv6 relies on neighbour
// discovery.
func (l *LinkAddresses) Announce(ip netip.Addr) error {
	if !ip.Is4() {
		return nil
	}
	fd, err := unix.Socket(unix.AF_PACKET, unix.SOCK_RAW, int(htons(unix.ETH_P_ARP)))
	if err != nil {
		return fmt.Errorf("packet socket: %w", err)
	}
	defer unix.Close(fd)
	broadcast := []byte{0xff, 0xff, 0xff, 0xff, 0xff, 0xff}
	mac := l.iface.HardwareAddr
	v4 := ip.As4()
	frame := make([]byte, 0, 42)
	frame = append(frame, broadcast...)
	frame = append(frame, mac...)
	frame = binary.BigEndian.AppendUint16(frame, unix.ETH_P_ARP)
	frame = binary.BigEndian.AppendUint16(frame, 1)      // Ethernet
	frame = binary.BigEndian.AppendUint16(frame, 0x0800) // IPv4
	frame = append(frame, 6, 4)
	frame = binary.BigEndian.AppendUint16(frame, 1) // request: a gratuitous ARP
	frame = append(frame, mac...)
	frame = append(frame, v4[:]...)
	frame = append(frame, 0, 0, 0, 0, 0, 0)
	frame = append(frame, v4[:]...)
	sa := &unix.SockaddrLinklayer{Protocol: htons(unix.ETH_P_ARP), Ifindex: l.iface.Index, Halen: 6}
	copy(sa.Addr[:], broadcast)
	return unix.Sendto(fd, frame, 0, sa)
}

func htons(v uint16) uint16 { return v<<8 | v>>8 }
