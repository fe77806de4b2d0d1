// tinyhybrid VIZ: the kernel list with its rewrite calls, the selected step's graph (laid out by Graphviz on the
// server), node details, the kernel's source, and the profiler's timeline. No libraries, nothing fetched from outside.
"use strict";

const $ = (sel) => document.querySelector(sel);
const el = (tag, attrs = {}, ...kids) => {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs)) {
    if (k === "class") e.className = v;
    else if (k.startsWith("on")) e.addEventListener(k.slice(2), v);
    else e.setAttribute(k, v);
  }
  for (const kid of kids) e.append(kid);
  return e;
};
const SVGNS = "http://www.w3.org/2000/svg";
const svgEl = (tag, attrs = {}) => {
  const e = document.createElementNS(SVGNS, tag);
  for (const [k, v] of Object.entries(attrs)) e.setAttribute(k, v);
  return e;
};
const api = async (path) => {
  const r = await fetch(path);
  const j = await r.json();
  if (!r.ok) throw new Error(j.error || r.statusText);
  return j;
};

const state = { session: null, flat: [], group: -1, call: -1, step: 0, steps: 0, request: 0, sources: {} };

// ---------------------------------------------------------------- the kernel list

function renderList() {
  const ul = $("#kernels");
  ul.replaceChildren();
  state.flat = [];  // every listed call in order, for ↑/↓ across groups
  for (const g of state.session.groups) {
    for (const c of g.calls) state.flat.push([g.i, c[0]]);
    const head = el("div", { class: "group-head", onclick: () => selectGroup(g.i) },
      el("span", { class: "kind" }, g.kind), el("span", { class: "name", title: g.name }, g.name || "(unnamed)"),
      el("span", { class: "count" }, String(g.calls.length)));
    ul.append(el("li", { class: "group", id: `group-${g.i}`, "data-group": g.i }, head));
  }
  $("#status").textContent = `${state.session.groups.filter((g) => g.kind === "kernel").length} kernels, ` +
    `${state.flat.length} rewrites that changed something`;
}

function renderCalls(gi) {
  for (const open of document.querySelectorAll(".calls, .quiet")) open.remove();
  const g = state.session.groups[gi];
  const li = $(`#group-${gi}`);
  const ul = el("ul", { class: "calls" });
  for (const [ci, name, nsteps, depth, stage, failed] of g.calls) {
    const cls = "call" + (stage ? " stage" : "") + (failed ? " failed" : "");
    ul.append(el("li", { class: cls, id: `call-${gi}-${ci}`, style: `padding-left:${22 + 12 * depth}px`, onclick: () => selectCall(gi, ci, 0) },
      `${name} `, el("span", { class: "n" }, stage ? "(stage)" : failed ? "(raised)" : `${nsteps} step${nsteps === 1 ? "" : "s"}`)));
  }
  li.append(ul);
  if (g.quiet) li.append(el("div", { class: "quiet" }, `${g.quiet} more rewrite${g.quiet === 1 ? "" : "s"} changed nothing`));
}

async function selectGroup(gi, callIndex) {
  if (state.group !== gi) {
    document.querySelectorAll(".group.selected").forEach((e) => e.classList.remove("selected"));
    $(`#group-${gi}`).classList.add("selected");
    state.group = gi;
    renderCalls(gi);
    showSource(gi);
  }
  const calls = state.session.groups[gi].calls;
  if (calls.length) await selectCall(gi, callIndex === undefined ? calls[0][0] : callIndex, 0);
  else {
    state.call = -1;
    $("#graph").replaceChildren(el("div", { class: "message" }, "No rewrite in this group changed anything."));
  }
}

async function showSource(gi) {
  const g = state.session.groups[gi];
  $("#source-title").textContent = g.has_source ? `source of ${g.name}` : "source";
  if (!g.has_source) { $("#source").textContent = ""; return; }
  if (!(gi in state.sources)) state.sources[gi] = (await api(`/api/source?g=${gi}`)).text;
  if (state.group !== gi) return;
  const pre = $("#source");
  pre.textContent = state.sources[gi];
  // past the shared preamble (type definitions, helpers), to the kernel itself
  const at = state.sources[gi].search(new RegExp(`\\b${g.name.replace(/[^\w]/g, "")}\\s*\\(`));
  const line = at < 0 ? 0 : state.sources[gi].slice(0, at).split("\n").length - 1;
  pre.scrollTop = line * 15.4;
}

// ---------------------------------------------------------------- one step's graph

