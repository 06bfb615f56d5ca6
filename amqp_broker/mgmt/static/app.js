// amqp-broker management UI: a small single-page front end over the management API (/api).
// No build step and no library: pages are rendered from API replies with template strings,
// charts are hand-drawn SVG. Every read and action goes through /api with the logged-in user's
// credentials (HTTP basic), so the API's permission checks (tags, vhost access) are the UI's:
// the UI only hides what a user's tags can never do, and shows the API's refusal otherwise.
"use strict";

const UI = {
  auth: sessionStorage.getItem("auth"),
  user: sessionStorage.getItem("user"),
  tags: JSON.parse(sessionStorage.getItem("tags") || "[]"),
  refreshMs: Number(sessionStorage.getItem("refreshMs") || 5000),
  live: null,       // the current page's refresh function
  timer: null,
  paging: {},       // per listing: {page, size, name, regex}
};

// ---------------------------------------------------------------- helpers

const $ = (sel, root = document) => root.querySelector(sel);
const enc = encodeURIComponent;

function esc(value) {
  return String(value ?? "").replace(/[&<>"']/g,
    (c) => ({ "&": "&amp;", "<": "&lt;", ">": "&gt;", '"': "&quot;", "'": "&#39;" }[c]));
}

function num(n) {
  return n === undefined || n === null ? "" : Number(n).toLocaleString("en-US");
}

function rate(details) {
  return details && typeof details.rate === "number" ? details.rate.toFixed(1) + "/s" : "";
}

function stat(obj, key) {
  const ms = obj && obj.message_stats;
  return ms ? rate(ms[key + "_details"]) : "";
}

function bytes(n) {
  if (n === undefined || n === null) return "?";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (n >= 1024 && i < units.length - 1) { n /= 1024; i++; }
  return (i ? n.toFixed(1) : n) + " " + units[i];
}

function uptime(ms) {
  if (!ms && ms !== 0) return "?";
  let s = Math.floor(ms / 1000);
  const d = Math.floor(s / 86400); s -= d * 86400;
  const h = Math.floor(s / 3600); s -= h * 3600;
  const m = Math.floor(s / 60); s -= m * 60;
  return (d ? d + "d " : "") + (d || h ? h + "h " : "") + m + "m " + s + "s";
}

function isAdmin() { return UI.tags.includes("administrator"); }

class ApiError extends Error {
  constructor(status, reason) { super(reason); this.status = status; }
}

async function api(method, path, body, extraHeaders) {
  // X-Requested-With: a failed login comes back without a Basic challenge, which would make
  // the browser show its own password dialog instead of letting this page say what failed
  const headers = { authorization: UI.auth || "", "x-requested-with": "XMLHttpRequest", ...(extraHeaders || {}) };
  const init = { method, headers };
  if (body !== undefined) {
    headers["content-type"] = "application/json";
    init.body = JSON.stringify(body);
  }
  const r = await fetch("/api" + path, init);
  const text = await r.text();
  let data = null;
  try { data = text ? JSON.parse(text) : null; } catch (e) { data = text; }
  if (!r.ok) {
    const reason = data && data.reason ? data.reason : r.status === 401 ? "Login failed" : r.statusText;
    throw new ApiError(r.status, reason);
  }
  return data;
}

function flash(message, ok = true) {
  const el = document.createElement("div");
  el.className = ok ? "ok" : "err";
  el.textContent = message;
  const box = $("#flash");
  box.replaceChildren(el);
  setTimeout(() => { if (el.parentNode === box) el.remove(); }, 8000);
}

// Run an action; show its outcome (the API's refusal reason on error) and refresh the page.
async function act(fn, okText) {
  try {
    const out = await fn();
    if (okText) flash(typeof okText === "function" ? okText(out) : okText, true);
    if (UI.live) await UI.live();
    return out;
  } catch (e) {
    flash(`Refused: ${e.message}`, false);
    return undefined;
  }
}

function table(id, headers, rows) {
  return `<table id="${id}"><thead><tr>${headers.map((h) => `<th>${esc(h)}</th>`).join("")}</tr></thead>`
    + `<tbody>${rows.join("") || `<tr><td colspan="${headers.length}" class="muted">none</td></tr>`}</tbody></table>`;
}

function kv(obj) {
  return `<table class="kv">${Object.entries(obj).map(([k, v]) =>
    `<tr><th>${esc(k)}</th><td>${typeof v === "object" && v !== null ? `<code>${esc(JSON.stringify(v))}</code>` : esc(v)}</td></tr>`).join("")}</table>`;
}

function formData(form) {
  return Object.fromEntries(new FormData(form).entries());
}

async function vhostOptions(selected) {
  let vhosts = [];
  try { vhosts = await api("GET", "/vhosts"); } catch (e) { vhosts = [{ name: "/" }]; }
  return vhosts.map((v) => `<option ${v.name === (selected || "/") ? "selected" : ""}>${esc(v.name)}</option>`).join("");
}

// ---------------------------------------------------------------- charts (SVG)

const COLORS = ["#e07b00", "#2a7ab0", "#3c9a4a", "#a23bb0", "#b3261e", "#7a6a00"];

// series: [{name, points: [[timestamp ms, value], ...]}]; returns an SVG line chart.
function lineChart(id, series, unit) {
  const w = 620, h = 170, left = 52, bottom = 22, top = 8;
  const all = series.flatMap((s) => s.points);
  const now = Date.now();
  const tmin = all.length ? Math.min(...all.map((p) => p[0])) : now - 60000;
  const tmax = all.length ? Math.max(...all.map((p) => p[0])) : now;
  const vmaxRaw = Math.max(1, ...all.map((p) => p[1]));
  const vmax = niceCeil(vmaxRaw);
  const x = (t) => left + (tmax > tmin ? (t - tmin) / (tmax - tmin) : 1) * (w - left - 8);
  const y = (v) => top + (1 - v / vmax) * (h - top - bottom);
  let svg = `<svg id="${id}" class="chart" width="${w}" height="${h}" viewBox="0 0 ${w} ${h}" role="img">`;
  for (const frac of [0, 0.5, 1]) {
    const v = vmax * frac;
    svg += `<line x1="${left}" x2="${w - 8}" y1="${y(v)}" y2="${y(v)}" stroke="#e4e7eb"/>`;
    svg += `<text x="${left - 6}" y="${y(v) + 4}" font-size="10" text-anchor="end">${esc(shortNum(v))}</text>`;
  }
  const span = Math.round((tmax - tmin) / 1000);
  svg += `<text x="${left}" y="${h - 6}" font-size="10">-${span}s</text>`;
  svg += `<text x="${w - 8}" y="${h - 6}" font-size="10" text-anchor="end">now</text>`;
  series.forEach((s, i) => {
    if (!s.points.length) return;
    const d = s.points.map((p, j) => `${j ? "L" : "M"}${x(p[0]).toFixed(1)},${y(p[1]).toFixed(1)}`).join(" ");
    svg += `<path d="${d}" fill="none" stroke="${COLORS[i % COLORS.length]}" stroke-width="1.8"/>`;
  });
  svg += "</svg>";
  const legend = series.map((s, i) => {
    const last = s.points.length ? s.points[s.points.length - 1][1] : 0;
    return `<span><i style="background:${COLORS[i % COLORS.length]}"></i>${esc(s.name)} `
      + `<b data-series="${esc(s.name)}">${esc(unit === "/s" ? last.toFixed(1) + "/s" : num(last))}</b></span>`;
  }).join("");
  return svg + `<div class="legend">${legend}</div>`;
}

function niceCeil(v) {
  const p = Math.pow(10, Math.floor(Math.log10(v)));
  for (const m of [1, 2, 5, 10]) if (m * p >= v) return m * p;
  return 10 * p;
}

function shortNum(v) {
  if (v >= 1e6) return (v / 1e6).toFixed(1) + "M";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + "k";
  return String(Math.round(v * 10) / 10);
}

// RabbitMQ's samples (newest first, cumulative totals) -> [[t, rate per second]] oldest first.
function ratePoints(details) {
  const s = (details && details.samples) || [];
  const out = [];
  for (let i = s.length - 2; i >= 0; i--) {
    const dt = (s[i].timestamp - s[i + 1].timestamp) / 1000;
    if (dt > 0) out.push([s[i].timestamp, Math.max(0, (s[i].sample - s[i + 1].sample) / dt)]);
  }
  return out;
}

function gaugePoints(details) {
  return ((details && details.samples) || []).slice().reverse().map((p) => [p.timestamp, p.sample]);
}

// ---------------------------------------------------------------- paging

function pagingState(key) {
  return UI.paging[key] || (UI.paging[key] = { page: 1, size: 100, name: "", regex: true });
}

function pagedPath(base, key, sort) {
  const st = pagingState(key);
  let q = `?page=${st.page}&page_size=${st.size}&pagination=true`;
  if (st.name) q += `&name=${enc(st.name)}&use_regex=${st.regex ? "true" : "false"}`;
  if (sort) q += `&sort=${enc(sort)}`;
  return base + q;
}

function pagerControls(key) {
  const st = pagingState(key);
  return `<form class="inline" id="${key}-filter-form">
    <label>Filter (name)<input id="${key}-filter" name="name" value="${esc(st.name)}" placeholder="regular expression"></label>
    <label><span><input type="checkbox" id="${key}-regex" name="regex" ${st.regex ? "checked" : ""}> regex</span></label>
    <label>Page size<select id="${key}-size" name="size">${[20, 100, 500].map((n) =>
      `<option ${n === st.size ? "selected" : ""}>${n}</option>`).join("")}</select></label>
    <button id="${key}-apply">Apply</button></form>
    <div class="pager"><button id="${key}-prev" type="button">&laquo; Prev</button>
    <span id="${key}-page-info"></span><button id="${key}-next" type="button">Next &raquo;</button></div>`;
}

function bindPager(key) {
  const st = pagingState(key);
  $(`#${key}-filter-form`).onsubmit = async (e) => {
    e.preventDefault();
    st.name = $(`#${key}-filter`).value;
    st.regex = $(`#${key}-regex`).checked;
    st.size = Number($(`#${key}-size`).value);
    st.page = 1;
    await UI.live();
  };
  $(`#${key}-prev`).onclick = async () => { if (st.page > 1) { st.page--; await UI.live(); } };
  $(`#${key}-next`).onclick = async () => { if (st.page < (st.pageCount || 1)) { st.page++; await UI.live(); } };
}

function showPage(key, reply) {
  const info = $(`#${key}-page-info`);
  if (!info) return;  // the user went to another page meanwhile
  const st = pagingState(key);
  st.pageCount = Math.max(1, reply.page_count);
  if (st.page > st.pageCount) st.page = st.pageCount;
  info.textContent =
    `Page ${reply.page} of ${st.pageCount} (${num(reply.filtered_count)} matching, ${num(reply.total_count)} in all)`;
}

// Fetch a paged listing; a page past the end (rows went away) falls back to the last page.
async function fetchPage(base, key, sort) {
  try {
    return await api("GET", pagedPath(base, key, sort));
  } catch (e) {
    const st = pagingState(key);
    if (e.status === 400 && st.page > 1) { st.page = 1; return api("GET", pagedPath(base, key, sort)); }
    throw e;
  }
}

// ---------------------------------------------------------------- pages

function setMain(html) { $("#main").innerHTML = html; }

async function pageLogin() {
  $("#nav").hidden = true;
  $("#who").textContent = "";
  setMain(`<form class="login" id="login-form">
    <h1>Log in</h1>
    <label>Username<input id="login-user" name="user" autocomplete="username" autofocus></label>
    <label>Password<input id="login-pass" name="pass" type="password" autocomplete="current-password"></label>
    <button id="login-submit">Log in</button>
    <p id="login-error" class="alarm"></p></form>`);
  $("#login-form").onsubmit = async (e) => {
    e.preventDefault();
    const user = $("#login-user").value, pass = $("#login-pass").value;
    const bytes = new TextEncoder().encode(`${user}:${pass}`);
    UI.auth = "Basic " + btoa(String.fromCharCode(...bytes));
    try {
      const me = await api("GET", "/whoami");
      UI.user = me.name; UI.tags = me.tags || [];
      sessionStorage.setItem("auth", UI.auth);
      sessionStorage.setItem("user", UI.user);
      sessionStorage.setItem("tags", JSON.stringify(UI.tags));
      if (location.hash === "#/") await route(); else location.hash = "#/";  // hashchange routes
    } catch (err) {
      UI.auth = null;
      $("#login-error").textContent = `Login failed: ${err.message}`;
    }
  };
}

function logout() {
  sessionStorage.clear();
  UI.auth = UI.user = null; UI.tags = [];
  location.hash = "#/login";
  route();
}

async function pageOverview() {
  setMain(`<h1>Overview</h1><div id="live"></div>`);
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const [ov, nodes] = await Promise.all([
      api("GET", "/overview?msg_rates_age=600&msg_rates_incr=5&lengths_age=600&lengths_incr=5"),
      api("GET", "/nodes")]);
    const ms = ov.message_stats || {}, qt = ov.queue_totals || {}, ot = ov.object_totals || {};
    const card = (id, k, v) => `<div class="card"><div class="v" id="${id}">${esc(v)}</div><div class="k">${esc(k)}</div></div>`;
    const rateSeries = [["publish", "publish"], ["deliver / get", "deliver_get"], ["ack", "ack"],
      ["redeliver", "redeliver"], ["dead-lettered", "dead_lettered"]]
      .map(([name, key]) => ({ name, points: ratePoints(ms[key + "_details"]) }));
    const depthSeries = [["ready", "messages_ready"], ["unacked", "messages_unacknowledged"]]
      .map(([name, key]) => ({ name, points: gaugePoints(qt[key + "_details"]) }));
    const nodeRows = nodes.map((n) => {
      const alarms = [n.mem_alarm ? "memory" : "", n.disk_free_alarm ? "disk" : ""].filter(Boolean);
      return `<tr><td><a href="#/nodes/${enc(n.name)}">${esc(n.name)}</a></td>
        <td>${n.running ? "running" : '<span class="alarm">down</span>'}</td>
        <td class="n">${n.mem_used !== undefined ? bytes(n.mem_used) + " / " + bytes(n.mem_limit) : "?"}</td>
        <td class="n">${n.disk_free !== undefined ? bytes(n.disk_free) + " (limit " + bytes(n.disk_free_limit) + ")" : "?"}</td>
        <td class="n">${n.uptime !== undefined ? uptime(n.uptime) : "?"}</td>
        <td>${alarms.length ? `<span class="alarm">${alarms.join(", ")}</span>` : "none"}</td></tr>`;
    });
    const listenerRows = (ov.listeners || []).map((l) =>
      `<tr><td>${esc(l.protocol)}</td><td>${esc(l.node)}</td><td>${esc(l.ip_address)}</td><td class="n">${esc(l.port)}</td></tr>`);
    live.innerHTML = `
      <div class="cards">
        ${card("ov-connections", "connections", num(ot.connections))}
        ${card("ov-channels", "channels", num(ot.channels))}
        ${card("ov-exchanges", "exchanges", num(ot.exchanges))}
        ${card("ov-queues", "queues", num(ot.queues))}
        ${card("ov-consumers", "consumers", num(ot.consumers))}
        ${card("ov-messages", "messages", num(qt.messages))}
        ${card("ov-ready", "ready", num(qt.messages_ready))}
        ${card("ov-unacked", "unacked", num(qt.messages_unacknowledged))}
        ${card("ov-publish-rate", "publish", rate(ms.publish_details) || "0.0/s")}
        ${card("ov-deliver-rate", "deliver / get", rate(ms.deliver_get_details) || "0.0/s")}
        ${card("ov-ack-rate", "ack", rate(ms.ack_details) || "0.0/s")}
      </div>
      <h2>Message rates</h2>${lineChart("chart-rates", rateSeries, "/s")}
      <h2>Queued messages</h2>${lineChart("chart-depth", depthSeries, "")}
      <h2>Nodes</h2>${table("nodes", ["Name", "State", "Memory used / limit", "Disk free", "Uptime", "Alarms"], nodeRows)}
      <h2>Listeners</h2>${table("listeners", ["Protocol", "Node", "Address", "Port"], listenerRows)}
      <p class="muted">${esc(ov.product_name)} ${esc(ov.product_version)}, cluster ${esc(ov.cluster_name)}; rates sampled (${esc(ov.rates_mode)}).</p>`;
  };
  await UI.live();
}

