package config

import (
	"fmt"
	"net/netip"
)

// CIDR is a range of addresses in trusted_proxies: "10.0.0.0/8",
// "fd00::/8", or one address ("10.0.0.1" is 10.0.0.1/32), as nginx's
// set_real_ip_from takes them.
type CIDR struct{ netip.Prefix }

// UnmarshalText reads a range or one address.
func (c *CIDR) UnmarshalText(b []byte) error {
	s := string(b)
	if p, err := netip.ParsePrefix(s); err == nil {
		c.Prefix = p.Masked()
		return nil
	}
	if a, err := netip.ParseAddr(s); err == nil {
		c.Prefix = netip.PrefixFrom(a, a.BitLen())
		return nil
	}
	return fmt.Errorf("invalid CIDR %q (want a range such as 10.0.0.0/8 or fd00::/8, or one address)", s)
}

// Prefixes are the ranges of cs, as the handler takes them.
func Prefixes(cs []CIDR) []netip.Prefix {
	out := make([]netip.Prefix, len(cs))
	for i, c := range cs {
		out[i] = c.Prefix
	}
	return out
}