async function selectCall(gi, ci, k) {
  if (state.group !== gi) { await selectGroup(gi, ci); if (k === 0) return; }
  document.querySelectorAll(".call.selected").forEach((e) => e.classList.remove("selected"));
  const item = $(`#call-${gi}-${ci}`);
  if (item) { item.classList.add("selected"); item.scrollIntoView({ block: "nearest" }); }
  state.call = ci;
  await showStep(k);
}

async function showStep(k) {
  const req = ++state.request;
  const { group: gi, call: ci } = state;
  $("#step-title").textContent = "…";
  let d;
  try { d = await api(`/api/step?g=${gi}&c=${ci}&k=${k}`); }
  catch (e) { $("#graph").replaceChildren(el("div", { class: "message error" }, String(e))); return; }
  if (req !== state.request) return;  // a later selection won
  state.step = d.step;
  state.steps = d.steps;
  state.info = d.info || {};
  $("#step-title").textContent = `${d.name}: ${d.step === 0 ? "input" : `step ${d.step}`} of ${d.steps}`;
  const rule = $("#rule");
  rule.replaceChildren();
  if (d.rule) {
    rule.append(el("b", {}, d.rule.name), `  ${d.rule.location}`);
    if (d.rule.code) rule.append("  ", el("code", {}, d.rule.code));
  } else rule.append(d.steps ? "the graph before any rule fired (→ steps through them)" : "");
  const graph = $("#graph");
  if (d.summary) return showSummary(graph, d.summary);
  if (d.error) { graph.replaceChildren(el("div", { class: "message error" }, d.error)); return; }
  graph.innerHTML = d.svg;
  const svg = graph.querySelector("svg");
  svg.setAttribute("data-nodes", String(d.nodes));
  svg.removeAttribute("width");
  svg.removeAttribute("height");
  for (const node of svg.querySelectorAll("g.node")) node.addEventListener("click", (ev) => { ev.stopPropagation(); pickNode(node.id.slice(1)); });
  enablePanZoom(graph, svg, d.step ? d.focus ?? d.changed[0] : null);
  $("#node-info").replaceChildren(el("div", { class: "hint" },
    `${d.nodes} nodes${d.changed.length && d.step ? `, ${d.changed.length} changed (orange; the rule's result in red)` : ""}. ` +
    "Click a node for its arg, dtype and sources; drag to pan, wheel to zoom, double-click to fit."));
}

function showSummary(graph, s) {
  const rows = s.ops.map(([op, n]) => el("tr", {}, el("td", {}, op), el("td", {}, String(n))));
  graph.replaceChildren(el("div", { class: "message summary" },
    el("b", {}, `This graph has ${s.nodes.toLocaleString()} nodes`),
    ` — more than the ${s.limit} that are drawn (VIZ_MAX_NODES), so here is what it is made of. Its root is ${s.root.op} (${s.root.dtype}).`,
    el("table", {}, ...rows)));
}

function pickNode(id) {
  const x = state.info[id];
  if (!x) return;
  document.querySelectorAll("#graph .node.picked").forEach((e) => e.classList.remove("picked"));
  const g = document.getElementById(`n${id}`);
  if (g) g.classList.add("picked");
  const srcs = el("td", {});
  x.src.forEach((s, i) => srcs.append(el("a", { onclick: () => pickNode(String(s)), title: state.info[s] ? state.info[s].op : "" }, `${i}: n${s}`)));
  const row = (k, v) => el("tr", {}, el("td", {}, k), typeof v === "string" ? el("td", {}, v) : v);
  $("#node-info").replaceChildren(el("table", { id: "node-table" },
    row("node", `n${id}`), row("op", x.op), row("dtype", x.dtype), row("arg", x.arg || "None"), row("src", srcs),
    ...(x.tag ? [row("tag", x.tag)] : [])));
}

// pan by dragging, zoom with the wheel, on the SVG's viewBox; double-click fits the whole graph
function enablePanZoom(box, svg, focusId) {
  const vb = svg.viewBox.baseVal;
  if (!vb || !vb.width) return;
  const full = { x: vb.x, y: vb.y, w: vb.width, h: vb.height };
  // the whole graph when it fits at a readable scale (down to 40%); a bigger one at the drawing's own scale (a unit
  // per pixel), around the rule's result or else at the top
  const r0 = box.getBoundingClientRect(), fit = Math.max(full.w / r0.width, full.h / r0.height, 1);
  if (fit <= 2.5) setBox(svg, full.x + full.w / 2 - r0.width * fit / 2, full.y + full.h / 2 - r0.height * fit / 2, r0.width * fit, r0.height * fit);
  else {
    const c = nodeCenter(svg, focusId);
    setBox(svg, (c ? c.x : full.x + full.w / 2) - r0.width / 2, (c ? c.y : full.y + r0.height / 2) - r0.height / 2, r0.width, r0.height);
  }
  let drag = null;
  box.onmousedown = (e) => { drag = { x: e.clientX, y: e.clientY, vx: svg.viewBox.baseVal.x, vy: svg.viewBox.baseVal.y }; box.style.cursor = "grabbing"; };
  window.onmouseup = () => { drag = null; box.style.cursor = ""; };
  box.onmousemove = (e) => {
    if (!drag) return;
    const v = svg.viewBox.baseVal, r = box.getBoundingClientRect(), s = Math.max(v.width / r.width, v.height / r.height);
    setBox(svg, drag.vx - (e.clientX - drag.x) * s, drag.vy - (e.clientY - drag.y) * s, v.width, v.height);
  };
  box.onwheel = (e) => {
    e.preventDefault();
    const v = svg.viewBox.baseVal, r = box.getBoundingClientRect();
    const f = Math.exp(e.deltaY * 0.0015), s = Math.max(v.width / r.width, v.height / r.height);
    const px = v.x + (e.clientX - r.left) * s, py = v.y + (e.clientY - r.top) * s;
    setBox(svg, px - (px - v.x) * f, py - (py - v.y) * f, v.width * f, v.height * f);
  };
  box.ondblclick = () => {
    const r = box.getBoundingClientRect(), s = Math.max(full.w / r.width, full.h / r.height, 1e-9);
    setBox(svg, full.x + full.w / 2 - r.width * s / 2, full.y + full.h / 2 - r.height * s / 2, r.width * s, r.height * s);
  };
}
function setBox(svg, x, y, w, h) { svg.setAttribute("viewBox", `${x} ${y} ${w} ${h}`); }

// a node's center in the SVG's viewBox units: Graphviz draws inside one transformed group
function nodeCenter(svg, id) {
  if (id === undefined || id === null) return null;
  const node = svg.querySelector(`#n${id}`), top = svg.querySelector("g.graph");
  if (!node || !top) return null;
  const b = node.getBBox(), m = top.transform.baseVal.consolidate();
  const p = svg.createSVGPoint();
  p.x = b.x + b.width / 2; p.y = b.y + b.height / 2;
  return m ? p.matrixTransform(m.matrix) : p;
}

// ---------------------------------------------------------------- keyboard

function moveCall(delta) {
  const i = state.flat.findIndex(([g, c]) => g === state.group && c === state.call);
  const j = Math.max(0, Math.min(state.flat.length - 1, (i < 0 ? -1 : i) + delta));
  if (state.flat[j]) selectCall(state.flat[j][0], state.flat[j][1], 0);
}
function moveGroup(delta) {
  const gs = state.session.groups.filter((g) => g.calls.length);
  const i = gs.findIndex((g) => g.i === state.group);
  const j = Math.max(0, Math.min(gs.length - 1, i + delta));
  if (gs[j]) selectGroup(gs[j].i);
}
document.addEventListener("keydown", (e) => {
  if (e.target.tagName === "INPUT" || $("#view-rewrites").classList.contains("hidden")) return;
  const keys = {
    ArrowRight: () => state.call >= 0 && state.step < state.steps && showStep(state.step + 1),
    ArrowLeft: () => state.call >= 0 && state.step > 0 && showStep(state.step - 1),
    End: () => state.call >= 0 && showStep(state.steps), Home: () => state.call >= 0 && showStep(0),
    ArrowDown: () => moveCall(1), ArrowUp: () => moveCall(-1),
    PageDown: () => moveGroup(1), PageUp: () => moveGroup(-1),
  };
  if (keys[e.key]) { e.preventDefault(); keys[e.key](); }
});
$("#next-step").onclick = () => state.step < state.steps && showStep(state.step + 1);
$("#prev-step").onclick = () => state.step > 0 && showStep(state.step - 1);

// ---------------------------------------------------------------- the profiler's timeline

const TL = { data: null, start: 0, end: 1, width: 1000 };
const TRACK_H = 22, MEM_H = 60, LABEL_W = 170, AXIS_H = 18, DENSE = 3000;

async function showProfiler() {
  if (!TL.data) {
    try { TL.data = await api("/api/profile"); }
    catch (e) { $("#timeline").replaceChildren(el("div", { class: "message error" }, String(e))); return; }
    TL.start = 0;
    TL.end = Math.max(TL.data.duration_us, 1e-3);
    enableTimelineZoom();
  }
  drawTimeline();
}

function drawTimeline() {
  const d = TL.data, box = $("#timeline");
  const nspans = d.tracks.reduce((a, t) => a + t.spans.length, 0);
  box.replaceChildren(el("div", { class: "message" }, `drawing ${nspans} spans…`));
  $("#timeline-info").textContent = `${d.tracks.length} queue track${d.tracks.length === 1 ? "" : "s"}, ${nspans} spans, ` +
    `${fmtUs(d.duration_us)}` + (d.dropped ? `, ${d.dropped} spans that ended before they started left out` : "");
  if (!d.tracks.length && !Object.keys(d.memory).length) {
    box.replaceChildren(el("div", { class: "message" }, "Nothing was profiled: run with PROFILE=1 (VIZ=1 turns it on) and realize something."));
    return;
  }
  TL.width = Math.max(400, box.clientWidth - 4);
  const plotW = TL.width - LABEL_W, scale = plotW / (TL.end - TL.start);
  const x = (t) => LABEL_W + (t - TL.start) * scale;
  const devices = Object.keys(d.memory);
  const height = AXIS_H + d.tracks.length * (TRACK_H + 6) + devices.length * (MEM_H + 10) + 10;
  const svg = svgEl("svg", { width: TL.width, height, id: "timeline-svg" });
  // axis: ticks at a round step
  const stepUs = niceStep((TL.end - TL.start) / 8);
  for (let t = Math.ceil(TL.start / stepUs) * stepUs; t <= TL.end; t += stepUs) {
    svg.append(svgEl("line", { x1: x(t), x2: x(t), y1: AXIS_H - 4, y2: height, stroke: "#eee" }));
    const lab = svgEl("text", { x: x(t) + 2, y: 11, class: "axis" }); lab.textContent = fmtUs(t); svg.append(lab);
  }
  let y = AXIS_H;
  for (const tr of d.tracks) {
    const lab = svgEl("text", { x: 4, y: y + 15, class: "track-label" }); lab.textContent = `${tr.device} ${tr.queue}`; svg.append(lab);
    // a span inside another (a kernel inside a TinyJit replay) is drawn as a thinner bar over it. With more than
    // DENSE spans in view, the ones under 2 px are drawn as one bar per run of covered pixels (zoom in to see them)
    const stack = [], inView = tr.spans.filter(([, , s, dur]) => s + dur >= TL.start && s <= TL.end).length;
    const cover = inView > DENSE ? new Uint32Array(Math.ceil(plotW) + 2) : null;
    for (const [name, kind, s, dur] of tr.spans) {
      while (stack.length && stack[stack.length - 1] <= s) stack.pop();
      const level = Math.min(stack.length, 3);
      stack.push(s + dur);
      if (s + dur < TL.start || s > TL.end) continue;
      const x0 = x(s), w = Math.max(dur * scale, 1), inset = level * 3;
      if (cover && w < 2) {
        for (let p = Math.max(0, Math.floor(x0 - LABEL_W)); p <= Math.min(cover.length - 1, Math.floor(x0 - LABEL_W + w)); p++) cover[p]++;
        continue;
      }
      const r = svgEl("rect", { x: x0, y: y + inset, width: w, height: TRACK_H - 2 * inset, class: `span ${kind}`, "data-name": name, "data-kind": kind });
      const title = svgEl("title"); title.textContent = `${name} (${kind})\n${fmtUs(dur)} at ${fmtUs(s)}`; r.append(title);
      svg.append(r);
      if (w > 50) {
        const t = svgEl("text", { x: x0 + 3, y: y + 15, class: "span-label" });
        t.textContent = name.length * 6 > w ? name.slice(0, Math.max(1, Math.floor(w / 6) - 1)) + "…" : name;
        svg.append(t);
      }
    }
    if (cover) {
      for (let p = 0; p < cover.length; p++) {
        if (!cover[p]) continue;
        let q = p, n = 0;
        while (q < cover.length && cover[q]) n += cover[q++];
        const r = svgEl("rect", { x: LABEL_W + p, y, width: q - p, height: TRACK_H, class: "span dense" });
        const title = svgEl("title"); title.textContent = `${n} spans: zoom in to see each`; r.append(title);
        svg.append(r);
        p = q;
      }
    }
    y += TRACK_H + 6;
  }
  for (const dev of devices) {
    const pts = d.memory[dev], peak = Math.max(1, ...pts.map((p) => p[1]));
    const lab = svgEl("text", { x: 4, y: y + 14, class: "track-label" }); lab.textContent = `${dev} memory`; svg.append(lab);
    const lab2 = svgEl("text", { x: 4, y: y + 28, class: "axis" }); lab2.textContent = `peak ${fmtBytes(peak)}`; svg.append(lab2);
    const yOf = (b) => y + MEM_H - (b / peak) * (MEM_H - 4);
    let path = `M${LABEL_W},${y + MEM_H}`, last = 0;
    for (const [t, b] of pts) {
      const px = Math.min(Math.max(x(t), LABEL_W), TL.width);
      path += ` L${px},${yOf(last)} L${px},${yOf(b)}`;
      last = b;
    }
    path += ` L${TL.width},${yOf(last)} L${TL.width},${y + MEM_H} Z`;
    svg.append(svgEl("path", { d: path, class: "mem", "data-device": dev }));
    y += MEM_H + 10;
  }
  box.replaceChildren(svg);
}

function enableTimelineZoom() {
  const box = $("#timeline");
  let drag = null;
  box.onwheel = (e) => {
    e.preventDefault();
    const r = box.getBoundingClientRect(), plotW = TL.width - LABEL_W;
    const at = TL.start + Math.max(0, e.clientX - r.left - LABEL_W) / plotW * (TL.end - TL.start);
    const f = Math.exp(e.deltaY * 0.002);
    const span = Math.max((TL.end - TL.start) * f, 1e-3);
    TL.start = at - (at - TL.start) * f;
    TL.end = TL.start + span;
    drawTimeline();
  };
  box.onmousedown = (e) => { drag = { x: e.clientX, s: TL.start, e: TL.end }; };
  window.addEventListener("mouseup", () => { drag = null; });
  box.onmousemove = (e) => {
    if (!drag) return;
    const dt = (e.clientX - drag.x) / (TL.width - LABEL_W) * (drag.e - drag.s);
    TL.start = drag.s - dt; TL.end = drag.e - dt;
    drawTimeline();
  };
  $("#timeline-reset").onclick = () => { TL.start = 0; TL.end = Math.max(TL.data.duration_us, 1e-3); drawTimeline(); };
}

function niceStep(x) { const p = Math.pow(10, Math.floor(Math.log10(x || 1))); return [1, 2, 5, 10].map((m) => m * p).find((s) => s >= x) || p * 10; }
function fmtUs(us) { return us >= 1e6 ? `${(us / 1e6).toFixed(2)} s` : us >= 1e3 ? `${(us / 1e3).toFixed(2)} ms` : `${us.toFixed(us < 10 ? 2 : 0)} µs`; }
function fmtBytes(b) { return b >= 1 << 30 ? `${(b / (1 << 30)).toFixed(2)} GiB` : b >= 1 << 20 ? `${(b / (1 << 20)).toFixed(1)} MiB` : b >= 1024 ? `${(b / 1024).toFixed(1)} KiB` : `${b} B`; }

// ---------------------------------------------------------------- tabs and start

function showView(name) {
  for (const v of ["rewrites", "profiler"]) {
    $(`#view-${v}`).classList.toggle("hidden", v !== name);
    $(`#tab-${v}`).classList.toggle("active", v === name);
  }
  if (name === "profiler") showProfiler();
}
for (const t of document.querySelectorAll(".tab")) t.onclick = () => showView(t.dataset.view);
window.addEventListener("hashchange", () => showView(location.hash === "#profiler" ? "profiler" : "rewrites"));

async function main() {
  try { state.session = await api("/api/session"); }
  catch (e) { $("#graph").replaceChildren(el("div", { class: "message error" }, `could not load the session: ${e}`)); return; }
  renderList();
  if (!state.session.graphviz) $("#graph").replaceChildren(el("div", { class: "message error" }, state.session.graphviz_missing));
  const gs = state.session.groups;
  const first = gs.find((g) => g.kind === "kernel" && g.calls.length) || gs.find((g) => g.calls.length);
  if (location.hash === "#profiler" || (!first && state.session.profile)) showView("profiler");
  else if (first) await selectGroup(first.i);
  else $("#graph").replaceChildren(el("div", { class: "message" }, "Nothing was recorded: run a program with VIZ=1."));
  document.body.setAttribute("data-ready", "1");
}
main();
