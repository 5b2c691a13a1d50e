package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/utils/ptr"
	gwv1 "sigs.k8s.io/gateway-api/apis/v1"

	"github.com/outrigger-ccm/outrigger/internal/gateway/dataplane"
)

// Peer is one column group of the table: a proxy (or none) in front of the
// backend.
type Peer struct {
	Name string
	// Binary is the executable run, looked up in PATH; "" for a peer of
	// this binary or none. Package installs it.
	Binary, Package string
	// Supports says which rows it can serve.
	Supports func(Protocol) bool
	// Command writes the peer's configuration for the row into dir and
	// returns the command line serving it on port; nil for the no-proxy
	// peer.
	Command func(s setup, row Row, port int) ([]string, error)
}

// setup is what every peer's configuration refers to.
type setup struct {
	dir     string
	backend *backend
	cert    certificate
	self    string
	// certFile and keyFile hold cert; pemFile both (HAProxy).
	certFile, keyFile, pemFile string
	// grpcFile holds a gRPC call's request body (h2load).
	grpcFile string
}

// direct is the limit: the load generator on the backend itself.
const direct = "no proxy"

func all(Protocol) bool { return true }

func peers() []*Peer {
	return []*Peer{
		{Name: direct, Supports: all},
		{Name: "outrigger", Supports: all, Command: outriggerCommand},
		{Name: "nginx", Binary: "nginx", Package: "nginx libnginx-mod-stream", Supports: all, Command: nginxCommand},
		{Name: "haproxy", Binary: "haproxy", Package: "haproxy", Supports: all, Command: haproxyCommand},
		// Caddy's Debian package has no layer-4 app.
		{Name: "caddy", Binary: "caddy", Package: "caddy", Supports: func(p Protocol) bool { return !p.TCP }, Command: caddyCommand},
	}
}

func peerNames() []string {
	var names []string
	for _, p := range peers() {
		names = append(names, p.Name)
	}
	return names
}

func parsePeers(s string) ([]*Peer, error) {
	var out []*Peer
	for _, name := range strings.Split(s, ",") {
		name = strings.TrimSpace(name)
		found := false
		for _, p := range peers() {
			if p.Name == name {
				out, found = append(out, p), true
			}
		}
		if !found {
			return nil, fmt.Errorf("unknown peer %q (known: %s)", name, strings.Join(peerNames(), ","))
		}
	}
	return out, nil
}

func write(dir, name, content string) (string, error) {
	path := filepath.Join(dir, name)
	return path, os.WriteFile(path, []byte(content), 0o600)
}

// outriggerCommand programs the data plane as the gateway controller would
// for a Gateway of one listener and row.Routes HTTPRoutes, one hostname
// each.
func outriggerCommand(s setup, row Row, port int) ([]string, error) {
	backend := []dataplane.Backend{{Address: s.backend.plain, Weight: 1, H2C: row.Protocol.GRPC}}
	p := dataplane.Port{Port: int32(port), Protocol: dataplane.HTTP}
	switch {
	case row.Protocol.TCP:
		p.Protocol, p.Backends = dataplane.TCP, backend
	default:
		if row.Protocol.TLS {
			p.Protocol = dataplane.HTTPS
			p.Certificates = []dataplane.Certificate{{CertPEM: s.cert.certPEM, KeyPEM: s.cert.keyPEM}}
		}
		for i := range row.Routes {
			p.Hosts = append(p.Hosts, dataplane.VirtualHost{
				Hostname: routeHost(i),
				Rules: []dataplane.Rule{{
					Route: fmt.Sprintf("bench/r%d", i),
					Match: gwv1.HTTPRouteMatch{Path: &gwv1.HTTPPathMatch{
						Type: ptr.To(gwv1.PathMatchPathPrefix), Value: ptr.To("/"),
					}},
					Backends: backend,
					GRPC:     row.Protocol.GRPC,
				}},
			})
		}
	}
	cfg := dataplane.Config{Gateway: "bench/bench", Generation: 1, Ports: []dataplane.Port{p}}
	data, err := cfg.Marshal()
	if err != nil {
		return nil, err
	}
	path, err := write(s.dir, "outrigger.json", string(data))
	if err != nil {
		return nil, err
	}
	return []string{"env", childEnv + "=" + path, s.self}, nil
}

