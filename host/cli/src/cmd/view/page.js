// ragen-gym view: draws the run held in the JSON block #run-data. Every text from the run goes
// into the page through textContent; nothing is parsed as markup. State (filters, the episode
// shown) lives in the URL's hash, so a link or a headless browser opens the same view.
"use strict";
const DATA = JSON.parse(document.getElementById("run-data").textContent);
const EPISODES = DATA.episodes;
const SVG = "http://www.w3.org/2000/svg";

function el(tag, cls, text) {
  const e = document.createElement(tag);
  if (cls) e.className = cls;
  if (text !== undefined && text !== null) e.textContent = String(text);
  return e;
}

function svg(tag, attrs) {
  const e = document.createElementNS(SVG, tag);
  for (const k in attrs) e.setAttribute(k, attrs[k]);
  return e;
}

function fmt(x, places) {
  return typeof x === "number" ? x.toFixed(places === undefined ? 2 : places) : "";
}

// --- state in the hash: #iteration=3&outcome=failure&filter=kept&ep=12 ---
function readState() {
  const q = new URLSearchParams(location.hash.replace(/^#/, ""));
  return {
    iteration: q.get("iteration") || "all",
    outcome: q.get("outcome") || "all",
    filter: q.get("filter") || "all",
    ep: q.has("ep") ? Number(q.get("ep")) : DATA.initial,
  };
}

function writeState(s) {
  const q = new URLSearchParams();
  if (s.iteration !== "all") q.set("iteration", s.iteration);
  if (s.outcome !== "all") q.set("outcome", s.outcome);
  if (s.filter !== "all") q.set("filter", s.filter);
  if (s.ep !== null && s.ep !== undefined) q.set("ep", String(s.ep));
  location.hash = q.toString();
}

function passes(e, s) {
  if (s.iteration !== "all" && String(e.iteration) !== s.iteration) return false;
  if (s.outcome === "success" && !e.success) return false;
  if (s.outcome === "failure" && e.success) return false;
  if (s.filter === "kept" && e.kept !== true) return false;
  if (s.filter === "dropped" && e.kept !== false) return false;
  return true;
}

// --- header ---
function fact(dl, name, value) {
  if (value === undefined || value === null || value === "") return;
  dl.append(el("dt", null, name), el("dd", null, value));
}

function curve(lines) {
  const W = 520, H = 180, L = 40, R = 10, T = 10, B = 30;
  const box = svg("svg", { width: W, height: H, viewBox: `0 0 ${W} ${H}`, id: "curve", role: "img" });
  let xmax = 1;
  for (const c of lines) for (const p of c.points) xmax = Math.max(xmax, p[0]);
  const x = (v) => L + (v / xmax) * (W - L - R);
  const y = (v) => T + (1 - Math.min(1, Math.max(0, v))) * (H - T - B);
  box.append(svg("line", { x1: L, y1: y(0), x2: W - R, y2: y(0), class: "axis" }));
  box.append(svg("line", { x1: L, y1: y(0), x2: L, y2: y(1), class: "axis" }));
  for (const v of [0, 0.5, 1]) {
    const t = svg("text", { x: L - 6, y: y(v) + 4, "text-anchor": "end", class: "tick" });
    t.textContent = fmt(v, 1);
    box.append(t);
  }
  const xl = svg("text", { x: (L + W - R) / 2, y: H - 4, "text-anchor": "middle", class: "tick" });
  xl.textContent = `iteration (0 to ${xmax})`;
  box.append(xl);
  lines.forEach((c, i) => {
    const cls = `series s${i % 6}`;
    box.append(svg("polyline", { points: c.points.map((p) => `${x(p[0])},${y(p[1])}`).join(" "), class: cls }));
    for (const p of c.points) {
      if (p[2] !== null && p[2] !== undefined)
        box.append(svg("line", { x1: x(p[0]), x2: x(p[0]), y1: y(p[1] - p[2]), y2: y(p[1] + p[2]), class: cls }));
      const dot = svg("circle", { cx: x(p[0]), cy: y(p[1]), r: 3, class: `${cls} dot` });
      const tip = svg("title", {});
      tip.textContent = `${c.name} iteration ${p[0]}: ${fmt(p[1], 3)}` + (p[2] == null ? "" : ` ± ${fmt(p[2], 3)}`);
      dot.append(tip);
      box.append(dot);
    }
    const label = svg("text", { x: L + 8, y: T + 14 + 14 * i, class: `label s${i % 6}` });
    label.textContent = c.name;
    box.append(label);
  });
  return box;
}

function legend(entries) {
  const ul = el("ul", "legend");
  for (const e of entries) {
    const li = el("li");
    li.append(el("span", `cell ${e.class}`, e.symbol), el("span", null, e.meaning));
    ul.append(li);
  }
  return ul;
}

function header() {
  const h = DATA.header;
  const top = el("header");
  top.append(el("h1", null, "ragen-gym view"));
  const dl = el("dl", "facts");
  fact(dl, "run", h.run);
  fact(dl, "env", h.env);
  fact(dl, "model", h.model);
  fact(dl, "config sha256", h.config_sha256);
  for (const p of h.plugins) fact(dl, `${p.role} plugin`, `${p.reference} (${p.id} ${p.version}) ${p.digest}`);
  fact(dl, "iterations", h.iterations);
  fact(dl, "trajectories", `${h.logged} logged in ${h.source}, ${EPISODES.length} on this page`);
  top.append(dl);
  if (h.curves.length) {
    const fig = el("figure");
    fig.append(curve(h.curves), el("figcaption", null, "success rate per iteration (± 1 s.e. where logged), as ragen-gym plot"));
    top.append(fig);
  }
  if (h.legend.length) top.append(legend(h.legend));
  for (const n of h.notes) top.append(el("p", "note", n));
  return top;
}

// --- controls ---
function select(id, label, options) {
  const wrap = el("label", null, label + " ");
  const s = el("select");
  s.id = id;
  for (const [value, text] of options) {
    const o = el("option", null, text);
    o.value = value;
    s.append(o);
  }
  wrap.append(s);
  return [wrap, s];
}

function controls() {
  const bar = el("nav", "controls");
  const its = [...new Set(EPISODES.map((e) => e.iteration))].sort((a, b) => a - b);
  const parts = [
    select("f-iteration", "iteration", [["all", "all"], ...its.map((i) => [String(i), String(i)])]),
    select("f-outcome", "outcome", [["all", "all"], ["success", "success"], ["failure", "failure"]]),
    select("f-filter", "StarPO-S filter", [["all", "all"], ["kept", "kept"], ["dropped", "dropped"]]),
  ];
  for (const [wrap, s] of parts) {
    bar.append(wrap);
    s.addEventListener("change", () => {
      const st = readState();
      st[s.id.slice(2)] = s.value;
      writeState(st);
    });
  }
  bar.append(el("span", "count", ""), el("span", "keys", "j / k or arrows: next / previous episode"));
  bar.querySelector(".count").id = "count";
  return bar;
}

// --- an episode ---
function board(obs, cls) {
  const box = el("div", `obs ${cls || ""}`);
  if (obs.text) box.append(el("pre", "obs-text", obs.text));
  if (obs.grid) {
    const byChar = {};
    for (const e of DATA.header.legend) byChar[e.symbol] = e;
    const table = el("table", "grid");
    obs.grid.forEach((row, r) => {
      const tr = el("tr");
      [...row].forEach((ch, c) => {
        const e = byChar[ch];
        const td = el("td", `cell ${e ? e.class : "c-unknown"}`, ch);
        td.dataset.row = r;
        td.dataset.col = c;
        td.title = `${e ? e.meaning : "?"} (${r}, ${c})`;
        tr.append(td);
      });
      table.append(tr);
    });
    box.append(table);
  }
  if (obs.after) box.append(el("pre", "obs-text", obs.after));
  return box;
}

function badge(text, cls) {
  return el("span", `badge ${cls}`, text);
}

function turn(t, i) {
  const sec = el("section", "turn");
  const h = el("h3", null, `turn ${i + 1}`);
  h.append(badge(`reward ${fmt(t.reward)}`, "reward"));
  if (!t.valid) h.append(badge("invalid action", "bad"));
  if (t.penalised) h.append(badge("format penalty", "bad"));
  h.append(badge(`${t.actions_left} actions left`, "muted"));
  sec.append(h, board(t.obs));
  const pre = el("pre", "response");
  for (const [kind, text] of t.parts) pre.append(kind === "text" ? document.createTextNode(text) : el("span", kind, text));
  sec.append(el("div", "label", "response"), pre);
  if (t.steps.length) {
    const table = el("table", "steps");
    const head = el("tr");
    const advised = t.steps.some((s) => s.expert);
    for (const c of ["step", "action", "reward", ...(advised ? ["expert"] : []), ""]) head.append(el("th", null, c));
    table.append(head);
    t.steps.forEach((s, k) => {
      const tr = el("tr", s.error ? "error" : s.effective ? "" : "noeffect");
      tr.append(el("td", null, k + 1), el("td", "action", s.action), el("td", "step-reward", s.error ? "" : fmt(s.reward)));
      if (advised) {
        const agrees = s.expert && s.expert.includes(s.action);
        tr.append(el("td", s.expert && !agrees ? "disagree" : null, s.expert ? s.expert.join(" / ") : ""));
      }
      tr.append(el("td", null, s.error ? s.error : s.effective ? "" : "no effect"));
      table.append(tr);
    });
    sec.append(table);
  }
  return sec;
}

function replayBox(r) {
  const box = el("section", r.identical ? "replay same" : "replay diverged");
  if (r.identical) {
    box.append(el("h3", null, "replay: identical to the record"));
    return box;
  }
  const where = r.turn == null ? "" : ` at turn ${r.turn + 1}` + (r.step == null ? "" : `, step ${r.step + 1}`);
  box.append(el("h3", null, `replay diverged${where}: ${r.field}`));
  const grid = el("div", "diff");
  grid.append(el("div", "label", "recorded"), el("div", "label", "replayed"), el("pre", null, r.recorded), el("pre", null, r.replayed));
  box.append(grid);
  return box;
}

function episodeView(e) {
  const art = el("article", `episode ${e.success ? "success" : "failure"}`);
  art.id = "episode";
  art.dataset.line = e.line;
  const h = el("h2", null, `trajectory ${e.line}: iteration ${e.iteration} (${e.split}), group ${e.group}, seed ${e.seed}`);
  art.append(h);
  const facts = el("p", "outcome");
  facts.append(badge(e.success ? "success" : "failure", e.success ? "good" : "bad"), badge(`score ${fmt(e.score)}`, "reward"),
    badge(`${e.num_actions} actions`, "muted"));
  if (e.penalty) facts.append(badge(`format penalty ${fmt(e.penalty)}`, "bad"));
  if (e.extra_reward) facts.append(badge(`reward functions ${fmt(e.extra_reward)}`, "muted"));
  if (e.group_std !== undefined) facts.append(badge(`in-group std ${fmt(e.group_std, 3)}`, "muted"));
  if (e.kept !== undefined) facts.append(badge(e.kept ? "kept by StarPO-S" : "dropped by StarPO-S", e.kept ? "good" : "muted"));
  if (e.end_reason) facts.append(badge(`ended: ${e.end_reason}`, "bad"));
  art.append(facts);
  if (e.replay) art.append(replayBox(e.replay));
  e.turns.forEach((t, i) => art.append(turn(t, i)));
  const fin = el("section", "turn final");
  fin.append(el("h3", null, "final state"), board(e.final, "final"));
  art.append(fin);
  return art;
}

// --- the list and navigation ---
function summary(e) {
  const k = e.kept === undefined ? "" : e.kept ? " · kept" : " · dropped";
  return `#${e.line} it ${e.iteration} · g ${e.group} · seed ${e.seed} · ${e.success ? "✓" : "✗"} ${fmt(e.score)}${k}`;
}

let shown = [];

function render() {
  const s = readState();
  for (const k of ["iteration", "outcome", "filter"]) document.getElementById(`f-${k}`).value = s[k];
  shown = EPISODES.filter((e) => passes(e, s));
  document.getElementById("count").textContent = `${shown.length} of ${EPISODES.length} episodes`;
  const list = document.getElementById("episodes");
  list.replaceChildren();
  let current = shown.find((e) => e.line === s.ep) || shown[0];
  for (const e of shown) {
    const li = el("li", `ep ${e.success ? "success" : "failure"}${e === current ? " current" : ""}`, summary(e));
    li.dataset.line = e.line;
    li.addEventListener("click", () => writeState({ ...readState(), ep: e.line }));
    list.append(li);
  }
  const main = document.getElementById("detail");
  main.replaceChildren(current ? episodeView(current) : el("p", "note", "No episode passes the filters."));
  const li = list.querySelector(".current");
  if (li && li.scrollIntoView) li.scrollIntoView({ block: "nearest" });
}

function step(delta) {
  const s = readState();
  if (!shown.length) return;
  let i = shown.findIndex((e) => e.line === s.ep);
  i = i < 0 ? 0 : Math.min(shown.length - 1, Math.max(0, i + delta));
  writeState({ ...s, ep: shown[i].line });
}

document.addEventListener("keydown", (ev) => {
  if (ev.target && ev.target.tagName === "SELECT") return;
  if (ev.key === "j" || ev.key === "ArrowDown" || ev.key === "ArrowRight") { step(1); ev.preventDefault(); }
  if (ev.key === "k" || ev.key === "ArrowUp" || ev.key === "ArrowLeft") { step(-1); ev.preventDefault(); }
});

document.body.append(header(), controls());
const layout = el("div", "layout");
const list = el("ol", "episodes");
list.id = "episodes";
const detail = el("main");
detail.id = "detail";
layout.append(list, detail);
document.body.append(layout);
window.addEventListener("hashchange", render);
render();
performance.mark("ragen-view-rendered");
document.body.dataset.rendered = "true";
