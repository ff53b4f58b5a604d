// weir's web UI: one page, views by the address's #fragment, figures from the
// JSON API under it (weir/actors/ui.py), read once a second while the tab shows.
// Text from jobs (names, errors) goes in as text, never as HTML; the graph is
// the SVG weir draws itself (names escaped there).
"use strict";

const POLL_MS = 1000;
const TREND_POINTS = 60;
const ENDED = new Set(["FINISHED", "CANCELED", "FAILED", "SUSPENDED"]);
const trends = new Map(); // "job/vertex" -> recent records-in rates, oldest first
let timer = null;
let graphKey = null;

function h(tag, attrs, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === null || v === undefined || v === false) continue;
    if (k.startsWith("on")) el.addEventListener(k.slice(2), v);
    else el.setAttribute(k, v === true ? "" : v);
  }
  for (const c of children.flat()) {
    if (c !== null && c !== undefined) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
  return el;
}

async function api(path, options) {
  const response = await fetch("/api" + path, options);
  if (response.status === 401 || response.status === 403) {
    location.href = "/login?next=" + encodeURIComponent("/" + location.hash);
    throw new Error("log in first");
  }
  const type = response.headers.get("Content-Type") || "";
  const body = type.includes("json") ? await response.json() : await response.text();
  if (!response.ok) throw new Error(body.error || String(body));
  return body;
}

// ---------------------------------------------------------------- formatting
function rate(v) {
  if (v === null || v === undefined) return "–";
  if (v >= 1e6) return (v / 1e6).toFixed(2) + " M/s";
  if (v >= 1e3) return (v / 1e3).toFixed(1) + " k/s";
  return v.toFixed(v < 10 ? 1 : 0) + " /s";
}
function count(v) {
  return v === null || v === undefined ? "–" : Number(v).toLocaleString("en");
}
function bytes(v) {
  if (!v) return "0 B";
  const units = ["B", "KiB", "MiB", "GiB", "TiB"];
  let i = 0;
  while (v >= 1024 && i < units.length - 1) { v /= 1024; i++; }
  return (i ? v.toFixed(1) : v) + " " + units[i];
}
function duration(s) {
  if (s === null || s === undefined) return "–";
  if (s < 60) return s.toFixed(1) + " s";
  const m = Math.floor(s / 60);
  if (m < 60) return `${m} min ${Math.floor(s % 60)} s`;
  return `${Math.floor(m / 60)} h ${m % 60} min`;
}
function ms(v) {
  return v === null || v === undefined ? "–" : v < 1000 ? v + " ms" : (v / 1000).toFixed(2) + " s";
}
function clock(epochMs) {
  return epochMs === null || epochMs === undefined ? "–" : new Date(epochMs).toLocaleTimeString("en-GB");
}
function percent(v) {
  return v === null || v === undefined ? "–" : Math.round(v * 100) + " %";
}
function badge(status) {
  return h("span", { class: "badge " + status.toLowerCase() }, status);
}

// Busy, backpressured and idle shares of the last second, as one bar (Flink's colours: busy red, backpressured grey).
function timeBar(row) {
  if (row.busy === null || row.busy === undefined) return h("span", { class: "muted" }, "–");
  const part = (cls, v) => h("span", { class: cls, style: `width:${(v * 100).toFixed(1)}%` });
  const title = `busy ${percent(row.busy)}, backpressured ${percent(row.backpressured)}, idle ${percent(row.idle)}`;
  return h("span", { class: "timebar-cell", title },
    h("span", { class: "timebar" }, part("busy", row.busy), part("backpressured", row.backpressured), part("idle", row.idle)),
    h("span", { class: "timebar-text" }, `${percent(row.busy)} / ${percent(row.backpressured)} / ${percent(row.idle)}`));
}

function sparkline(values) {
  const w = 120, hgt = 24, max = Math.max(1, ...values);
  const step = w / (TREND_POINTS - 1);
  const start = TREND_POINTS - values.length;
  const points = values.map((v, i) => `${((start + i) * step).toFixed(1)},${(hgt - 2 - (v / max) * (hgt - 4)).toFixed(1)}`);
  const svg = document.createElementNS("http://www.w3.org/2000/svg", "svg");
  svg.setAttribute("width", w); svg.setAttribute("height", hgt); svg.setAttribute("class", "spark");
  const line = document.createElementNS("http://www.w3.org/2000/svg", "polyline");
  line.setAttribute("points", points.join(" "));
  svg.append(line);
  return svg;
}

