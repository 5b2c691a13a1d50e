// Outrigger console: renders what api/stream pushes. No framework; the DOM
// is built with textContent only, so nothing from the cluster is parsed as
// HTML. The server filters: a snapshot carries the first rows matching the
// page's filters (at most 200 of each table) and counts of the rest, so the
// page stays quick at tens of thousands of nodes; a filter change opens a
// new stream for the new view.
"use strict";
(function () {
  const LIMIT = 200; // rows of a pool's taken list
  const COLORS = ["#0550ae", "#a40e26", "#116329", "#7d4e00", "#6639ba", "#0a6e6e", "#8a4600", "#4a535e"];
  let snap = null, calls = null;
  const open = new Set(); // Services and Gateways whose details are open

  const $ = (sel) => document.querySelector(sel);
  function el(tag, attrs, ...kids) {
    const e = document.createElement(tag);
    for (const [k, v] of Object.entries(attrs || {})) {
      if (v === undefined || v === null || v === false) continue;
      if (k === "class") e.className = v; else if (k === "text") e.textContent = v; else e.setAttribute(k, v === true ? "" : v);
    }
    for (const k of kids) if (k !== null && k !== undefined) e.append(k);
    return e;
  }
  const svgEl = (tag, attrs) => {
    const e = document.createElementNS("http://www.w3.org/2000/svg", tag);
    for (const [k, v] of Object.entries(attrs || {})) e.setAttribute(k, v);
    return e;
  };
  const fmtTime = (t) => new Date(t).toLocaleTimeString();

  // Re-rendering replaces rows; the focused control is found again by key.
  function keepFocus(render) {
    const a = document.activeElement;
    const key = a && a.dataset ? a.dataset.key : null;
    render();
    if (key) {
      const again = document.querySelector(`[data-key="${CSS.escape(key)}"]`);
      if (again) again.focus();
    }
  }

  function renderWarnings() {
    const w = $("#warnings");
    w.replaceChildren(...(snap.warnings || []).map((t) => el("p", { text: t })));
    const d = $("#degraded");
    d.replaceChildren(...(snap.degraded || []).map((t) => el("span", { class: "badge bad", text: t })));
  }

  function lbDetails(lb, key) {
    const d = el("details", { "data-key": key + "#d" });
    d.open = open.has(key);
    d.addEventListener("toggle", () => { if (d.open) open.add(key); else open.delete(key); });
    d.append(el("summary", { "data-key": key, text: `${lb.namespace}/${lb.name}` }));
    const box = el("div", { class: "detail" });
    box.append(el("h3", { text: `Backends (${lb.backendsHealthy} of ${lb.backendsTotal} healthy${(lb.backends || []).length < lb.backendsTotal ? `, ${(lb.backends || []).length} listed, unhealthy first` : ""})` }));
    const ul = el("ul", { class: "backends" });
    for (const b of lb.backends || []) {
      ul.append(el("li", { class: b.healthy ? "ok" : "bad", "data-node": b.node },
        `${b.node}${b.target ? " → " + b.target : ""}: ${b.healthy ? "healthy" : "unhealthy, " + b.why}`));
    }
    if (!lb.backends || !lb.backends.length) ul.append(el("li", { class: "bad", text: "no backend nodes" }));
    box.append(ul);
    box.append(el("h3", { text: "Endpoints" }));
    const eps = el("ul");
    for (const e of lb.endpoints || []) eps.append(el("li", { class: e.ready ? "ok" : "bad", text: `${e.address}${e.node ? " on " + e.node : ""} ${e.ready ? "ready" : "not ready"}` }));
    if (!lb.endpoints || !lb.endpoints.length) eps.append(el("li", { text: "no EndpointSlice endpoints" }));
    box.append(eps);
    box.append(el("h3", { text: "Conditions" }));
    const cs = el("ul");
    for (const c of lb.conditions || []) cs.append(el("li", { text: `${c.type}=${c.status}${c.reason ? " (" + c.reason + ")" : ""}${c.message ? ": " + c.message : ""}` }));
    if (!lb.conditions || !lb.conditions.length) cs.append(el("li", { text: "none" }));
    box.append(cs);
    box.append(el("h3", { text: "Last Events" }));
    const ev = el("ul");
    for (const e of lb.events || []) ev.append(el("li", { class: e.type === "Warning" ? "bad" : null, text: `${fmtTime(e.time)} ${e.type} ${e.reason}: ${e.message}${e.count > 1 ? " (×" + e.count + ")" : ""}` }));
    if (!lb.events || !lb.events.length) ev.append(el("li", { text: "none" }));
    box.append(ev);
    d.append(box);
    return d;
  }

  function renderLBs() {
    const rows = snap.loadBalancers || [];
    const c = snap.loadBalancerCount || { total: 0, ready: 0, matching: 0 };
    $("#lbs-count").textContent = `(${c.total}, ${c.ready} ready)`;
    const body = $("#lb-table tbody");
    const trs = rows.map((lb) => {
      const key = `lb:${lb.namespace}/${lb.name}`;
      const why = el("td", { class: "why reason" });
      if (lb.reason) why.append(el("b", { text: lb.reason }), lb.message ? ": " + lb.message : "");
      return el("tr", { "data-lb": `${lb.namespace}/${lb.name}`, "data-state": lb.state },
        el("th", { scope: "row" }, lbDetails(lb, key)),
        el("td", { class: `state state-${lb.state}`, text: lb.state }),
        el("td", { class: "vip", text: (lb.vips || []).join(", ") || "—" }),
        el("td", { text: (lb.ports || []).map((p) => `${p.port}/${p.protocol}${p.nodePort ? "→" + p.nodePort : ""}`).join(", ") }),
        el("td", { class: "num backends-health " + (lb.backendsHealthy < lb.backendsTotal || lb.backendsTotal === 0 ? "bad" : "ok"), text: `${lb.backendsHealthy}/${lb.backendsTotal}` }),
        el("td", { text: lb.externalTrafficPolicy }),
        el("td", { text: lb.class || "—" }),
        el("td", { class: "provider", text: lb.provider || "—" }),
        why);
    });
    body.replaceChildren(...trs);
    $("#lbs-more").textContent = c.matching > rows.length ? `Showing ${rows.length} of ${c.matching} matching Services; filter to see others.` :
      (c.total ? (c.matching ? "" : "No Service matches.") : "No Services of type LoadBalancer.");
  }

  // condList lists conditions, those saying something is wrong marked.
  function condList(conds) {
    const ul = el("ul");
    for (const c of conds || []) {
      const bad = (c.type === "Conflicted" || c.type === "OverlappingTLSConfig") ? c.status === "True" : c.status === "False";
      ul.append(el("li", { class: bad ? "bad" : null, text: `${c.type}=${c.status}${c.reason ? " (" + c.reason + ")" : ""}${c.message ? ": " + c.message : ""}` }));
    }
    if (!conds || !conds.length) ul.append(el("li", { text: "none" }));
    return ul;
  }

  function gwDetails(g, key) {
    const d = el("details", { "data-key": key + "#d" });
    d.open = open.has(key);
    d.addEventListener("toggle", () => { if (d.open) open.add(key); else open.delete(key); });
    d.append(el("summary", { "data-key": key, text: `${g.namespace}/${g.name}` }));
    const box = el("div", { class: "detail" });
    box.append(el("h3", { text: "Listeners" }));
    const ls = el("ul", { class: "listeners" });
    for (const l of g.listeners || []) {
      ls.append(el("li", { class: l.problem ? "bad" : null, "data-listener": l.name },
        `${l.name}: ${l.protocol} ${l.port}${l.hostname ? " " + l.hostname : ""}, ${l.attachedRoutes} route${l.attachedRoutes === 1 ? "" : "s"} attached${l.problem ? ". " + l.problem : ""}`));
    }
    if (!g.listeners || !g.listeners.length) ls.append(el("li", { text: "none" }));
    box.append(ls);
    box.append(el("h3", { text: `Routes (${g.routesTotal}${g.routes.length < g.routesTotal ? `, ${g.routes.length} listed, not accepted first` : ""})` }));
    const rs = el("ul", { class: "routes" });
    for (const r of g.routes || []) {
      const where = [r.section ? "listener " + r.section : "", r.port ? "port " + r.port : ""].filter((x) => x).join(", ");
      const li = el("li", { class: r.state === "Accepted" ? "ok" : "bad", "data-route": `${r.kind}/${r.namespace}/${r.name}`, "data-state": r.state },
        `${r.kind} ${r.namespace}/${r.name}${(r.hostnames || []).length ? " (" + r.hostnames.join(", ") + ")" : ""}${where ? " on " + where : ""}: ${r.state}`);
      if (r.reason) li.append(" ", el("b", { text: r.reason }), r.message ? ": " + r.message : "");
      rs.append(li);
    }
    if (!g.routes || !g.routes.length) rs.append(el("li", { text: "no route names this Gateway" }));
    box.append(rs);
    if (g.loadBalancer) box.append(el("h3", { text: "Load balancer" }), el("p", { class: "gw-lb", text: `Service ${g.loadBalancer}` }));
    if (g.traffic) box.append(...trafficDetails(g.traffic));
    box.append(el("h3", { text: "Conditions" }), condList(g.conditions));
    box.append(el("h3", { text: "Last Events" }));
    const ev = el("ul");
    for (const e of g.events || []) ev.append(el("li", { class: e.type === "Warning" ? "bad" : null, text: `${fmtTime(e.time)} ${e.type} ${e.reason}: ${e.message}${e.count > 1 ? " (×" + e.count + ")" : ""}` }));
    if (!g.events || !g.events.length) ev.append(el("li", { text: "none" }));
    box.append(ev);
    d.append(box);
    return d;
  }

  // Traffic figures: counts as integers, rates to a tenth, latencies in
  // ms or s; "—" where there is none.
  const fmtCount = (n) => Math.round(n).toLocaleString();
  const fmtRate = (r) => (r === undefined || r === null ? "—" : r.toFixed(1));
  const fmtLatency = (s) => (s === undefined || s === null ? "—" : s < 1 ? `${+(s * 1000).toPrecision(3)} ms` : `${+s.toPrecision(3)} s`);
  const CLASSES = ["2xx", "3xx", "4xx", "5xx"];

  // trafficSummary is a Gateway's traffic in a few words, for its row.
  function trafficSummary(t) {
    if (!t) return el("td", { class: "traffic-summary", text: "—" });
    if (!t.podsRead) return el("td", { class: "traffic-summary bad", text: "not read" });
    let requests = 0, rate = 0, errors = 0;
    for (const l of t.listeners || []) {
      requests += l.requests;
      rate += l.rate || 0;
      errors += (l.codes || {})["5xx"] || 0;
    }
    const what = t.rateSeconds ? `${fmtRate(rate)} req/s` : `${fmtCount(requests)} requests`;
    const pods = `${t.podsRead}/${t.podsFound} pods`;
    return el("td", { class: "num traffic-summary " + (errors || t.podsRead < t.podsFound ? "bad" : ""), text: `${what}${errors ? ` (${fmtCount(errors)} 5xx so far)` : ""}, ${pods}` });
  }

  // trafficTable is one table of a Gateway's traffic: by port or by route.
  function trafficTable(caption, rows, head, name) {
    const rated = rows.some((r) => r.rate !== undefined && r.rate !== null);
    const cols = [head, ...(rated ? ["req/s"] : []), "requests", ...CLASSES, "upstream errors", "retries", "p50", "p99"];
    const table = el("table", { class: "traffic" }, el("caption", { text: caption }),
      el("thead", {}, el("tr", {}, ...cols.map((c) => el("th", { scope: "col", text: c })))));
    const body = el("tbody");
    for (const r of rows) {
      const codes = r.codes || {};
      // Only what went wrong is marked: 5xx answers and upstream errors.
      body.append(el("tr", { "data-traffic": r.name },
        el("th", { scope: "row", text: name(r) }),
        ...(rated ? [el("td", { class: "num", text: fmtRate(r.rate) })] : []),
        el("td", { class: "num", text: fmtCount(r.requests) }),
        ...CLASSES.map((c) => el("td", { class: "num" + (c === "5xx" && codes[c] ? " bad" : ""), text: fmtCount(codes[c] || 0) })),
        el("td", { class: "num" + (r.upstreamErrors ? " bad" : ""), text: fmtCount(r.upstreamErrors) }),
        el("td", { class: "num", text: fmtCount(r.retries) }),
        el("td", { class: "num", text: fmtLatency(r.p50) }),
        el("td", { class: "num", text: fmtLatency(r.p99) })));
    }
    table.append(body);
    return table;
  }

  // trafficDetails are what the data plane pods counted, summed, with the
  // pods not read and why.
  function trafficDetails(t) {
    const out = [el("h3", { text: "Data plane traffic" })];
    const where = t.namespace ? ` in ${t.namespace}` : "";
    if (t.reason) {
      out.push(el("p", { class: "traffic-why bad", text: `Not read${where}: ${t.reason}` }));
      return out;
    }
    const since = t.rateSeconds ? `; rates over the last ${Math.round(t.rateSeconds)} s` : "";
    out.push(el("p", { class: "traffic-pods " + (t.podsRead < t.podsFound ? "bad" : "") },
      `${t.podsRead} of ${t.podsFound} pod${t.podsFound === 1 ? "" : "s"} read${where} at ${fmtTime(t.readAt)}${since}; ` +
      `${fmtCount(t.connections)} connection${t.connections === 1 ? "" : "s"} open` +
      `${t.accessLogDropped ? `; ${fmtCount(t.accessLogDropped)} access log lines dropped` : ""}. Counts are since each pod started.`));
    if ((t.notRead || []).length) {
      const ul = el("ul", { class: "not-read" });
      for (const n of t.notRead) ul.append(el("li", { class: "bad", "data-pod": n.pod, text: `${n.pod} not read: ${n.reason}` }));
      if (t.notReadMore) ul.append(el("li", { class: "bad", text: `${t.notReadMore} more not read` }));
      out.push(ul);
    }
    if (!t.podsRead) return out;
    if (!(t.listeners || []).length) {
      out.push(el("p", { text: "No HTTP or gRPC request counted yet (TCP, TLS and UDP routes are not counted by route)." }));
      return out;
    }
    out.push(trafficTable("By port", t.listeners, "port", (r) => `${r.name}${(r.gatewayListeners || []).length ? " (" + r.gatewayListeners.join(", ") + ")" : ""}`));
    out.push(trafficTable("By route, busiest first", t.routes || [], "route", (r) => r.name || "no route matched"));
    return out;
  }

  function renderGateways() {
    const rows = snap.gateways || [];
    const c = snap.gatewayCount || { total: 0, ready: 0, matching: 0 };
    $("#gws-count").textContent = snap.noGatewayAPI ? "" : `(${c.total}, ${c.ready} programmed)`;
    const trs = rows.map((g) => {
      const key = `gw:${g.namespace}/${g.name}`;
      const why = el("td", { class: "why reason" });
      if (g.reason) why.append(el("b", { text: g.reason }), g.message ? ": " + g.message : "");
      const notOk = (g.routes || []).filter((r) => r.state !== "Accepted").length;
      const controller = el("td", { class: "controller" });
      if (g.outrigger) controller.append(el("span", { class: "ours", text: g.provider ? `Outrigger (${g.provider})` : "Outrigger" }), " ");
      controller.append(g.controller || "no such class");
      return el("tr", { "data-gw": `${g.namespace}/${g.name}`, "data-state": g.state, class: g.state === "Programmed" ? null : "failing" },
        el("th", { scope: "row" }, gwDetails(g, key)),
        el("td", { class: `state state-${g.state}`, text: g.state }),
        el("td", { class: "addresses", text: (g.addresses || []).join(", ") || "—" }),
        el("td", { class: "listeners-summary", text: (g.listeners || []).map((l) => `${l.name} ${l.protocol}/${l.port} (${l.attachedRoutes})`).join(", ") || "—" }),
        el("td", { class: "num routes-summary " + (notOk ? "bad" : ""), text: notOk ? `${g.routesTotal}, ${notOk} not accepted` : String(g.routesTotal) }),
        trafficSummary(g.traffic),
        el("td", { text: g.class }),
        controller,
        why);
    });
    $("#gw-table tbody").replaceChildren(...trs);
    $("#gw-table").hidden = !!snap.noGatewayAPI;
    $("#gws-more").textContent = snap.noGatewayAPI ? snap.noGatewayAPI :
      c.matching > rows.length ? `Showing ${rows.length} of ${c.matching} matching Gateways; filter to see others.` :
        (c.total ? (c.matching ? "" : "No Gateway matches.") : "No Gateways.");
  }

  function renderPools() {
    const list = $("#pool-list");
    const items = (snap.pools || []).map((p) => {
      const pct = p.size ? (100 * p.used / p.size) : 0;
      const box = el("div", { class: "pool", "data-pool": p.name });
      const id = `pool-${p.name.replace(/[^a-z0-9-]/gi, "_")}`;
      box.append(el("h3", { id, text: `${p.name}: ${p.cidr} (${p.kind === "vip" ? "load balancer VIPs" : "node pod CIDRs of " + p.unit})` }));
      const bar = el("div", { class: "bar", role: "meter", "aria-labelledby": id, "aria-valuemin": "0", "aria-valuemax": String(p.size), "aria-valuenow": String(p.used), "aria-valuetext": `${p.used} of ${p.size} used` });
      const fill = el("div"); fill.style.width = Math.max(pct, p.used ? 0.5 : 0) + "%";
      bar.append(fill);
      box.append(bar, el("p", { class: "usage", text: `${p.used} used, ${p.size - p.used} free of ${p.size} (${pct.toFixed(1)}%)` }));
      if (p.size <= 1024) {
        const cols = 64, rows = Math.ceil(p.size / cols), cell = 9;
        const svg = svgEl("svg", { class: "grid", viewBox: `0 0 ${cols * cell} ${rows * cell}`, role: "img", "aria-label": `Grid of ${p.size} slots, ${p.used} taken` });
        const taken = new Map((p.taken || []).map((t) => [t.index, t]));
        for (let i = 0; i < p.size; i++) {
          const t = taken.get(i);
          const r = svgEl("rect", { x: (i % cols) * cell, y: Math.floor(i / cols) * cell, width: cell - 1, height: cell - 1, class: t ? "taken" : "free" });
          if (t) { const title = svgEl("title"); title.textContent = `${t.value}: ${t.owner}`; r.append(title); }
          svg.append(r);
        }
        box.append(svg);
      }
      const det = el("details", {}, el("summary", { text: `Taken (${p.used})` }));
      const ul = el("ul");
      for (const t of (p.taken || []).slice(0, LIMIT)) ul.append(el("li", { text: `${t.value}: ${t.owner}` }));
      det.append(ul);
      box.append(det);
      return box;
    });
    if (!items.length) items.push(el("p", { text: "No address ranges configured." }));
    list.replaceChildren(...items);
  }

  function renderNodes() {
    const rows = snap.nodes || [];
    const c = snap.nodeCount || { total: 0, ready: 0, matching: 0 };
    $("#nodes-count").textContent = `(${c.total}, ${c.ready} ready)`;
    const nodeActions = (snap.actions || []).filter((a) => a.target === "node");
    document.querySelectorAll(".act-col").forEach((th) => { th.hidden = !nodeActions.length; });
    const trs = rows.map((n) => {
      const acts = el("td", { class: "act-col" });
      acts.hidden = !nodeActions.length;
      for (const a of nodeActions) {
        acts.append(el("button", { type: "button", "data-key": `act:${a.name}:${n.name}`, "aria-label": `${a.label} ${n.name}`, text: a.name }));
        acts.lastChild.addEventListener("click", () => act(a.name, n.name));
      }
      return el("tr", { "data-node": n.name },
        el("th", { scope: "row", text: n.name }),
        el("td", { class: `state state-${n.state}`, text: n.state }),
        el("td", { text: n.initialized ? "yes" : "no" }),
        el("td", { text: n.providerID || "—" }),
        el("td", { class: "provider", text: n.provider || "not served here" }),
        el("td", { text: n.zone || "—" }),
        el("td", { text: n.instanceType || "—" }),
        el("td", { text: (n.addresses || []).join(", ") }),
        el("td", { text: (n.podCIDRs || []).join(", ") || "—" }),
        acts);
    });
    $("#node-table tbody").replaceChildren(...trs);
    $("#nodes-more").textContent = c.matching > rows.length ? `Showing ${rows.length} of ${c.matching} matching nodes; filter to see others.` : "";
  }

  function renderActions() {
    const box = $("#cloud-actions");
    const acts = (snap.actions || []).filter((a) => !a.target);
    box.hidden = !acts.length;
    box.replaceChildren(...acts.map((a) => {
      const b = el("button", { type: "button", "data-key": `act:${a.name}`, text: a.label });
      b.addEventListener("click", () => act(a.name, ""));
      return b;
    }));
  }

  async function act(name, target) {
    const status = $("#status");
    try {
      const r = await fetch("api/actions", { method: "POST", headers: { "Content-Type": "application/json", "X-Outrigger-Console": "1" }, body: JSON.stringify({ name, target }) });
      const text = await r.text();
      status.textContent = r.ok ? JSON.parse(text).result : `Action ${name} failed: ${text}`;
      // Keep the result readable until the next action or reconnect.
      status.dataset.action = "1";
    } catch (e) {
      status.textContent = `Action ${name} failed: ${e}`;
    }
  }

  // renderTenants shows tenant mode's tenants, and only in tenant mode;
  // a console reading no cluster of its own hides the cluster's sections.
  function renderTenants() {
    document.querySelectorAll("[data-tenants]").forEach((e) => { e.hidden = !snap.tenantMode; });
    document.querySelectorAll("[data-cluster]").forEach((e) => { e.hidden = !!snap.noCluster; });
    if (!snap.tenantMode) return;
    const rows = snap.tenants || [];
    const c = snap.tenantCount || { total: 0, ready: 0 };
    $("#tenants-count").textContent = `(${c.total}, ${c.ready} served)`;
    const trs = rows.map((t) => {
      const why = el("td", { class: "why reason" });
      if (t.reason) why.append(el("b", { text: t.reason }), t.message ? ": " + t.message : "", t.failedAt ? ` (${fmtTime(t.failedAt)})` : "");
      const holder = t.holder ? (t.heldHere ? `${t.holder} (this replica)` : t.holder) : "none";
      return el("tr", { "data-tenant": t.name, "data-state": t.state, class: t.state === "Failing" ? "failing" : null },
        el("th", { scope: "row", text: t.name }),
        el("td", { class: `state state-${t.state}`, text: t.state }),
        el("td", { class: "cluster", text: t.cluster || "—" }),
        el("td", { class: "holder", text: holder }),
        el("td", { text: t.source || "— (its Secret or file is gone)" }),
        why);
    });
    $("#tenant-table tbody").replaceChildren(...trs);
    $("#tenants-more").textContent = c.total ? "" : "No tenants: no Secret matches the selector and no file is in the directory.";
  }

  function renderTimeline() {
    const q = $("#tl-filter").value.trim().toLowerCase();
    const onlyWarn = $("#tl-warn").checked;
    const items = (snap.timeline || []).filter((e) => (!onlyWarn || e.type === "Warning") && (!q || (e.object || "").toLowerCase().includes(q)));
    $("#tl-list").replaceChildren(...items.map((e) => el("li", { class: e.type, "data-kind": e.kind },
      el("time", { datetime: e.time, text: fmtTime(e.time) }),
      el("span", { class: "obj", text: e.object || "" }),
      el("span", { class: "reason", text: e.reason }),
      e.message,
      e.count > 1 ? ` (×${e.count})` : "",
      e.source ? el("span", { class: "more", text: ` — ${e.source}` }) : "")));
    if (!items.length) $("#tl-list").append(el("li", { text: "Nothing yet." }));
  }

  // chart draws series (arrays aligned with calls.times; null is a gap)
  // as polylines on a shared y scale from 0.
  function chart(id, series, unit) {
    const fig = document.getElementById(id);
    const svg = fig.querySelector("svg");
    const W = 600, H = 180, PAD = 4;
    const n = calls.times.length;
    let maxY = 0;
    for (const s of series) for (const v of s.values) if (v !== null && v > maxY) maxY = v;
    const top = maxY > 0 ? maxY * 1.1 : 1;
    const kids = [];
    for (const [i, s] of series.entries()) {
      let pts = [];
      const flush = () => { if (pts.length) kids.push(svgEl("polyline", { points: pts.join(" "), stroke: COLORS[i % COLORS.length], "data-series": s.name })); pts = []; };
      s.values.forEach((v, j) => {
        if (v === null) { flush(); return; }
        const x = n > 1 ? (j / (n - 1)) * W : 0;
        const y = H - PAD - (v / top) * (H - 2 * PAD);
        pts.push(`${x.toFixed(1)},${y.toFixed(1)}`);
      });
      flush();
    }
    const label = svgEl("text", { x: 4, y: 12, class: "axis" });
    label.textContent = `max ${top.toFixed(top < 10 ? 2 : 0)} ${unit}`;
    kids.push(label);
    svg.replaceChildren(...kids);
    const latest = series.map((s) => [s.name, s.values.length ? s.values[s.values.length - 1] : null]);
    const total = latest.reduce((a, [, v]) => a + (v || 0), 0);
    const nonzero = series.reduce((a, s) => a + s.values.filter((v) => v).length, 0);
    fig.dataset.latestTotal = String(total);
    fig.dataset.nonzero = String(nonzero);
    const now = latest.filter(([, v]) => v !== null).map(([k, v]) => `${k} ${v.toFixed(v < 10 ? 2 : 0)}`).join(", ");
    svg.setAttribute("aria-label", `${fig.querySelector("figcaption").textContent}. Latest: ${now || "no data"}`);
    fig.querySelector(".now").textContent = now ? `Now: ${now} ${unit}` : (series.length ? "None in the last interval." : "No data yet.");
    fig.querySelector(".legend").replaceChildren(...series.map((s, i) => {
      const sw = el("span", { "aria-hidden": "true" }); sw.style.background = COLORS[i % COLORS.length];
      return el("li", {}, sw, s.name);
    }));
  }

  function renderCalls() {
    const err = $("#calls-error");
    err.hidden = !calls.error;
    err.textContent = calls.error ? `Metrics: ${calls.error}` : "";
    const m = calls.methods || [];
    chart("chart-rate", m.map((s) => ({ name: s.method, values: s.rate })), "calls/s");
    chart("chart-latency", m.map((s) => ({ name: s.method, values: s.latencyMs })), "ms");
    const errs = [];
    for (const s of m) {
      if (s.errors.some((v) => v)) errs.push({ name: `${s.method} errors`, values: s.errors });
      if (s.throttled.some((v) => v)) errs.push({ name: `${s.method} 429`, values: s.throttled });
    }
    chart("chart-errors", errs, "/s");
    chart("chart-limits", (calls.families || []).map((f) => ({ name: f.family, values: f.limit })), "calls/s");
  }

  function renderAll() {
    // One section failing on data it did not expect must not freeze the
    // others.
    keepFocus(() => {
      for (const render of [renderWarnings, renderTenants, renderLBs, renderGateways, renderPools, renderNodes, renderActions, renderTimeline]) {
        try { render(); } catch (e) { console.error(`${render.name}:`, e); }
      }
    });
    document.body.dataset.generated = snap.generated;
  }

  for (const id of ["#tl-filter", "#tl-warn"]) $(id).addEventListener("input", () => snap && renderTimeline());

  // view is the query of the page's filters; the server answers with the
  // rows they match.
  function view() {
    const q = new URLSearchParams();
    const svc = $("#lb-filter").value.trim();
    const node = $("#node-filter").value.trim();
    const gw = $("#gw-filter").value.trim();
    if (svc) q.set("services", svc);
    if ($("#lb-pending").checked) q.set("notReady", "1");
    if (node) q.set("nodes", node);
    if (gw) q.set("gateways", gw);
    return q.toString();
  }

  let es = null, shown = null, typing = null;
  function connect() {
    const q = view();
    if (es && q === shown) return;
    if (es) es.close();
    shown = q;
    es = new EventSource("api/stream" + (q ? "?" + q : ""));
    const status = $("#status");
    es.addEventListener("snapshot", (e) => {
      const t0 = performance.now();
      snap = JSON.parse(e.data);
      renderAll();
      document.body.dataset.view = q;
      document.body.dataset.renderMs = String(Math.round(performance.now() - t0));
      // When the page first showed everything, on its own clock (the
      // scale test reads it).
      if (!document.body.dataset.firstShownMs) document.body.dataset.firstShownMs = String(Math.round(performance.now()));
      // The status line is a live region: it changes only when its
      // meaning does, not at every update, so screen readers are not
      // interrupted every second; the time goes beside it.
      const tenants = snap.tenantMode ? `${(snap.tenantCount || {}).total || 0} tenants` : "";
      const line = snap.noCluster ? `Live: ${tenants}` :
        `Live: ${tenants ? tenants + ", " : ""}${(snap.loadBalancerCount || {}).total || 0} load balancers, ${(snap.nodeCount || {}).total || 0} nodes`;
      if (status.textContent !== line && !status.dataset.action) status.textContent = line;
      status.className = "live";
      $("#updated").textContent = `updated ${fmtTime(snap.generated)}`;
    });
    es.addEventListener("calls", (e) => { calls = JSON.parse(e.data); renderCalls(); });
    es.onerror = () => { delete status.dataset.action; status.textContent = "Disconnected; reconnecting…"; status.className = ""; };
  }
  // A burst of keystrokes asks for one view, the last.
  const refilter = () => { clearTimeout(typing); typing = setTimeout(connect, 120); };
  for (const id of ["#lb-filter", "#lb-pending", "#node-filter", "#gw-filter"]) $(id).addEventListener("input", refilter);
  connect();
})();
