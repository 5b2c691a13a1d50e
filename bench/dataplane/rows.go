package main

import (
	"fmt"
	"slices"
	"strconv"
	"strings"
)

// Protocol is how the load generator talks to a proxy in one row.
type Protocol struct {
	// Key names it on the command line, Name in the table.
	Key, Name string
	TLS, H2   bool
	KeepAlive bool
	// TCP: the proxy forwards bytes (an L4 listener); the load is HTTP/1.1
	// with keep-alive.
	TCP bool
	// GRPC: unary gRPC calls over h2c, forwarded to the backend over h2c
	// (a GRPCRoute).
	GRPC bool
}

// protocols are the rows, one descriptor each.
var protocols = []Protocol{
	{Key: "http1", Name: "HTTP/1.1 keep-alive", KeepAlive: true},
	{Key: "http1-close", Name: "HTTP/1.1 no keep-alive"},
	{Key: "https", Name: "HTTPS (HTTP/1.1)", TLS: true, KeepAlive: true},
	{Key: "h2", Name: "HTTP/2 over TLS", TLS: true, H2: true, KeepAlive: true},
	{Key: "h2c", Name: "h2c", H2: true, KeepAlive: true},
	{Key: "grpc", Name: "gRPC (h2c)", H2: true, KeepAlive: true, GRPC: true},
	{Key: "tcp", Name: "TCP", TCP: true, KeepAlive: true},
}

func protocolNames() []string {
	var names []string
	for _, p := range protocols {
		names = append(names, p.Key)
	}
	return names
}

// Row is one line of the table: a protocol and how many routes the Gateway
// has (route i: hostname r<i>.bench, every path; the requests go to the last
// route, which a scan reaches last).
type Row struct {
	Protocol Protocol
	Routes   int
}

func (r Row) String() string {
	if r.Protocol.TCP {
		return r.Protocol.Name
	}
	return fmt.Sprintf("%s, %d route%s", r.Protocol.Name, r.Routes, map[bool]string{true: "s"}[r.Routes != 1])
}

// host is the hostname the row's requests carry.
func (r Row) host() string { return routeHost(r.Routes - 1) }

func routeHost(i int) string { return fmt.Sprintf("r%d.bench", i) }

// parseRows makes the rows: each protocol with 1 route, then HTTP/1.1
// keep-alive with each route count above 1.
func parseRows(protos, routes string) ([]Row, error) {
	var rows []Row
	for _, key := range strings.Split(protos, ",") {
		if strings.TrimSpace(key) == "" {
			continue
		}
		i := slices.IndexFunc(protocols, func(p Protocol) bool { return p.Key == strings.TrimSpace(key) })
		if i < 0 {
			return nil, fmt.Errorf("unknown row %q (known: %s)", key, strings.Join(protocolNames(), ","))
		}
		rows = append(rows, Row{Protocol: protocols[i], Routes: 1})
	}
	for _, s := range strings.Split(routes, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 1 {
			return nil, fmt.Errorf("route count %q: want a positive integer", s)
		}
		if n > 1 {
			rows = append(rows, Row{Protocol: protocols[0], Routes: n})
		}
	}
	return rows, nil
}