async function pageNode(name) {
  setMain(`<h1>Node ${esc(name)}</h1><div id="live"></div>`);
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const [n, ov, queues] = await Promise.all([api("GET", `/nodes/${enc(name)}`), api("GET", "/overview"),
      api("GET", "/queues?columns=name,vhost,type,node,leader,members,online")]);
    const here = queues.filter((q) => (q.leader || q.node) === name);
    const follows = queues.filter((q) => q.members && q.members.includes(name) && q.leader !== name);
    const qrow = (q) => `<tr data-name="${esc(q.name)}"><td>${esc(q.vhost)}</td>
      <td><a href="#/queues/${enc(q.vhost)}/${enc(q.name)}">${esc(q.name)}</a></td><td>${esc(q.type)}</td>
      <td>${esc(q.leader || q.node)}</td><td>${members(q)}</td></tr>`;
    const qhead = ["Vhost", "Name", "Type", "Node / leader", "Members"];
    const listeners = (ov.listeners || []).filter((l) => l.node === name).map((l) =>
      `<tr><td>${esc(l.protocol)}</td><td>${esc(l.ip_address)}</td><td class="n">${esc(l.port)}</td></tr>`);
    const shown = { ...n };
    delete shown.exchange_types;
    if (n.uptime !== undefined) shown.uptime = uptime(n.uptime);
    for (const k of ["mem_used", "mem_limit", "disk_free", "disk_free_limit"]) if (k in n) shown[k] = bytes(n[k]);
    live.innerHTML = kv(shown) + `<h2>Listeners</h2>`
      + table("node-listeners", ["Protocol", "Address", "Port"], listeners)
      + `<h2>Queues on this node (classic home or quorum leader): <span id="node-led-count">${num(here.length)}</span></h2>`
      + table("node-led", qhead, here.slice(0, 100).map(qrow)) + (here.length > 100 ? `<p class="muted">first 100 shown</p>` : "")
      + `<h2>Quorum queues with a follower here: <span id="node-follow-count">${num(follows.length)}</span></h2>`
      + table("node-follows", qhead, follows.slice(0, 100).map(qrow)) + (follows.length > 100 ? `<p class="muted">first 100 shown</p>` : "")
      + (listeners.length || n.name === ov.node ? "" : `<p class="muted">Connections, channels and
        listeners of ${esc(name)} are shown by its own management API.</p>`);
  };
  await UI.live();
}

