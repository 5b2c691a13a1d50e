// An Outrigger cloud provider plugin in JavaScript: a small in-memory cloud
// (instances, load balancers, routes) served over the Outrigger plugin
// protocol v1 (pkg/plugin/proto/outrigger/plugin/v1/plugin.proto).
//
//   node plugin.js --endpoint unix:///tmp/outrigger-js.sock --instances node-1,node-2,node-3
//
// Kubernetes objects arrive as JSON bytes; errors are gRPC codes, with the
// "outrigger-reason" trailer for a classified failure. Load balancers take
// their backends as a stream (LOAD_BALANCER_STREAM), so any number of nodes
// fits in messages of a few MiB.
'use strict';

const path = require('path');
const fs = require('fs');
const grpc = require('@grpc/grpc-js');
const protoLoader = require('@grpc/proto-loader');

const PROTO = path.join(__dirname, '..', '..', 'pkg', 'plugin', 'proto', 'outrigger', 'plugin', 'v1', 'plugin.proto');
const PROVIDER = 'memory';

function parseArgs(argv) {
  const args = { endpoint: 'unix:///tmp/outrigger-js.sock', instances: [], maxLoadBalancers: 0 };
  for (let i = 0; i < argv.length; i++) {
    const [flag, inline] = argv[i].split('=', 2);
    const value = inline !== undefined ? inline : argv[++i];
    switch (flag) {
      case '--endpoint': args.endpoint = value; break;
      case '--instances': args.instances = value.split(',').filter(Boolean); break;
      case '--max-load-balancers': args.maxLoadBalancers = Number(value); break;
      default: throw new Error(`unknown flag ${flag}`);
    }
  }
  if (!args.endpoint.startsWith('unix://')) {
    throw new Error(`refusing to serve ${args.endpoint} without TLS: use unix:///path`);
  }
  return args;
}

// The in-memory cloud.
class Cloud {
  constructor(names, maxLoadBalancers) {
    this.instances = new Map(); // id -> instance
    names.forEach((name, i) => {
      const id = `m-${String(i + 1).padStart(4, '0')}`;
      this.instances.set(id, {
        id, name, type: 'memory.small', zone: `memory-zone-${'abc'[i % 3]}`, region: 'memory-region',
        addresses: [{ type: 'InternalIP', address: `10.77.${(i + 1) >> 8}.${(i + 1) & 255}` }, { type: 'Hostname', address: name }],
      });
    });
    this.loadBalancers = new Map(); // name -> {ip, ports, nodes}
    this.nextIP = 1;
    this.maxLoadBalancers = maxLoadBalancers;
    this.routes = new Map(); // name -> route
  }

  // find looks a node up by providerID (memory://<id>), else by name.
  find(node) {
    const providerID = (node.spec && node.spec.providerID) || '';
    if (providerID.startsWith(`${PROVIDER}://`)) {
      return this.instances.get(providerID.slice(PROVIDER.length + 3));
    }
    for (const inst of this.instances.values()) {
      if (inst.name === node.metadata.name) return inst;
    }
    return undefined;
  }
}

function fail(callback, code, message, reason) {
  const err = { code, details: message };
  if (reason) {
    err.metadata = new grpc.Metadata();
    err.metadata.set('outrigger-reason', reason);
  }
  callback(err);
}

const json = (buf) => JSON.parse(Buffer.from(buf).toString('utf8'));
const bytes = (obj) => Buffer.from(JSON.stringify(obj), 'utf8');

function lbName(service) {
  // Upstream's default: "a" + the UID without dashes, at most 32 characters.
  return ('a' + service.metadata.uid.replace(/-/g, '')).slice(0, 32);
}

// collect reads a LOAD_BALANCER_STREAM request to its end (the first
// message has the Service and the node count, each message some nodes) and
// then acts on it. A stream cut short (cancelled, or nodes missing) changes
// nothing: acting on part of the backends would drop the others.
function collect(call, cb, act) {
  let first;
  let bad;
  const nodes = [];
  call.on('data', (m) => {
    if (!first) first = m;
    try {
      for (const b of m.nodes) nodes.push(json(b));
    } catch (e) {
      bad = bad || `a node is not JSON: ${e.message}`;
    }
  });
  call.on('error', () => {}); // a cancelled call: call.cancelled says so at 'end'
  call.on('end', () => {
    if (call.cancelled) return;
    if (bad) return fail(cb, grpc.status.INVALID_ARGUMENT, bad);
    if (!first) return fail(cb, grpc.status.INVALID_ARGUMENT, 'empty stream: the first message carries the Service');
    if (nodes.length !== first.nodeCount) {
      return fail(cb, grpc.status.INVALID_ARGUMENT, `the stream carried ${nodes.length} nodes, its first message announced ${first.nodeCount}`);
    }
    let service;
    try {
      service = json(first.service);
    } catch (e) {
      return fail(cb, grpc.status.INVALID_ARGUMENT, `the service is not JSON: ${e.message}`);
    }
    act(service, nodes, cb);
  });
}