// nginxCommand: one process (no master), one worker's event loop, a server
// block per route, keep-alive connections to the backend.
func nginxCommand(s setup, row Row, port int) ([]string, error) {
	var b strings.Builder
	fmt.Fprintf(&b, "daemon off;\nmaster_process off;\nworker_processes 1;\npid %s;\nerror_log %s error;\n",
		filepath.Join(s.dir, "nginx.pid"), filepath.Join(s.dir, "nginx-error.log"))
	if row.Protocol.TCP {
		b.WriteString("load_module /usr/lib/nginx/modules/ngx_stream_module.so;\n")
	}
	b.WriteString("events { worker_connections 8000; }\n")
	if row.Protocol.TCP {
		fmt.Fprintf(&b, "stream {\n  server { listen 127.0.0.1:%d; proxy_pass %s; }\n}\n", port, s.backend.plain)
		path, err := write(s.dir, "nginx.conf", b.String())
		return []string{"nginx", "-c", path, "-p", s.dir}, err
	}
	// nginx closes a connection after 1,000 requests by default (an HTTP/2
	// one with GOAWAY, which h2load does not follow): the others do not.
	b.WriteString("http {\n  access_log off;\n  keepalive_requests 100000000;\n")
	for _, t := range []string{"client_body", "proxy", "fastcgi", "uwsgi", "scgi"} {
		fmt.Fprintf(&b, "  %s_temp_path %s;\n", t, filepath.Join(s.dir, "nginx-"+t))
	}
	b.WriteString("  server_names_hash_max_size 65536;\n  server_names_hash_bucket_size 128;\n")
	fmt.Fprintf(&b, "  upstream backend { server %s; keepalive 256; keepalive_requests 100000000; }\n", s.backend.plain)
	listen := fmt.Sprintf("127.0.0.1:%d", port)
	switch {
	case row.Protocol.TLS && row.Protocol.H2:
		listen += " ssl http2"
	case row.Protocol.TLS:
		listen += " ssl"
	case row.Protocol.H2:
		listen += " http2"
	}
	for i := range row.Routes {
		fmt.Fprintf(&b, "  server {\n    listen %s;\n    server_name %s;\n", listen, routeHost(i))
		if row.Protocol.TLS {
			fmt.Fprintf(&b, "    ssl_certificate %s;\n    ssl_certificate_key %s;\n", s.certFile, s.keyFile)
		}
		if row.Protocol.GRPC {
			b.WriteString("    location / {\n      grpc_pass grpc://backend;\n    }\n  }\n")
			continue
		}
		b.WriteString("    location / {\n      proxy_pass http://backend;\n      proxy_http_version 1.1;\n" +
			"      proxy_set_header Connection \"\";\n      proxy_set_header Host $host;\n    }\n  }\n")
	}
	b.WriteString("}\n")
	path, err := write(s.dir, "nginx.conf", b.String())
	return []string{"nginx", "-c", path, "-p", s.dir}, err
}

// haproxyCommand: one thread, routes as a map from hostname to backend
// (HAProxy's way with many hosts), keep-alive to the backend.
func haproxyCommand(s setup, row Row, port int) ([]string, error) {
	var b strings.Builder
	b.WriteString("global\n  nbthread 1\n  maxconn 8000\n\n" +
		"defaults\n  timeout connect 5s\n  timeout client 30s\n  timeout server 30s\n")
	if row.Protocol.TCP {
		fmt.Fprintf(&b, "  mode tcp\n\nfrontend fe\n  bind 127.0.0.1:%d\n  default_backend be\n\nbackend be\n  server s1 %s\n", port, s.backend.plain)
	} else {
		var m strings.Builder
		for i := range row.Routes {
			fmt.Fprintf(&m, "%s be\n", routeHost(i))
		}
		mapFile, err := write(s.dir, "haproxy-hosts.map", m.String())
		if err != nil {
			return nil, err
		}
		bind := fmt.Sprintf("127.0.0.1:%d", port)
		switch {
		case row.Protocol.TLS && row.Protocol.H2:
			bind += " ssl crt " + s.pemFile + " alpn h2,http/1.1"
		case row.Protocol.TLS:
			bind += " ssl crt " + s.pemFile + " alpn http/1.1"
		case row.Protocol.H2:
			bind += " proto h2"
		}
		fmt.Fprintf(&b, "  mode http\n  http-reuse always\n\nfrontend fe\n  bind %s\n"+
			"  use_backend %%[req.hdr(host),lower,map(%s)]\n\nbackend be\n  server s1 %s%s\n", bind, mapFile, s.backend.plain,
			map[bool]string{true: " proto h2"}[row.Protocol.GRPC])
	}
	path, err := write(s.dir, "haproxy.cfg", b.String())
	return []string{"haproxy", "-db", "-f", path}, err
}

// caddyCommand: Caddy's JSON configuration, a route per hostname, no admin
// endpoint, no automatic HTTPS.
func caddyCommand(s setup, row Row, port int) ([]string, error) {
	type obj = map[string]any
	proxy := obj{"handler": "reverse_proxy", "upstreams": []obj{{"dial": s.backend.plain}}}
	if row.Protocol.GRPC {
		proxy["transport"] = obj{"protocol": "http", "versions": []string{"h2c"}}
	}
	var routes []obj
	for i := range row.Routes {
		routes = append(routes, obj{
			"match":    []obj{{"host": []string{routeHost(i)}}},
			"handle":   []obj{proxy},
			"terminal": true,
		})
	}
	server := obj{
		"listen":          []string{fmt.Sprintf("127.0.0.1:%d", port)},
		"protocols":       []string{"h1", "h2", "h2c"},
		"automatic_https": obj{"disable": true},
		"routes":          routes,
	}
	apps := obj{"http": obj{"servers": obj{"bench": server}}}
	if row.Protocol.TLS {
		server["tls_connection_policies"] = []obj{{"certificate_selection": obj{"any_tag": []string{"bench"}}}}
		apps["tls"] = obj{"certificates": obj{"load_files": []obj{{"certificate": s.certFile, "key": s.keyFile, "tags": []string{"bench"}}}}}
	}
	data, err := json.Marshal(obj{
		"admin":   obj{"disabled": true},
		"logging": obj{"logs": obj{"default": obj{"level": "ERROR"}}},
		"storage": obj{"module": "file_system", "root": filepath.Join(s.dir, "caddy")},
		"apps":    apps,
	})
	if err != nil {
		return nil, err
	}
	path, err := write(s.dir, "caddy.json", string(data))
	return []string{"env", "HOME=" + s.dir, "XDG_CONFIG_HOME=" + s.dir, "XDG_DATA_HOME=" + s.dir, "caddy", "run", "--config", path}, err
}