async function pageConnections() {
  setMain(`<h1>Connections</h1>${pagerControls("conns")}<div id="live"></div>`);
  bindPager("conns");
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const reply = await fetchPage("/connections", "conns");
    showPage("conns", reply);
    const rows = reply.items.map((c) => {
      const cp = c.client_properties || {};
      return `<tr data-name="${esc(c.name)}"><td><a href="#/connections/${enc(c.name)}">${esc(c.name)}</a></td>
        <td>${esc(c.node)}</td><td>${esc(c.user)}</td><td>${esc(c.vhost)}</td>
        <td>${esc([cp.product, cp.version].filter(Boolean).join(" "))}${cp.connection_name ? ` <span class="muted">(${esc(cp.connection_name)})</span>` : ""}</td>
        <td class="n">${num(c.channels)}</td><td>${esc(c.state)}</td>
        <td class="n">${rate(c.recv_oct_details)}</td><td class="n">${rate(c.send_oct_details)}</td></tr>`;
    });
    live.innerHTML = table("connections", ["Name", "Node", "User", "Vhost", "Client", "Channels",
      "State", "From client B/s", "To client B/s"], rows);
  };
  await UI.live();
}

async function pageConnection(name) {
  setMain(`<h1>Connection ${esc(name)}</h1>
    <form class="inline" id="close-form"><label>Reason<input id="close-reason" value="Closed via management UI"></label>
    <button class="danger" id="close-conn">Close this connection</button></form><div id="live"></div>`);
  $("#close-form").onsubmit = async (e) => {
    e.preventDefault();
    if (!confirm(`Close connection ${name}?`)) return;
    const done = await act(() => api("DELETE", `/connections/${enc(name)}`, undefined,
      { "x-reason": $("#close-reason").value }), "Connection closed");
    if (done !== undefined) location.hash = "#/connections";
  };
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    let c;
    try { c = await api("GET", `/connections/${enc(name)}`); } catch (e) {
      if (e.status === 404) { live.innerHTML = `<p class="muted">The connection is closed.</p>`; return; }
      throw e;
    }
    const chans = await api("GET", `/connections/${enc(name)}/channels`);
    const rows = chans.map((ch) => `<tr><td>${esc(ch.name)}</td><td class="n">${num(ch.prefetch_count)}</td>
      <td class="n">${num(ch.messages_unacknowledged)}</td><td class="n">${num(ch.consumer_count)}</td>
      <td class="n">${stat(ch, "publish")}</td><td class="n">${stat(ch, "deliver_get")}</td><td class="n">${stat(ch, "ack")}</td></tr>`);
    const cp = c.client_properties || {};
    live.innerHTML = kv({ user: c.user, vhost: c.vhost, state: c.state, protocol: c.protocol,
      client: [cp.product, cp.version, cp.platform].filter(Boolean).join(" "), peer: `${c.peer_host}:${c.peer_port}`,
      heartbeat: c.timeout, frame_max: c.frame_max, channel_max: c.channel_max,
      "received": bytes(c.recv_oct) + " " + rate(c.recv_oct_details), "sent": bytes(c.send_oct) + " " + rate(c.send_oct_details) })
      + `<h2>Channels</h2>` + table("conn-channels", ["Channel", "Prefetch", "Unacked", "Consumers", "Publish", "Deliver / get", "Ack"], rows);
  };
  await UI.live();
}