// ---------------------------------------------------------------- views
function route() {
  const parts = location.hash.replace(/^#\/?/, "").split("/").map(decodeURIComponent);
  if (parts[0] === "jobs" && parts[1]) return { view: parts[2] || "overview", job: parts[1] };
  return { view: "jobs" };
}

function crumbs(r) {
  const nav = document.getElementById("crumbs");
  nav.replaceChildren(h("a", { href: "#/" }, "Jobs"));
  if (r.job) nav.append(" / ", h("a", { href: jobHref(r.job) }, r.job));
}
const jobHref = (job, view) => "#/jobs/" + encodeURIComponent(job) + (view ? "/" + view : "");

async function showJobs(view) {
  const jobs = await api("/jobs");
  const rows = jobs.map((j) => h("tr", { "data-job": j.job },
    h("td", {}, h("a", { href: jobHref(j.job) }, j.job)),
    h("td", {}, badge(j.status)),
    h("td", { class: "num" }, j.parallelism),
    h("td", { class: "num" }, j.tasks),
    h("td", { class: "num" }, duration(j.uptime_s)),
    h("td", { class: "num" }, j.restarts),
    h("td", { class: "num" }, j.completed_checkpoints)));
  view.replaceChildren(
    h("h1", {}, "Jobs on this cluster"),
    jobs.length
      ? h("table", { id: "jobs" },
          h("thead", {}, h("tr", {}, ["Job", "Status", "Parallelism", "Tasks", "Uptime", "Restarts", "Checkpoints"].map((c) => h("th", {}, c)))),
          h("tbody", {}, rows))
      : h("p", { class: "muted" }, "No jobs: none runs, and none ended in the last few minutes."));
}

function jobHeader(job, j, current) {
  const ended = ENDED.has(j.status);
  const tab = (view, label) => h("a", { id: "tab-" + view, href: jobHref(job, view === "overview" ? "" : view), class: view === current ? "tab active" : "tab" }, label);
  const button = (action, label, cls) => h("button", { id: "act-" + action, class: cls, disabled: ended, onclick: () => confirmAction(job, action, j) }, label);
  return [
    h("div", { class: "title" },
      h("h1", {}, job), badge(j.status),
      h("span", { class: "facts" },
        `uptime ${duration(j.uptime_s)} · parallelism ${j.parallelism} · ${j.tasks} tasks · ${j.restarts} restarts · ${j.completed_checkpoints} checkpoints`),
      h("span", { class: "actions" },
        button("savepoint", "Savepoint"), button("rescale", "Rescale"),
        button("stop", "Stop", "danger"), button("cancel", "Cancel", "danger"))),
    h("nav", { class: "tabs" }, tab("overview", "Overview"), tab("checkpoints", "Checkpoints"), tab("exceptions", "Exceptions")),
  ];
}

async function showOverview(view, job) {
  const j = await api("/jobs/" + encodeURIComponent(job));
  const key = job + JSON.stringify(j.info.parallelism);
  let graph = document.getElementById("graph");
  if (!graph || graphKey !== key) {
    graph = h("div", { id: "graph", class: "graph" });
    graph.innerHTML = await api("/jobs/" + encodeURIComponent(job) + "/graph.svg"); // weir's own SVG
    graphKey = key;
  }
  for (const v of j.vertices) {
    const points = trends.get(job + "/" + v.vertex) || [];
    if (v.in_per_s !== null) points.push(v.in_per_s);
    trends.set(job + "/" + v.vertex, points.slice(-TREND_POINTS));
  }
  const vertexRows = j.vertices.map((v) => h("tr", { "data-vertex": v.vertex },
    h("td", {}, v.vertex),
    h("td", { class: "num" }, `${v.running}/${v.parallelism}`),
    h("td", { class: "num in-rate" }, rate(v.in_per_s)),
    h("td", { class: "num out-rate" }, rate(v.out_per_s)),
    h("td", {}, timeBar(v)),
    h("td", { class: "num" }, clock(v.watermark)),
    h("td", { class: "num" }, v.queued),
    h("td", {}, sparkline(trends.get(job + "/" + v.vertex)))));
  const taskRows = j.subtasks.map((t) => h("tr", { "data-task": t.task },
    h("td", {}, t.task),
    h("td", {}, badge(t.state)),
    h("td", {}, t.node_ip || ""),
    h("td", { class: "num" }, count(t.records_in)),
    h("td", { class: "num" }, count(t.records_out)),
    h("td", { class: "num" }, rate(t.in_per_s)),
    h("td", { class: "num" }, rate(t.out_per_s)),
    h("td", {}, timeBar(t)),
    h("td", { class: "num" }, clock(t.watermark)),
    h("td", { class: "num" }, t.queued ?? "–")));
  view.replaceChildren(
    ...jobHeader(job, j, "overview"),
    graph,
    h("h2", {}, "Vertices"),
    h("table", { id: "vertices" },
      h("thead", {}, h("tr", {}, ["Vertex", "Running", "Records in", "Records out", "Busy / backpressured / idle", "Watermark", "Queued input", "Records in, last minute"].map((c) => h("th", {}, c)))),
      h("tbody", {}, vertexRows)),
    h("h2", {}, "Subtasks"),
    h("table", { id: "tasks" },
      h("thead", {}, h("tr", {}, ["Task", "State", "Node", "Records in", "Records out", "In", "Out", "Busy / backpressured / idle", "Watermark", "Queued"].map((c) => h("th", {}, c)))),
      h("tbody", {}, taskRows)));
  return j;
}

async function showCheckpoints(view, job) {
  const [j, rows] = await Promise.all([api("/jobs/" + encodeURIComponent(job)), api("/jobs/" + encodeURIComponent(job) + "/checkpoints")]);
  const body = rows.map((c) =>
    h("tr", { "data-checkpoint": c.checkpoint_id },
      h("td", { class: "num" }, c.checkpoint_id),
      h("td", {}, c.kind),
      h("td", {}, badge(c.status)),
      h("td", { class: "num" }, clock(c.started_ms)),
      h("td", { class: "num" }, ms(c.duration_ms)),
      h("td", { class: "num written" }, bytes(c.size_bytes)),
      h("td", { class: "num" }, bytes(c.full_size_bytes)),
      h("td", { class: "acks" }, Object.entries(c.subtasks || {}).map(([task, a]) =>
        h("div", { "data-task": task }, `${task}: ${ms(a.ack_ms)}, aligned in ${ms(a.alignment_ms || 0)}, ${bytes(a.size_bytes)}`))),
      h("td", { class: "detail" }, c.reason || c.location)));
  view.replaceChildren(
    ...jobHeader(job, j, "checkpoints"),
    rows.length
      ? h("table", { id: "checkpoints" },
          h("thead", {}, h("tr", {}, ["ID", "Kind", "Status", "Triggered", "Trigger to last ack", "Written", "Named", "Per subtask: trigger to ack, alignment, written", "Location or reason"].map((c) => h("th", {}, c)))),
          h("tbody", {}, body))
      : h("p", { class: "muted" }, "No checkpoint yet."));
  return j;
}

async function showExceptions(view, job) {
  const [j, rows] = await Promise.all([api("/jobs/" + encodeURIComponent(job)), api("/jobs/" + encodeURIComponent(job) + "/exceptions")]);
  const body = rows.map((e) => h("tr", {},
    h("td", { class: "num" }, clock(e.at * 1000)),
    h("td", {}, e.task || "(the job)"),
    h("td", { class: "num" }, e.attempt ?? "–"),
    h("td", {}, e.exception),
    h("td", {}, h("pre", {}, e.message))));
  view.replaceChildren(
    ...jobHeader(job, j, "exceptions"),
    rows.length
      ? h("table", { id: "exceptions" },
          h("thead", {}, h("tr", {}, ["Time", "Task", "Attempt", "Exception", "Message"].map((c) => h("th", {}, c)))),
          h("tbody", {}, body))
      : h("p", { class: "muted" }, "No failures: the job has not restarted."));
  return j;
}

// ---------------------------------------------------------------- actions
// The CLI's commands and their help, with the same answers and errors (weir/actors/control.py).
const ACTIONS = {
  savepoint: {
    title: "Take a savepoint",
    text: "Take a savepoint; the job goes on. The answer is where it is.",
    fields: () => [field("path", "Folder or pyarrow.fs URI (empty: savepoints/ beside the job's checkpoint runs)")],
    body: (form) => ({ path: form.path.value || null }),
    busy: "Taking a savepoint…",
  },
  stop: {
    title: "Stop the job with a savepoint",
    text: "The job ends SUSPENDED (resume it with weir run --from-savepoint), or FINISHED when drained: its input ends, everything fires and finishes.",
    fields: () => [field("savepoint_path", "Folder or pyarrow.fs URI (empty: a final retained checkpoint)"), checkbox("drain", "Drain: end the input instead of suspending")],
    body: (form) => ({ savepoint_path: form.savepoint_path.value || null, drain: form.drain.checked }),
    busy: "Stopping…",
  },
  cancel: {
    title: "Cancel the job",
    text: "End the job now: operators only close, nothing is flushed. Output since the last checkpoint is not committed.",
    fields: () => [],
    body: () => ({}),
    busy: "Cancelling…",
  },
  rescale: {
    title: "Rescale the job",
    text: "Change operators' parallelism while the job runs; the answer is the pause in seconds.",
    fields: (j) => Object.entries(j.info.parallelism).map(([v, p]) =>
      h("label", {}, v, h("input", { type: "number", min: 1, name: "p:" + v, value: p, required: true }))),
    body: (form, j) => ({
      parallelism: Object.fromEntries(Object.entries(j.info.parallelism)
        .map(([v, p]) => [v, Number(form["p:" + v].value)]).filter(([v, n]) => n !== j.info.parallelism[v])),
    }),
    busy: "Rescaling…",
  },
};
function field(name, label) {
  return h("label", {}, label, h("input", { type: "text", name, autocomplete: "off" }));
}
function checkbox(name, label) {
  return h("label", { class: "check" }, h("input", { type: "checkbox", name }), label);
}

function confirmAction(job, action, j) {
  const a = ACTIONS[action];
  const dialog = document.getElementById("confirm");
  document.getElementById("confirm-title").textContent = `${a.title}: ${job}`;
  document.getElementById("confirm-text").textContent = a.text;
  document.getElementById("confirm-fields").replaceChildren(...a.fields(j));
  dialog.returnValue = "";
  dialog.onclose = async () => {
    if (dialog.returnValue !== "ok") return;
    const form = dialog.querySelector("form").elements;
    notice(a.busy, "busy");
    try {
      const answer = await api(`/jobs/${encodeURIComponent(job)}/${action}`, {
        method: "POST",
        headers: { "Content-Type": "application/json" },
        body: JSON.stringify(a.body(form, j)),
      });
      notice(Object.entries(answer).map(([k, v]) => `${k}: ${typeof v === "object" ? JSON.stringify(v) : v}`).join("   "), "ok");
    } catch (e) {
      notice("Error: " + e.message, "error"); // as the CLI prints it
    }
    refresh();
  };
  dialog.showModal();
}

function notice(text, kind) {
  const el = document.getElementById("notice");
  el.textContent = text;
  el.className = kind;
  el.hidden = false;
}

// ---------------------------------------------------------------- the loop
async function refresh() {
  clearTimeout(timer);
  const r = route();
  const view = document.getElementById("view");
  crumbs(r);
  try {
    if (r.view === "jobs") await showJobs(view);
    else if (r.view === "checkpoints") await showCheckpoints(view, r.job);
    else if (r.view === "exceptions") await showExceptions(view, r.job);
    else await showOverview(view, r.job);
    document.getElementById("refreshed").textContent = "updated " + new Date().toLocaleTimeString("en-GB");
  } catch (e) {
    view.replaceChildren(h("p", { class: "error" }, "Error: " + e.message));
  }
  if (!document.hidden) timer = setTimeout(refresh, POLL_MS);
}

window.addEventListener("hashchange", () => { graphKey = null; document.getElementById("notice").hidden = true; refresh(); });
document.addEventListener("visibilitychange", () => { if (!document.hidden) refresh(); });
refresh();
