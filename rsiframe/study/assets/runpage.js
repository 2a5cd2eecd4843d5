// rsiframe report page: the lineage graph, a candidate's panel, the score curve.
// Written for this page (no library); everything from the run reaches the screen through
// textContent only, never as markup. Nothing is fetched.
(function () {
  "use strict";
  var DATA = JSON.parse(document.getElementById("run-data").textContent);
  var SVG = "http://www.w3.org/2000/svg";
  var COLORS = {
    admitted: "#2a9d4b", declined: "#e0a030", rejected: "#c0392b", abandoned: "#888",
    failed: "#8e44ad", evaluating: "#3b7dd8", certified: "#3b7dd8", mutated: "#aaa", proposed: "#ccc"
  };
  var byId = {};
  DATA.nodes.forEach(function (n) { byId[n.id] = n; });

  function el(tag, attrs, text) {
    var e = document.createElement(tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    if (text !== undefined && text !== null) e.textContent = String(text);
    return e;
  }
  function sv(tag, attrs) {
    var e = document.createElementNS(SVG, tag);
    Object.keys(attrs || {}).forEach(function (k) { e.setAttribute(k, attrs[k]); });
    return e;
  }
  function fmt(x) { return x === null || x === undefined ? "—" : Number(x).toFixed(3); }

  // -- layout: a column per generation, rows ordered by the parent's row --------------
  var DX = 70, DY = 24, R = 7;
  function layout() {
    var cols = {}, pos = {};
    DATA.nodes.forEach(function (n) { (cols[n.generation] = cols[n.generation] || []).push(n); });
    Object.keys(cols).map(Number).sort(function (a, b) { return a - b; }).forEach(function (g, gi) {
      var col = cols[g];
      col.sort(function (a, b) {
        var pa = a.parents.length && pos[a.parents[0]] ? pos[a.parents[0]].y : -1;
        var pb = b.parents.length && pos[b.parents[0]] ? pos[b.parents[0]].y : -1;
        return pa - pb;
      });
      col.forEach(function (n, i) { pos[n.id] = { x: 30 + gi * DX, y: 30 + i * DY }; });
    });
    return pos;
  }

  function tooltip(n) {
    var lines = [n.id + " · " + n.state + " · gen " + n.generation,
      "train " + fmt(n.scores.train) + "  gate " + fmt(n.scores.gate) + "  sealed " + fmt(n.scores.sealed)];
    if (n.parents.length) lines.push("parents: " + n.parents.join(" + "));
    if (n.duplicate_of) lines.push("duplicate of " + n.duplicate_of);
    if (n.description) lines.push(n.description.slice(0, 160));
    return lines.join("\n");
  }

  var tip = el("div", { "class": "tip" });
  document.body.appendChild(tip);

  function drawLineage() {
    var svg = document.getElementById("lineage");
    var root = sv("g", { id: "lineage-root" });
    svg.appendChild(root);
    var pos = layout();
    var edges = sv("g"), nodes = sv("g");
    root.appendChild(edges); root.appendChild(nodes);
    DATA.nodes.forEach(function (n) {
      n.parents.forEach(function (p, i) {
        if (!pos[p]) return;
        var a = pos[p], b = pos[n.id], mx = (a.x + b.x) / 2;
        var cls = "edge" + (i > 0 ? " merge" : "") + (n.champion_path && byId[p].champion_path ? " path" : "");
        edges.appendChild(sv("path", { "class": cls, d: "M" + a.x + "," + a.y + " C" + mx + "," + a.y + " " + mx + "," + b.y + " " + b.x + "," + b.y }));
      });
    });
    DATA.nodes.forEach(function (n) {
      var p = pos[n.id];
      var g = sv("g", { "class": "node", "data-id": n.id, "data-state": n.state, transform: "translate(" + p.x + "," + p.y + ")" });
      var c = sv("circle", { r: R, fill: COLORS[n.state] || "#999", stroke: n.champion_path ? "#d4a000" : "#fff", "stroke-width": n.champion_path ? 3 : 1 });
      var t = sv("title"); t.textContent = tooltip(n); g.appendChild(t);
      g.appendChild(c);
      if (n.duplicate_of) { var d = sv("text", { x: -3, y: 4, "font-size": 9, fill: "#fff" }); d.textContent = "="; g.appendChild(d); }
      if (n.id === DATA.header.champion) { var s = sv("text", { x: 10, y: -8, "font-size": 11 }); s.textContent = "★ champion"; g.appendChild(s); }
      g.addEventListener("click", function (ev) { ev.stopPropagation(); select(n.id); });
      g.addEventListener("mousemove", function (ev) { tip.textContent = tooltip(n); tip.style.display = "block"; tip.style.left = (ev.clientX + 12) + "px"; tip.style.top = (ev.clientY + 12) + "px"; });
      g.addEventListener("mouseleave", function () { tip.style.display = "none"; });
      nodes.appendChild(g);
    });
    panZoom(svg, root);
  }

  function panZoom(svg, root) {
    var view = { x: 0, y: 0, k: 1 }, drag = null;
    function apply() { root.setAttribute("transform", "translate(" + view.x + "," + view.y + ") scale(" + view.k + ")"); }
    svg.addEventListener("wheel", function (ev) {
      ev.preventDefault();
      var r = svg.getBoundingClientRect(), mx = ev.clientX - r.left, my = ev.clientY - r.top;
      var k = Math.min(8, Math.max(0.05, view.k * (ev.deltaY < 0 ? 1.15 : 1 / 1.15)));
      view.x = mx - (mx - view.x) * k / view.k; view.y = my - (my - view.y) * k / view.k; view.k = k; apply();
    }, { passive: false });
    svg.addEventListener("pointerdown", function (ev) { drag = { x: ev.clientX - view.x, y: ev.clientY - view.y }; });
    window.addEventListener("pointermove", function (ev) { if (drag) { view.x = ev.clientX - drag.x; view.y = ev.clientY - drag.y; apply(); } });
    window.addEventListener("pointerup", function () { drag = null; });
    // a large run starts readable (at most full size, its longer side overflowing for pan);
    // "fit" shows all of it
    var box = root.getBBox(), w = svg.clientWidth || 1000, h = svg.clientHeight || 460;
    if (box.height + 60 < h) { svg.style.height = Math.max(160, box.height + 60) + "px"; h = svg.clientHeight || h; }
    var all = Math.max(0.02, Math.min(w / (box.width + 40), h / (box.height + 40)));
    view.k = Math.min(1, Math.max(all, Math.max(w / (box.width + 40), h / (box.height + 40))));
    apply();
    var fit = el("button", { type: "button", id: "fit" }, "fit all");
    fit.addEventListener("click", function () { view = { x: 0, y: 0, k: all }; apply(); });
    document.getElementById("legend").appendChild(fit);
  }

  // -- a candidate's panel -------------------------------------------------------------
  function section(parent, title) { parent.appendChild(el("h3", {}, title)); }
  function table(head, rows) {
    var t = el("table"), tr = el("tr");
    head.forEach(function (h) { tr.appendChild(el("th", {}, h)); }); t.appendChild(tr);
    rows.forEach(function (r) { var row = el("tr"); r.forEach(function (c) { row.appendChild(el("td", {}, c)); }); t.appendChild(row); });
    return t;
  }
  function diffPre(text) {
    var pre = el("pre", { "class": "diff" });
    text.split("\n").forEach(function (line) {
      var cls = line.charAt(0) === "+" && line.slice(0, 3) !== "+++" ? "add" : line.charAt(0) === "-" && line.slice(0, 3) !== "---" ? "del" : line.slice(0, 2) === "@@" ? "hunk" : "";
      pre.appendChild(el("span", cls ? { "class": cls } : {}, line + "\n"));
    });
    return pre;
  }

  function select(id) {
    var n = byId[id], p = DATA.panels[id], panel = document.getElementById("panel");
    document.querySelectorAll("#lineage .node.selected").forEach(function (g) { g.classList.remove("selected"); });
    var g = document.querySelector('#lineage .node[data-id="' + CSS.escape(id) + '"]');
    if (g) g.classList.add("selected");
    panel.textContent = "";
    panel.appendChild(el("h2", { id: "panel-title" }, "candidate " + id + " · " + n.state));
    if (n.duplicate_of) panel.appendChild(el("p", { "class": "note" }, "duplicate of " + n.duplicate_of + " (same tree)"));
    panel.appendChild(el("p", {}, "parents: " + (n.parents.join(" + ") || "none (the seed)") + " · generation " + n.generation));
    if (n.description) panel.appendChild(el("pre", { "class": "description" }, n.description));
    section(panel, "Gate");
    panel.appendChild(el("p", { id: "panel-decision" }, p.decision ? (p.decision.admit ? "admitted: " : "declined: ") + p.decision.reason : (n.reason || "no decision")));
    section(panel, "Scores");
    panel.appendChild(table(["split", "score"], ["train", "gate", "sealed"].map(function (s) { return [s, fmt(n.scores[s])]; })));
    Object.keys(p.rewards).forEach(function (s) {
      var d = el("details"); d.appendChild(el("summary", {}, s + ": per-task rewards (" + Object.keys(p.rewards[s]).length + ")"));
      d.appendChild(table(["task", "reward", "error"], Object.keys(p.rewards[s]).map(function (t) { return [t, fmt(p.rewards[s][t]), (p.errors[s] || {})[t] || ""]; })));
      panel.appendChild(d);
    });
    section(panel, "Diff against its parent" + (n.parents.length > 1 ? "s" : ""));
    var diffs = el("div", { id: "panel-diff" });
    if (!p.diffs.length) diffs.appendChild(el("p", { "class": "note" }, "no change recorded"));
    p.diffs.forEach(function (f) {
      var d = el("details", { open: "" }); d.appendChild(el("summary", {}, f.kind + " " + f.path + "  (against " + f.against + ")"));
      d.appendChild(diffPre(f.text)); diffs.appendChild(d);
    });
    panel.appendChild(diffs);
    section(panel, "Operators and model calls");
    var ops = DATA.header.operators || {};
    panel.appendChild(el("p", {}, "made by " + Object.keys(ops).filter(function (k) { return ["select", "merge", "mutate", "analyze", "validate", "novelty"].indexOf(k) >= 0; }).map(function (k) { return k + ": " + ops[k]; }).join(", ") + (p.operator.merge ? " (a merge)" : "")));
    if (p.operator.changes.length) panel.appendChild(el("pre", {}, JSON.stringify(p.operator.changes, null, 1)));
    if (!p.calls.length) panel.appendChild(el("p", { "class": "note" }, "no model calls"));
    p.calls.forEach(function (c) {
      var d = el("details", { "class": "call" });
      d.appendChild(el("summary", {}, "#" + c.seq + " " + (c.slot || "-") + " · " + c.model + " · " + (c.cached ? "cached" : c.status) + " · " + c.tokens + " tokens · $" + c.cost_usd.toFixed(6)));
      if (c.error) d.appendChild(el("p", {}, c.error));
      d.appendChild(el("h4", {}, "prompt")); d.appendChild(el("pre", {}, c.prompt));
      d.appendChild(el("h4", {}, "answer")); d.appendChild(el("pre", {}, c.answer));
      panel.appendChild(d);
    });
    section(panel, "Certificates");
    p.certificates.forEach(function (c) {
      var d = el("details");
      d.appendChild(el("summary", {}, c.split + " #" + c.attempt + " · " + c.status + (c.signature ? " · signature " + c.signature : "") + (c.error ? " · " + c.error : "")));
      if (c.binds) d.appendChild(table(["binds", "value"], Object.keys(c.binds).map(function (k) { return [k, c.binds[k] === null ? "—" : String(c.binds[k])]; })));
      panel.appendChild(d);
    });
    if (location.hash !== "#" + id) history.replaceState(null, "", "#" + encodeURIComponent(id));
  }

  // -- the curve -------------------------------------------------------------------------
  var AXES = { evaluations: "evaluations", task_runs: "task runs", cost: "cost ($)" };
  function drawCurve(axis) {
    var svg = document.getElementById("curve"); svg.textContent = "";
    var pts = DATA.curve, w = svg.clientWidth || 900, h = svg.clientHeight || 280, m = 40;
    if (!pts.length) { var t = sv("text", { x: 20, y: 30 }); t.textContent = "no admitted candidate with a gate score"; svg.appendChild(t); return; }
    var xs = pts.map(function (p) { return p[axis]; }), ys = pts.map(function (p) { return p.best_gate; });
    var x0 = 0, x1 = Math.max.apply(null, xs) || 1, y0 = Math.min(0, Math.min.apply(null, ys)), y1 = Math.max(1, Math.max.apply(null, ys));
    function X(v) { return m + (v - x0) / (x1 - x0) * (w - 2 * m); }
    function Y(v) { return h - m - (v - y0) / (y1 - y0) * (h - 2 * m); }
    var d = "";
    pts.forEach(function (p, i) { d += (i ? " H" + X(p[axis]) + " V" : "M" + X(p[axis]) + " ") + Y(p.best_gate); });
    svg.appendChild(sv("line", { x1: m, y1: h - m, x2: w - m, y2: h - m, stroke: "#999" }));
    svg.appendChild(sv("line", { x1: m, y1: m, x2: m, y2: h - m, stroke: "#999" }));
    svg.appendChild(sv("path", { d: d, stroke: "#2a9d4b", "stroke-width": 2, fill: "none", id: "curve-line" }));
    [[x0, y0], [x1, y1]].forEach(function (v) {
      var tx = sv("text", { x: X(v[0]), y: h - m + 16, "font-size": 11, "text-anchor": "middle" }); tx.textContent = String(Math.round(v[0] * 1e4) / 1e4); svg.appendChild(tx);
      var ty = sv("text", { x: m - 4, y: Y(v[1]) + 4, "font-size": 11, "text-anchor": "end" }); ty.textContent = fmt(v[1]); svg.appendChild(ty);
    });
    var lbl = sv("text", { x: w / 2, y: h - 6, "font-size": 12, "text-anchor": "middle" }); lbl.textContent = AXES[axis]; svg.appendChild(lbl);
    document.querySelectorAll("#curve-axes button").forEach(function (b) { b.classList.toggle("on", b.dataset.axis === axis); });
  }

  function legend() {
    var box = document.getElementById("legend");
    ["admitted", "declined", "rejected", "abandoned", "failed"].forEach(function (s) {
      var span = el("span"), dot = el("i"); dot.style.background = COLORS[s]; span.appendChild(dot); span.appendChild(document.createTextNode(s)); box.appendChild(span);
    });
    box.appendChild(el("span", {}, "= duplicate · ★ champion"));
    var axes = document.getElementById("curve-axes");
    Object.keys(AXES).forEach(function (a) {
      var b = el("button", { type: "button", "data-axis": a }, "against " + AXES[a]);
      b.addEventListener("click", function () { drawCurve(a); }); axes.appendChild(b);
    });
  }

  legend();
  drawLineage();
  drawCurve("evaluations");
  var first = decodeURIComponent(location.hash.slice(1));
  select(byId[first] ? first : (DATA.header.champion || DATA.nodes[0].id));
  document.body.setAttribute("data-ready", "1");
})();