async function pageChannels() {
  setMain(`<h1>Channels</h1>${pagerControls("chans")}<div id="live"></div>`);
  bindPager("chans");
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const reply = await fetchPage("/channels", "chans");
    showPage("chans", reply);
    const rows = reply.items.map((ch) => `<tr><td><a href="#/connections/${enc(ch.connection_details.name)}">${esc(ch.name)}</a></td>
      <td>${esc(ch.user)}</td><td>${esc(ch.vhost)}</td>
      <td>${ch.confirm ? "C" : ""}${ch.transactional ? "T" : ""}</td>
      <td class="n">${num(ch.prefetch_count)}${ch.global_prefetch_count ? " / " + num(ch.global_prefetch_count) + " global" : ""}</td>
      <td class="n">${num(ch.messages_unacknowledged)}</td><td class="n">${num(ch.consumer_count)}</td>
      <td class="n">${stat(ch, "publish")}</td><td class="n">${stat(ch, "confirm")}</td>
      <td class="n">${stat(ch, "deliver_get")}</td><td class="n">${stat(ch, "ack")}</td></tr>`);
    live.innerHTML = table("channels", ["Channel", "User", "Vhost", "Mode", "Prefetch", "Unacked",
      "Consumers", "Publish", "Confirm", "Deliver / get", "Ack"], rows);
  };
  await UI.live();
}

function xName(name) { return name === "" ? "amq.default" : name; }

async function pageExchanges() {
  setMain(`<h1>Exchanges</h1>${pagerControls("xs")}<div id="live"></div>
    <h2>Add an exchange</h2><form class="inline" id="x-add">
    <label>Vhost<select name="vhost">${await vhostOptions()}</select></label>
    <label>Name<input name="name" id="x-add-name" required></label>
    <label>Type<select name="type">${["direct", "fanout", "topic", "headers"].map((t) => `<option>${t}</option>`).join("")}</select></label>
    <label><span><input type="checkbox" name="durable" checked> durable</span></label>
    <button>Add exchange</button></form>`);
  bindPager("xs");
  $("#x-add").onsubmit = (e) => {
    e.preventDefault();
    const f = formData(e.target);
    act(() => api("PUT", `/exchanges/${enc(f.vhost)}/${enc(f.name)}`, { type: f.type, durable: !!f.durable }),
      `Exchange ${f.name} declared`);
  };
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const reply = await fetchPage("/exchanges", "xs");
    showPage("xs", reply);
    const rows = reply.items.map((x) => `<tr data-name="${esc(x.name)}"><td>${esc(x.vhost)}</td>
      <td><a href="#/exchanges/${enc(x.vhost)}/${enc(xName(x.name))}">${esc(x.name || "(AMQP default)")}</a></td>
      <td>${esc(x.type)}</td><td>${[x.durable ? "D" : "", x.auto_delete ? "AD" : "", x.internal ? "I" : ""].filter(Boolean).join(" ")}</td>
      <td>${esc(x.policy || "")}</td><td class="n">${stat(x, "publish_in")}</td><td class="n">${stat(x, "publish_out")}</td></tr>`);
    live.innerHTML = table("exchanges", ["Vhost", "Name", "Type", "Features", "Policy", "Rate in", "Rate out"], rows);
  };
  await UI.live();
}

