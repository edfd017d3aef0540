// shardgate's dashboard: reads /dashboard.json every 5 seconds and /explain
// for the id lookup. Everything it shows is written as text (textContent),
// never as markup, so names and ids from the table or a user stay text.
"use strict";

const $ = (id) => document.getElementById(id);
const SHOWN = 200; // rows of a long list shown at once; the filter finds the rest
const ERRORS_SHOWN = 5; // a rejected reload's problems shown in its row
let last = null;

/** An element with `props` and `children` (strings become text nodes). */
function el(tag, props, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(props || {})) {
    if (k === "class") e.className = v;
    else e.setAttribute(k, v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

function badge(text, kind) {
  return el("span", { class: "badge " + (kind || text) }, text);
}

/** A table of `rows` (arrays of cells) under `head`, replacing `target`'s content. */
function table(target, head, rows, total) {
  const t = el("table", {}, el("thead", {}, el("tr", {}, head.map((h) => el("th", {}, h)))));
  const body = el("tbody");
  for (const r of rows.slice(0, SHOWN)) body.append(el("tr", {}, r.map((c) => el("td", {}, c))));
  t.append(body);
  const parts = [t];
  const n = total === undefined ? rows.length : total;
  if (rows.length > SHOWN) parts.push(el("p", { class: "more" }, `showing ${SHOWN} of ${rows.length} matching (${n} in all); filter to find the others`));
  if (rows.length === 0) parts.push(el("p", { class: "more" }, n === 0 ? "none" : "nothing matches"));
  target.replaceChildren(...parts);
}

function fmt(n, digits) {
  return n === null || n === undefined ? "–" : Number(n).toFixed(digits);
}

/**
 * A sparkline of `values` (numbers, oldest first) over a window of `slots`
 * samples, as an SVG polyline: the newest at the right edge, so the first
 * minute fills a tenth of a ten-minute line, not all of it.
 */
function spark(values, slots) {
  const ns = "http://www.w3.org/2000/svg";
  const svg = document.createElementNS(ns, "svg");
  svg.setAttribute("class", "spark");
  svg.setAttribute("viewBox", "0 0 100 20");
  svg.setAttribute("preserveAspectRatio", "none");
  if (values.length > 1) {
    const max = Math.max(...values, 1e-9);
    const width = Math.max(slots, values.length) - 1;
    const first = width + 1 - values.length;
    const pts = values.map((v, i) => `${((first + i) * 100) / width},${20 - (v / max) * 18 - 1}`);
    const line = document.createElementNS(ns, "polyline");
    line.setAttribute("points", pts.join(" "));
    svg.append(line);
  }
  return svg;
}

/** Mean of the last `n` points' `key` for `name` in `group` (regions or outcomes). */
function recent(points, group, name, key, n) {
  const vals = points.slice(-n).map((p) => (p[group][name] || {})[key]).filter((v) => v !== null && v !== undefined);
  return vals.length ? vals.reduce((a, b) => a + b, 0) / vals.length : null;
}

function renderRegions(d) {
  const view = d.view || {};
  const regions = view.regions || {};
  const points = d.traffic.points;
  const owned = {};
  for (const c of Object.values(view.countries || {})) owned[c.region] = (owned[c.region] || 0) + 1;
  const rows = Object.entries(regions).map(([name, r]) => {
    const checks = d.health.filter((h) => h.region === name);
    const endpoints = checks.length
      ? checks.map((h) => el("span", { class: "endpoint mono" }, badge(h.ejected ? "ejected" : h.up ? "up" : "down"), h.endpoint))
      : (r.upstreams || []).map((u) => el("span", { class: "endpoint mono" }, badge("unknown"), u));
    return [
      el("span", {}, name, " ", name === d.local_region ? badge("local", "local") : null),
      el("div", {}, endpoints),
      r.peer ? el("span", { class: "mono" }, r.peer) : "–",
      r.failover || "–",
      String(owned[name] || 0),
      fmt(recent(points, "regions", name, "rps", 12), 1),
    ];
  });
  table($("regions"), ["region", "endpoints and health", "peer", "failover", "countries", "req/s (1 min)"], rows);
}

function renderTraffic(d) {
  const points = d.traffic.points;
  if (points.length === 0) {
    $("traffic").replaceChildren(el("p", { class: "muted" }, `rates appear after two samples (every ${d.traffic.interval_s} s)`));
    return;
  }
  // Ten minutes of samples: the window every sparkline spans.
  const slots = Math.round(600 / d.traffic.interval_s);
  const section = (group, label) => {
    const names = [...new Set(points.flatMap((p) => Object.keys(p[group])))].sort();
    const rows = names.map((name) => [
      name || "(none)",
      spark(points.map((p) => (p[group][name] || {}).rps || 0), slots),
      fmt(recent(points, group, name, "rps", 12), 2),
      fmt(recent(points, group, name, "eps", 12), 2),
      fmt(recent(points, group, name, "mean_ms", 12), 1),
    ]);
    const div = el("div");
    table(div, [label, "requests, 10 min", "req/s", "5xx/s", "mean ms"], rows);
    return div;
  };
  $("traffic").replaceChildren(section("regions", "region"), section("outcomes", "outcome"));
}

// One fence a reload gave up, as `plan` words it.
function unfencedText(u) {
  const at = `at epoch ${u.epoch} (${u.phase})`;
  if (u.within) {
    return `${u.unit}, split out of ${u.within} ${at}: ` + (u.next === null ? "it has no move" : `its move is at epoch ${u.next}`);
  }
  return `${u.unit} ${at}: ` + (u.next === null ? "its move is removed" : `set back to epoch ${u.next}`);
}

function renderReloads(d) {
  if (!d.table.path) {
    $("reloads").replaceChildren(el("p", { class: "muted" }, "the table did not come from a file; nothing reloads"));
    return;
  }
  // The same rejection again and again (a watched file left broken) is one
  // row with its count, newest first.
  const runs = [];
  for (const r of d.reloads) {
    const prev = runs[runs.length - 1];
    const same = prev && r.result === "rejected" && prev.r.result === "rejected" &&
      JSON.stringify(prev.r.errors) === JSON.stringify(r.errors);
    if (same) {
      prev.n += 1;
      prev.first = r.at;
    } else {
      runs.push({ r, n: 1, first: r.at });
    }
  }
  const rows = runs.map(({ r, n, first }) => [
    el("span", { class: "mono when" }, r.at || "–", n > 1 ? el("div", { class: "muted" }, `first ${first || "–"}`) : null),
    el("span", {}, badge(r.result), n > 1 ? el("span", { class: "count" }, `×${n}`) : null),
    r.result === "success"
      ? el("span", {}, `version ${r.version}, sha256 ${String(r.sha256).slice(0, 12)}…`,
          r.needs_restart.length ? ` (restart needed for ${r.needs_restart.join(", ")})` : "",
          r.unfenced.length ? el("div", { class: "unfenced" }, "fences given up (a stale instance's writes are no longer refused): " +
            r.unfenced.map(unfencedText).join("; ")) : null)
      : el("ul", { class: "errors" }, r.errors.slice(0, ERRORS_SHOWN).map((e) => el("li", {},
          e.path !== undefined && e.line > 0 ? el("span", { class: "mono" }, `${e.path || "(file)"} line ${e.line}:${e.column} `) : null,
          e.message, e.hint ? el("span", { class: "muted" }, ` (${e.hint})`) : null)),
          r.errors.length > ERRORS_SHOWN ? el("li", { class: "muted" }, `and ${r.errors.length - ERRORS_SHOWN} more (POST /reload lists them all)`) : null),
  ]);
  table($("reloads"), ["when", "result", "what"], rows);
}

function renderRoutes(d) {
  const rows = (d.view.routes || []).map((r) => [
    r.name, el("code", {}, r.template), r.methods ? r.methods.join(", ") : "any", r.placement, r.formats ? r.formats.join(", ") : "–",
  ]);
  table($("routes"), ["route", "path", "methods", "placement", "id formats"], rows);
}

function matches(filter, ...values) {
  return !filter || values.some((v) => String(v).toLowerCase().includes(filter));
}

function renderCountries() {
  if (!last) return;
  const all = Object.entries(last.view.countries || {});
  const f = $("countries-filter").value.trim().toLowerCase();
  const rows = all.filter(([name, c]) => matches(f, name, c.id, c.region)).map(([name, c]) => [name, String(c.id), c.region]);
  $("countries-count").textContent = `${all.length} in the table`;
  table($("countries"), ["country", "id", "region"], rows, all.length);
}

function renderOverrides() {
  if (!last) return;
  const all = last.view.overrides || [];
  const f = $("overrides-filter").value.trim().toLowerCase();
  const rows = all.filter((o) => matches(f, o.country, o.entity, o.region)).map((o) => [o.country, o.entity, o.region]);
  $("overrides-count").textContent = `${all.length} in the table`;
  table($("overrides"), ["country", "entity", "region"], rows, all.length);
}

function renderEntitiesAndShards(d) {
  const entities = Object.entries(d.view.entities || {}).map(([name, code]) => [name, String(code)]);
  table($("entities"), ["entity", "code"], entities);
  const shards = d.view.shards;
  if (!shards) {
    $("shards").replaceChildren(el("p", { class: "muted" }, "no shard ranges"));
    return;
  }
  const div = el("div");
  table(div, ["shards (of " + shards.count + ")", "region"], Object.entries(shards.regions || {}).map(([region, range]) => [String(range), region]));
  $("shards").replaceChildren(div);
}

function renderTraces(d) {
  const t = d.traces;
  $("traces").replaceChildren(t
    ? el("p", {}, badge("on", "up"), `to `, el("code", {}, t.endpoint), ` as ${t.service_name}, ratio ${t.sample_ratio}: `,
        `${t.exported} spans exported, ${t.dropped} dropped (queue full), ${t.failed} failed`)
    : el("p", { class: "muted" }, "off (set telemetry.otlp_endpoint or OTEL_EXPORTER_OTLP_ENDPOINT)"));
}

/** The fleet: each instance's revision, and who is behind or rejected one. */
function renderFleet(f) {
  const rows = (f.instances || []).map((i) => [
    el("span", { class: "mono" }, i.instance || "–"),
    el("span", {}, i.region || "–"),
    el("span", { class: "mono" }, i.revision !== undefined ? `revision ${i.revision}` : `version ${i.version}`),
    el("span", { class: "mono when" }, i.applied_at || "–"),
    i.rejected
      ? el("span", {}, badge("rejected"), ` revision ${i.rejected.revision}: `,
          el("ul", { class: "errors" }, i.rejected.errors.slice(0, ERRORS_SHOWN).map((e) => el("li", { class: "mono" }, e))))
      : i.behind ? badge("behind") : badge(i.behind === null ? "unknown" : "current"),
    el("span", {}, (i.moves || []).map((m) => el("div", { class: "mono" }, `${m.unit} → ${m.to} `, badge(m.phase), ` epoch ${m.epoch}`))),
  ]);
  table($("fleet"), ["instance", "region", "runs", "applied", "state", "moves"], rows);
  const note = f.reachable === false ? f.error : f.note;
  if (note) $("fleet").append(el("p", { class: "muted" }, note));
}

async function refreshFleet() {
  try {
    const r = await fetch("/fleet", { cache: "no-store" });
    if (r.ok) renderFleet(await r.json());
  } catch (e) {
    $("fleet").replaceChildren(el("p", { class: "muted" }, `cannot read /fleet: ${e.message}`));
  }
}

function render(d) {
  last = d;
  const role = d.local_region ? `region ${d.local_region}` : "front door";
  $("instance").textContent = d.instance;
  $("role").textContent = role;
  document.title = `${d.instance} · ${role}`;
  const status = $("status");
  status.className = d.draining ? "bad" : "";
  status.textContent = `table version ${d.table.version} loaded ${d.table.loaded_at || "?"}${d.draining ? " · draining" : ""}`;
  renderRegions(d);
  renderTraffic(d);
  renderReloads(d);
  renderRoutes(d);
  renderCountries();
  renderOverrides();
  renderEntitiesAndShards(d);
  renderTraces(d);
}

async function refresh() {
  try {
    const r = await fetch("/dashboard.json", { cache: "no-store" });
    if (!r.ok) throw new Error(`/dashboard.json answered ${r.status}`);
    render(await r.json());
    refreshFleet();
  } catch (e) {
    $("status").className = "bad";
    $("status").textContent = `cannot read the proxy's state: ${e.message}`;
  }
}

/** The country of an iUID's fields, by the table's names. */
function countryOf(fields) {
  if (!last || fields.country === undefined) return null;
  const hit = Object.entries(last.view.countries || {}).find(([, c]) => c.id === fields.country);
  return hit ? `${hit[0]} (region ${hit[1].region})` : "not in the table";
}

/** The service entity of an iUID's fields, by the table's names. */
function entityOf(fields) {
  if (!last || fields.service_entity === undefined) return null;
  const hit = Object.entries(last.view.entities || {}).find(([, code]) => code === fields.service_entity);
  return hit ? `${hit[0]} (${fields.service_entity})` : `${fields.service_entity} (not in the table)`;
}

/** What a decoded id says at a glance: when it was made, and for an iUID its country and entity. */
function summary(v) {
  const f = v.fields || {};
  const parts = [];
  if (f.timestamp_iso) parts.push(el("span", {}, "made ", el("b", { class: "time mono" }, f.timestamp_iso)));
  const country = v.format === "iuid" ? countryOf(f) : null;
  if (country) parts.push(el("span", {}, "country ", el("b", { class: "country" }, country)));
  const entity = v.format === "iuid" ? entityOf(f) : null;
  if (entity) parts.push(el("span", {}, "entity ", el("b", { class: "entity" }, entity)));
  const joined = [];
  parts.forEach((p, i) => joined.push(i ? " · " : "", p));
  return el("p", { class: "summary" }, joined);
}

function proxyLink(path) {
  if (!last || typeof path !== "string" || !path.startsWith("/")) return null;
  const scheme = last.proxy.tls ? "https" : "http";
  const url = `${scheme}://${location.hostname}:${last.proxy.port}${path}`;
  return el("a", { href: url, rel: "noreferrer", target: "_blank" }, path);
}

function renderLookup(x) {
  const out = [el("p", {}, "input: ", el("code", { class: "lookup-input" }, x.input))];
  if (x.valid_as.length === 0) {
    out.push(el("p", { class: "error" }, "not a valid id in any format:"));
    out.push(el("ul", { class: "errors rejected" }, (x.rejected || []).map((r) =>
      el("li", {}, el("b", {}, r.format), `: ${r.detail} `, el("span", { class: "muted mono" }, `(${r.reason})`)))));
  }
  for (const v of x.valid_as) {
    const rows = Object.entries(v.fields || {}).map(([k, val]) => [k, el("span", { class: "mono" }, typeof val === "object" ? JSON.stringify(val) : String(val))]);
    const box = el("div", { class: "format", "data-format": v.format });
    box.append(el("strong", {}, v.format), " ", el("code", {}, v.canonical), summary(v));
    const t = el("div");
    table(t, ["field", "value"], rows);
    box.append(el("details", {}, el("summary", {}, "every field"), t));
    out.push(box);
  }
  const routes = el("div", { id: "lookup-routes" });
  table(routes, ["route", "decoded as", "region", "why", "fetch"], x.routes.map((r) => [
    r.route,
    r.decoded_as || "–",
    r.region ? el("span", { class: "route-region" }, r.region) : (r.error ? el("span", { class: "error" }, r.error) : "–"),
    r.rule || (r.search ? `search ${r.search.regions.join(", ")}${r.search.found ? "" : " (not found yet)"}` : "–"),
    r.link ? proxyLink(r.link) : el("span", { class: "muted" }, r.id_in || "–"),
  ]));
  out.push(el("h3", {}, "Where each route sends it"), routes);
  $("lookup-result").replaceChildren(...out);
}

async function lookup(event) {
  if (event) event.preventDefault();
  const id = $("lookup-id").value.trim();
  if (!id) return;
  // The lookup is a link: #id=… opens it again, or in a colleague's browser.
  history.replaceState(null, "", "#id=" + encodeURIComponent(id));
  try {
    const r = await fetch(`/explain?id=${encodeURIComponent(id)}`, { cache: "no-store" });
    const body = await r.json();
    if (!r.ok) {
      $("lookup-result").replaceChildren(el("p", { class: "error" }, body.detail || body.title || `answered ${r.status}`));
      return;
    }
    renderLookup(body);
  } catch (e) {
    $("lookup-result").replaceChildren(el("p", { class: "error" }, `lookup failed: ${e.message}`));
  }
}

$("lookup").addEventListener("submit", lookup);
$("countries-filter").addEventListener("input", renderCountries);
$("overrides-filter").addEventListener("input", renderOverrides);
refresh().then(() => {
  if (location.hash.startsWith("#id=")) {
    let id = location.hash.slice(4);
    try {
      id = decodeURIComponent(id);
    } catch (e) {
      // Not percent-encoding after all: looked up as written.
    }
    $("lookup-id").value = id;
    lookup(null);
  }
});
setInterval(refresh, 5000);