function handlers(cloud) {
  const metadata = (inst) => ({
    providerId: `${PROVIDER}://${inst.id}`, instanceType: inst.type, zone: inst.zone, region: inst.region,
    nodeAddresses: inst.addresses,
  });
  const lbStatus = (lb) => ({ ingress: [{ ip: lb.ip, ipMode: 'VIP' }] });
  const ensure = (service, nodes, cb) => {
    const name = lbName(service);
    let lb = cloud.loadBalancers.get(name);
    if (!lb) {
      if (cloud.maxLoadBalancers > 0 && cloud.loadBalancers.size >= cloud.maxLoadBalancers) {
        return fail(cb, grpc.status.UNKNOWN, `load balancer quota of ${cloud.maxLoadBalancers} used up`, 'QuotaExceeded');
      }
      const n = cloud.nextIP++;
      lb = { ip: `127.100.${n >> 8}.${n & 255}` };
      cloud.loadBalancers.set(name, lb);
    }
    lb.ports = (service.spec.ports || []).map((p) => `${p.protocol}/${p.port}->${p.nodePort}`);
    lb.nodes = nodes.map((n) => n.metadata.name);
    cb(null, { status: bytes(lbStatus(lb)) });
  };
  const update = (service, nodes, cb) => {
    const lb = cloud.loadBalancers.get(lbName(service));
    if (!lb) return fail(cb, grpc.status.UNKNOWN, 'load balancer does not exist');
    lb.nodes = nodes.map((n) => n.metadata.name);
    cb(null, {});
  };
  return {
    GetPluginInfo: (_call, cb) => cb(null, { name: PROVIDER, version: '0.1.0', protocolVersions: ['v1'] }),
    GetCapabilities: (_call, cb) => cb(null, { capabilities: ['INSTANCES', 'LOAD_BALANCER', 'LOAD_BALANCER_STREAM', 'ROUTES'], hasClusterId: true }),
    Probe: (_call, cb) => cb(null, { ready: true }),

    InstanceExists: (call, cb) => cb(null, { exists: cloud.find(json(call.request.node)) !== undefined }),
    InstanceShutdown: (call, cb) => {
      const inst = cloud.find(json(call.request.node));
      if (!inst) return fail(cb, grpc.status.NOT_FOUND, 'instance not found');
      cb(null, { shutdown: false });
    },
    InstanceMetadata: (call, cb) => {
      const node = json(call.request.node);
      const inst = cloud.find(node);
      if (!inst) return fail(cb, grpc.status.NOT_FOUND, `no instance for node ${node.metadata.name}`);
      cb(null, { metadata: metadata(inst) });
    },

    GetLoadBalancerName: (call, cb) => cb(null, { name: lbName(json(call.request.service)) }),
    GetLoadBalancer: (call, cb) => {
      const lb = cloud.loadBalancers.get(lbName(json(call.request.service)));
      cb(null, lb ? { exists: true, status: bytes(lbStatus(lb)) } : { exists: false });
    },
    EnsureLoadBalancer: (call, cb) => ensure(json(call.request.service), call.request.nodes.map(json), cb),
    UpdateLoadBalancer: (call, cb) => update(json(call.request.service), call.request.nodes.map(json), cb),
    EnsureLoadBalancerStream: (call, cb) => collect(call, cb, ensure),
    UpdateLoadBalancerStream: (call, cb) => collect(call, cb, update),
    EnsureLoadBalancerDeleted: (call, cb) => {
      cloud.loadBalancers.delete(lbName(json(call.request.service)));
      cb(null, {});
    },

    ListRoutes: (call, cb) => {
      const prefix = `${call.request.clusterName}-`;
      cb(null, { routes: [...cloud.routes.values()].filter((r) => r.name.startsWith(prefix)) });
    },
    CreateRoute: (call, cb) => {
      const r = call.request.route;
      const name = `${call.request.clusterName}-${call.request.nameHint}-${r.destinationCidr.replace(/[/.:]/g, '-')}`;
      if (cloud.routes.has(name)) return fail(cb, grpc.status.ALREADY_EXISTS, `route ${name} exists`);
      cloud.routes.set(name, { name, targetNode: r.targetNode, destinationCidr: r.destinationCidr, blackhole: false });
      cb(null, {});
    },
    DeleteRoute: (call, cb) => {
      cloud.routes.delete(call.request.route.name);
      cb(null, {});
    },

    InstancesStatus: (_call, cb) => fail(cb, grpc.status.UNIMPLEMENTED, 'no batch lookups'),
    NodeCIDRs: (_call, cb) => fail(cb, grpc.status.UNIMPLEMENTED, 'no node CIDRs'),
  };
}

function main() {
  const args = parseArgs(process.argv.slice(2));
  const def = protoLoader.loadSync(PROTO, { keepCase: false, longs: String, enums: String, defaults: true, oneofs: true });
  const pkg = grpc.loadPackageDefinition(def).outrigger.plugin.v1;
  const server = new grpc.Server();
  server.addService(pkg.CloudProvider.service, handlers(new Cloud(args.instances, args.maxLoadBalancers)));
  const socket = args.endpoint.slice('unix://'.length);
  try { fs.unlinkSync(socket); } catch (e) { if (e.code !== 'ENOENT') throw e; }
  server.bindAsync(args.endpoint, grpc.ServerCredentials.createInsecure(), (err) => {
    if (err) {
      console.error(`plugin.js: ${err.message}`);
      process.exit(1);
    }
    console.log(`memory plugin serving ${args.instances.length} instances on ${args.endpoint}`);
  });
  const stop = () => server.tryShutdown(() => process.exit(0));
  process.on('SIGTERM', stop);
  process.on('SIGINT', stop);
}

main();