async function pageExchange(vhost, name) {
  const path = `/exchanges/${enc(vhost)}/${enc(name)}`;
  setMain(`<h1>Exchange ${esc(name === "amq.default" ? "(AMQP default)" : name)} <span class="muted">in ${esc(vhost)}</span></h1>
    <div id="live"></div>
    <h2>Publish a message</h2><form class="inline" id="publish-form">
    <label>Routing key<input name="routing_key" id="publish-key"></label>
    <label>Delivery mode<select name="delivery_mode"><option value="1">1 non-persistent</option><option value="2">2 persistent</option></select></label>
    <label>Headers (JSON)<input name="headers" id="publish-headers" placeholder='{"a": 1}'></label>
    <label>Payload<textarea name="payload" id="publish-payload" rows="3" cols="40"></textarea></label>
    <button id="publish-submit">Publish message</button></form>
    ${name === "amq.default" ? "" : `<h2>Add a binding from this exchange</h2><form class="inline" id="bind-form">
    <label>To<select name="kind"><option value="q">queue</option><option value="e">exchange</option></select></label>
    <label>Name<input name="dest" required></label><label>Routing key<input name="routing_key"></label>
    <button>Bind</button></form>`}
    <h2>Delete</h2><button class="danger" id="x-delete">Delete this exchange</button>`);
  $("#publish-form").onsubmit = (e) => {
    e.preventDefault();
    const f = formData(e.target);
    let headers;
    try { headers = f.headers ? JSON.parse(f.headers) : undefined; } catch (err) { flash("Headers are not JSON", false); return; }
    const properties = { delivery_mode: Number(f.delivery_mode) };
    if (headers) properties.headers = headers;
    act(() => api("POST", path + "/publish", { routing_key: f.routing_key, payload: f.payload,
      payload_encoding: "string", properties }),
    (out) => out.routed ? "Message published and routed." : "Message published, but not routed.");
  };
  const bind = $("#bind-form");
  if (bind) bind.onsubmit = (e) => {
    e.preventDefault();
    const f = formData(e.target);
    act(() => api("POST", `/bindings/${enc(vhost)}/e/${enc(name)}/${f.kind}/${enc(f.dest)}`,
      { routing_key: f.routing_key, arguments: {} }), "Binding added");
  };
  $("#x-delete").onclick = async () => {
    if (!confirm(`Delete exchange ${name}?`)) return;
    const done = await act(() => api("DELETE", path), "Exchange deleted");
    if (done !== undefined) location.hash = "#/exchanges";
  };
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const [x, src] = await Promise.all([api("GET", path), api("GET", path + "/bindings/source")]);
    const rows = src.map((b) => `<tr><td>${esc(b.destination_type)}</td><td>${esc(b.destination)}</td>
      <td>${esc(b.routing_key)}</td><td><code>${esc(JSON.stringify(b.arguments))}</code></td></tr>`);
    live.innerHTML = kv({ type: x.type, durable: x.durable, auto_delete: x.auto_delete, internal: x.internal,
      arguments: x.arguments, policy: x.policy || "", "rate in": stat(x, "publish_in"), "rate out": stat(x, "publish_out") })
      + `<h2>Bindings from this exchange</h2>` + table("x-bindings", ["To", "Name", "Routing key", "Arguments"], rows);
  };
  await UI.live();
}

function members(q) {
  if (!q.members) return "";
  const online = new Set(q.online || []);
  return q.members.map((m) => esc(m) + (online.has(m) ? "" : " (down)")).join(", ");
}

async function pageQueues() {
  setMain(`<h1>Queues</h1>${pagerControls("qs")}<div id="live"></div>
    <h2>Add a queue</h2><form class="inline" id="q-add">
    <label>Vhost<select name="vhost">${await vhostOptions()}</select></label>
    <label>Type<select name="type"><option>classic</option><option>quorum</option></select></label>
    <label>Name<input name="name" id="q-add-name" required></label>
    <label><span><input type="checkbox" name="durable" checked> durable</span></label>
    <button id="q-add-submit">Add queue</button></form>`);
  bindPager("qs");
  $("#q-add").onsubmit = (e) => {
    e.preventDefault();
    const f = formData(e.target);
    act(() => api("PUT", `/queues/${enc(f.vhost)}/${enc(f.name)}`,
      { durable: f.type === "quorum" || !!f.durable, arguments: f.type === "quorum" ? { "x-queue-type": "quorum" } : {} }),
    `Queue ${f.name} declared`);
  };
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const reply = await fetchPage("/queues", "qs");
    showPage("qs", reply);
    const rows = reply.items.map((q) => `<tr data-name="${esc(q.name)}"><td>${esc(q.vhost)}</td>
      <td><a href="#/queues/${enc(q.vhost)}/${enc(q.name)}">${esc(q.name)}</a></td>
      <td>${esc(q.type)}</td><td>${esc(q.state)}</td>
      <td>${esc(q.leader || q.node)}</td><td>${members(q)}</td>
      <td class="n">${num(q.consumers)}</td><td class="n q-ready">${num(q.messages_ready)}</td>
      <td class="n">${num(q.messages_unacknowledged)}</td><td class="n q-total">${num(q.messages)}</td>
      <td class="n q-publish-rate">${stat(q, "publish")}</td><td class="n">${stat(q, "deliver_get")}</td><td class="n">${stat(q, "ack")}</td></tr>`);
    live.innerHTML = table("queues", ["Vhost", "Name", "Type", "State", "Node / leader", "Members",
      "Consumers", "Ready", "Unacked", "Total", "Incoming", "Deliver / get", "Ack"], rows);
  };
  await UI.live();
}

function deathTable(headers) {
  const deaths = headers && headers["x-death"];
  if (!Array.isArray(deaths) || !deaths.length) return "";
  const rows = deaths.map((d) => `<tr><td>${esc(d.reason)}</td><td>${esc(d.queue)}</td><td>${esc(d.exchange)}</td>
    <td>${esc((d["routing-keys"] || []).join(", "))}</td><td class="n">${num(d.count)}</td>
    <td>${d.time ? esc(new Date(d.time * 1000).toISOString()) : ""}</td></tr>`);
  return `<h3>Dead-lettered (x-death)</h3>` + table("", ["Reason", "Queue", "Exchange", "Routing keys", "Count", "Time"], rows);
}

async function pageQueue(vhost, name) {
  const path = `/queues/${enc(vhost)}/${enc(name)}`;
  setMain(`<h1>Queue ${esc(name)} <span class="muted">in ${esc(vhost)}</span></h1><div id="live"></div>
    <h2>Get messages</h2><form class="inline" id="get-form">
    <label>Ack mode<select id="get-ackmode" name="ackmode">
      <option value="ack_requeue_true">Nack message requeue true</option>
      <option value="ack_requeue_false">Ack message requeue false</option>
      <option value="reject_requeue_true">Reject requeue true</option>
      <option value="reject_requeue_false">Reject requeue false</option></select></label>
    <label>Encoding<select name="encoding"><option value="auto">Automatic string/base64</option><option value="base64">base64</option></select></label>
    <label>Messages<input id="get-count" name="count" type="number" min="1" value="1" style="width:5em"></label>
    <button id="get-submit">Get messages</button></form><div id="messages"></div>
    <h2>Move messages</h2><form class="inline" id="move-form">
    <label>Destination queue<input id="move-dest" name="destination" required></label>
    <button id="move-submit">Move messages</button></form>
    <h2>Purge</h2><button class="danger" id="purge">Purge messages</button>
    <h2>Delete</h2><button class="danger" id="delete">Delete queue</button>`);
  $("#get-form").onsubmit = async (e) => {
    e.preventDefault();
    const f = formData(e.target);
    const msgs = await act(() => api("POST", path + "/get", { count: Number(f.count), ackmode: f.ackmode,
      encoding: f.encoding, truncate: 50000 }));
    if (msgs === undefined) return;
    $("#messages").innerHTML = msgs.length ? msgs.map((m, i) => `<div class="message"><h3>Message ${i + 1}</h3>`
      + kv({ exchange: m.exchange, routing_key: m.routing_key, redelivered: m.redelivered,
        "messages left": m.message_count, properties: m.properties })
      + `<pre class="payload">${esc(m.payload)}</pre>`
      + deathTable((m.properties || {}).headers) + `</div>`).join("")
      : `<p class="muted" id="queue-empty">Queue is empty</p>`;
  };
  $("#move-form").onsubmit = async (e) => {
    e.preventDefault();
    const dest = $("#move-dest").value;
    await act(async () => {
      let total = 0, out;
      do {  // one batch per request, so the node never holds still for a huge queue
        out = await api("POST", path + "/move", { destination: dest });
        total += out.moved;
      } while (out.moved > 0 && out.remaining > 0);
      return total;
    }, (n) => `Moved ${n} message(s) to ${dest}`);
  };
  $("#purge").onclick = () => {
    if (!confirm(`Purge queue ${name}?`)) return;
    act(() => api("DELETE", path + "/contents"), "Queue purged");
  };
  $("#delete").onclick = async () => {
    if (!confirm(`Delete queue ${name}?`)) return;
    const done = await act(() => api("DELETE", path), "Queue deleted");
    if (done !== undefined) location.hash = "#/queues";
  };
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    let q;
    try { q = await api("GET", path); } catch (e) {
      if (e.status === 404) { live.innerHTML = `<p class="muted">No such queue.</p>`; return; }
      throw e;
    }
    const [binds, consumers] = await Promise.all([api("GET", path + "/bindings"),
      api("GET", `/consumers/${enc(vhost)}`).catch(() => [])]);
    const mine = consumers.filter((c) => c.queue && c.queue.name === name);
    const info = { type: q.type, state: q.state, node: q.node };
    if (q.leader) { info.leader = q.leader; info.members = members(q); }
    Object.assign(info, { durable: q.durable, auto_delete: q.auto_delete, exclusive: q.exclusive,
      arguments: q.arguments, policy: q.policy || "", operator_policy: q.operator_policy || "",
      effective_policy_definition: q.effective_policy_definition,
      consumers: q.consumers, ready: q.messages_ready, unacked: q.messages_unacknowledged, total: q.messages,
      incoming: stat(q, "publish"), "deliver / get": stat(q, "deliver_get"), ack: stat(q, "ack"),
      redeliver: stat(q, "redeliver") });
    const crow = mine.map((c) => `<tr><td>${esc(c.channel_details.name)}</td><td>${esc(c.consumer_tag)}</td>
      <td>${c.ack_required ? "yes" : "no"}</td><td class="n">${num(c.prefetch_count)}</td><td>${esc(c.activity_status)}</td></tr>`);
    const brow = binds.map((b) => `<tr><td>${esc(b.source || "(AMQP default)")}</td><td>${esc(b.routing_key)}</td>
      <td><code>${esc(JSON.stringify(b.arguments))}</code></td></tr>`);
    live.innerHTML = kv(info) + `<h2>Consumers</h2>`
      + table("q-consumers", ["Channel", "Tag", "Ack required", "Prefetch", "Status"], crow)
      + `<h2>Bindings</h2>` + table("q-bindings", ["From", "Routing key", "Arguments"], brow);
    const cells = live.querySelectorAll("table.kv tr");
    cells.forEach((tr) => { const th = tr.querySelector("th"); if (th) tr.id = "q-" + th.textContent.replace(/\W+/g, "-"); });
  };
  await UI.live();
}

// A policymaker (not an administrator) gets the policies part only; anyone else without the
// administrator tag gets the whole page and so the API's refusal.
function policiesOnly() { return !isAdmin() && UI.tags.includes("policymaker"); }

async function pageAdmin() {
  const vhostOpts = await vhostOptions();
  const full = !policiesOnly();
  const onsubmit = (id, fn) => { const f = $(id); if (f) f.onsubmit = fn; };
  setMain(`<h1>Admin</h1><div id="live"></div>
    ${full ? `<h2>Add or update a user</h2><form class="inline" id="user-form">
    <label>Name<input id="user-name" name="name" required></label>
    <label>Password<input id="user-pass" name="password" type="password"></label>
    <label>Tags<input id="user-tags" name="tags" placeholder="administrator, monitoring, management, policymaker"></label>
    <button id="user-submit">Add user</button></form>
    <h2>Set permissions</h2><form class="inline" id="perm-form">
    <label>User<input name="user" id="perm-user" required></label>
    <label>Vhost<select name="vhost">${vhostOpts}</select></label>
    <label>Configure<input name="configure" value=".*"></label><label>Write<input name="write" value=".*"></label>
    <label>Read<input name="read" value=".*"></label><button id="perm-submit">Set permission</button></form>
    <h2>Add a virtual host</h2><form class="inline" id="vhost-form">
    <label>Name<input name="name" id="vhost-name" required></label>
    <label>Description<input name="description"></label><button>Add vhost</button></form>` : ""}
    <h2>Add or update a policy</h2><form class="inline" id="policy-form">
    <label>Vhost<select name="vhost">${vhostOpts}</select></label>
    <label>Name<input id="policy-name" name="name" required></label>
    <label>Pattern<input id="policy-pattern" name="pattern" required></label>
    <label>Apply to<select name="apply-to"><option value="all">exchanges and queues</option>
      <option value="queues">queues</option><option value="exchanges">exchanges</option></select></label>
    <label>Priority<input name="priority" type="number" value="0" style="width:5em"></label>
    <label>Definition (JSON)<textarea id="policy-definition" name="definition" rows="2" cols="40">{"max-length": 1000}</textarea></label>
    <button id="policy-submit">Add policy</button></form>
    ${full ? `<h2>Add or update an operator policy</h2><form class="inline" id="oppolicy-form">
    <label>Vhost<select name="vhost">${vhostOpts}</select></label>
    <label>Name<input id="oppolicy-name" name="name" required></label>
    <label>Pattern<input id="oppolicy-pattern" name="pattern" required></label>
    <label>Apply to<select name="apply-to"><option value="queues">queues</option>
      <option value="all">exchanges and queues</option></select></label>
    <label>Priority<input name="priority" type="number" value="0" style="width:5em"></label>
    <label>Definition (JSON)<textarea id="oppolicy-definition" name="definition" rows="2" cols="40">{"max-length": 100000}</textarea></label>
    <button id="oppolicy-submit">Add operator policy</button></form>
    <h2>Definitions</h2>
    <p><button id="defs-export" type="button">Download definitions (JSON)</button></p>
    <form class="inline" id="defs-import"><label>Import definitions (JSON file)<input type="file" id="defs-file" accept=".json,application/json"></label>
    <label>or paste<textarea id="defs-text" rows="2" cols="40"></textarea></label><button>Upload definitions</button></form>` : ""}`);
  onsubmit("#user-form", (e) => {
    e.preventDefault();
    const f = formData(e.target);
    const body = { tags: f.tags };
    if (f.password) body.password = f.password;
    act(() => api("PUT", `/users/${enc(f.name)}`, body), `User ${f.name} saved`);
  });
  onsubmit("#perm-form", (e) => {
    e.preventDefault();
    const f = formData(e.target);
    act(() => api("PUT", `/permissions/${enc(f.vhost)}/${enc(f.user)}`,
      { configure: f.configure, write: f.write, read: f.read }), `Permissions of ${f.user} set`);
  });
  onsubmit("#vhost-form", (e) => {
    e.preventDefault();
    const f = formData(e.target);
    act(() => api("PUT", `/vhosts/${enc(f.name)}`, { description: f.description }), `Vhost ${f.name} added`);
  });
  const policyForm = (formId, path, what) => {
    onsubmit(formId, (e) => {
      e.preventDefault();
      const f = formData(e.target);
      let definition;
      try { definition = JSON.parse(f.definition); } catch (err) { flash("Definition is not JSON", false); return; }
      act(() => api("PUT", `${path}/${enc(f.vhost)}/${enc(f.name)}`, { pattern: f.pattern, definition,
        priority: Number(f.priority || 0), "apply-to": f["apply-to"] }), `${what} ${f.name} saved`);
    });
  };
  policyForm("#policy-form", "/policies", "Policy");
  policyForm("#oppolicy-form", "/operator-policies", "Operator policy");
  if (full) $("#defs-export").onclick = () => act(async () => {
    const defs = await api("GET", "/definitions");
    const a = document.createElement("a");
    a.href = URL.createObjectURL(new Blob([JSON.stringify(defs, null, 2)], { type: "application/json" }));
    a.download = "definitions.json";
    a.click();
  }, "Definitions downloaded");
  onsubmit("#defs-import", async (e) => {
    e.preventDefault();
    const file = $("#defs-file").files[0];
    const text = file ? await file.text() : $("#defs-text").value;
    let defs;
    try { defs = JSON.parse(text); } catch (err) { flash("Definitions are not JSON", false); return; }
    act(() => api("POST", "/definitions", defs), "Definitions imported");
  });
  UI.live = async () => {
    const live = $("#live");  // this page's: a late reply must not land on the next page
    const [users, perms, vhosts, policies, opPolicies] = await Promise.all([
      full ? api("GET", "/users") : [], full ? api("GET", "/permissions") : [],
      full ? api("GET", "/vhosts") : [], api("GET", "/policies"), api("GET", "/operator-policies")]);
    const urows = users.map((u) => `<tr data-name="${esc(u.name)}"><td>${esc(u.name)}</td>
      <td>${(Array.isArray(u.tags) ? u.tags : String(u.tags || "").split(",")).filter(Boolean).map((t) => `<span class="tag">${esc(t)}</span>`).join("")}</td>
      <td>${esc(perms.filter((p) => p.user === u.name).map((p) => p.vhost).join(", "))}</td>
      <td><button type="button" data-del-user="${esc(u.name)}">Delete</button></td></tr>`);
    const prows = perms.map((p) => `<tr><td>${esc(p.user)}</td><td>${esc(p.vhost)}</td><td>${esc(p.configure)}</td>
      <td>${esc(p.write)}</td><td>${esc(p.read)}</td></tr>`);
    const vrows = vhosts.map((v) => `<tr data-name="${esc(v.name)}"><td>${esc(v.name)}</td><td>${esc(v.description)}</td>
      <td class="n">${num(v.messages)}</td><td class="n">${stat(v, "publish")}</td><td class="n">${stat(v, "deliver_get")}</td>
      <td><button type="button" data-del-vhost="${esc(v.name)}">Delete</button></td></tr>`);
    const polrows = (list, path) => list.map((p) => `<tr data-name="${esc(p.name)}"><td>${esc(p.vhost)}</td><td>${esc(p.name)}</td>
      <td><code>${esc(p.pattern)}</code></td><td>${esc(p["apply-to"])}</td><td><code>${esc(JSON.stringify(p.definition))}</code></td>
      <td class="n">${esc(p.priority)}</td><td><button type="button" data-del-policy="${esc(p.name)}" data-vhost="${esc(p.vhost)}"
      data-path="${path}">Delete</button></td></tr>`);
    live.innerHTML = (full ? `<h2>Users</h2>` + table("users", ["Name", "Tags", "Can access vhosts", ""], urows)
      + `<h2>Permissions</h2>` + table("permissions", ["User", "Vhost", "Configure", "Write", "Read"], prows)
      + `<h2>Virtual hosts</h2>` + table("vhosts", ["Name", "Description", "Messages", "Publish", "Deliver / get", ""], vrows)
      : "") + `<h2>Policies</h2>` + table("policies", ["Vhost", "Name", "Pattern", "Apply to", "Definition", "Priority", ""],
        polrows(policies, "/policies"))
      + `<h2>Operator policies</h2>` + table("operator-policies", ["Vhost", "Name", "Pattern", "Apply to", "Definition",
        "Priority", ""], polrows(opPolicies, "/operator-policies"));
    live.querySelectorAll("[data-del-user]").forEach((b) => { b.onclick = () => {
      if (confirm(`Delete user ${b.dataset.delUser}?`)) act(() => api("DELETE", `/users/${enc(b.dataset.delUser)}`), "User deleted");
    }; });
    live.querySelectorAll("[data-del-vhost]").forEach((b) => { b.onclick = () => {
      if (confirm(`Delete vhost ${b.dataset.delVhost} and everything in it?`)) act(() => api("DELETE", `/vhosts/${enc(b.dataset.delVhost)}`), "Vhost deleted");
    }; });
    live.querySelectorAll("[data-del-policy]").forEach((b) => { b.onclick = () => {
      if (confirm(`Delete policy ${b.dataset.delPolicy}?`)) act(() => api("DELETE", `${b.dataset.path}/${enc(b.dataset.vhost)}/${enc(b.dataset.delPolicy)}`), "Policy deleted");
    }; });
  };
  await UI.live();
}

// ---------------------------------------------------------------- routing

const ROUTES = [
  [/^#\/connections\/(.+)$/, (m) => pageConnection(decodeURIComponent(m[1])), "connections"],
  [/^#\/connections$/, pageConnections, "connections"],
  [/^#\/channels$/, pageChannels, "channels"],
  [/^#\/exchanges\/([^/]+)\/([^/]+)$/, (m) => pageExchange(decodeURIComponent(m[1]), decodeURIComponent(m[2])), "exchanges"],
  [/^#\/exchanges$/, pageExchanges, "exchanges"],
  [/^#\/queues\/([^/]+)\/([^/]+)$/, (m) => pageQueue(decodeURIComponent(m[1]), decodeURIComponent(m[2])), "queues"],
  [/^#\/queues$/, pageQueues, "queues"],
  [/^#\/admin$/, pageAdmin, "admin"],
  [/^#\/nodes\/(.+)$/, (m) => pageNode(decodeURIComponent(m[1])), "overview"],
  [/^(#\/?)?$/, pageOverview, "overview"],
];

function renderHeader() {
  $("#nav").hidden = false;
  $("#nav-admin").hidden = !isAdmin() && !policiesOnly();
  $("#who").innerHTML = `User <b id="who-name">${esc(UI.user)}</b> ${UI.tags.map((t) => `<span class="tag">${esc(t)}</span>`).join("")}
    <label class="muted">refresh <select id="refresh">${[[2000, "2 s"], [5000, "5 s"], [10000, "10 s"], [0, "off"]].map(([ms, t]) =>
      `<option value="${ms}" ${ms === UI.refreshMs ? "selected" : ""}>${t}</option>`).join("")}</select></label>
    <button id="logout" type="button">Log out</button>`;
  $("#logout").onclick = logout;
  $("#refresh").onchange = (e) => {
    UI.refreshMs = Number(e.target.value);
    sessionStorage.setItem("refreshMs", String(UI.refreshMs));
    schedule();
  };
}

function schedule() {
  clearInterval(UI.timer);
  if (UI.refreshMs > 0) {
    UI.timer = setInterval(async () => {
      if (!UI.live || document.hidden) return;
      try { await UI.live(); } catch (e) { flash(`Refresh failed: ${e.message}`, false); }
    }, UI.refreshMs);
  }
}

// One route at a time: a page still loading when the hash changes finishes first, so a late
// render never replaces the page the user went to.
function route() {
  UI.routing = (UI.routing || Promise.resolve()).then(renderRoute, renderRoute);
  return UI.routing;
}

async function renderRoute() {
  UI.live = null;
  const hash = location.hash || "#/";
  if (!UI.auth || hash === "#/login") return pageLogin();
  renderHeader();
  for (const [re, page, tab] of ROUTES) {
    const m = hash.match(re);
    if (!m) continue;
    document.querySelectorAll("#nav a").forEach((a) => a.classList.toggle("active", a.dataset.page === tab));
    try {
      await page(m);
    } catch (e) {
      if (e.status === 401 && e.message === "Login failed") { logout(); return; }  // routes after this one
      setMain(`<p class="alarm" id="page-error">Refused: ${esc(e.message)}</p>`);
      UI.live = null;
    }
    schedule();
    return;
  }
  setMain(`<p>No such page.</p>`);
}

window.addEventListener("hashchange", route);
route();
