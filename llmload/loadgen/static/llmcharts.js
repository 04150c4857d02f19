/* llmload: live LLM charts for Locust's web UI, its HTML report and the /llmload/ page.
 *
 * Plain SVG, no library: each chart is drawn in the look of Locust's own charts
 * (title top left, legend with round markers, time axis, horizontal split lines,
 * an axis tooltip; Locust's colours, light and dark). Data: llmload/live.json,
 * polled every 2 s while the charts are on screen; each answer carries only the
 * points after the last one the page has (one point per second, the last 10 s
 * at that moment), so a poll costs the same at any point of a run.
 *
 *   LLMCharts.attachToLocust(config)   Locust's page: the panel goes under the "LLM metrics" table
 *   LLMCharts.page(element, {base})    a page of its own: table and charts
 *   LLMCharts.report(element, data)    the HTML report: charts from inline data, no polling
 *
 * Under the time charts, "Where the Time Goes": one stacked bar of the mean of each part of the latency over
 * the last 10 s (live.json's "parts": the server's own queue, prefill, ... where it timed its requests).
 */
(function (global) {
  "use strict";

  var SVG = "http://www.w3.org/2000/svg";
  var POLL_MS = 2000;
  var HEIGHT = 280;
  var GRID = { left: 60, right: 40, top: 62, bottom: 32 };
  var THEMES = {
    light: { text: "#000", axis: "#000", background: "#fff", split: "#ddd", muted: "#666" },
    dark: { text: "#b3c3bc", axis: "#5b6f66", background: "#27272a", split: "#4c4c52", muted: "#8a9a93" }
  };

  /* The charts: key = field of a point; source = "history" (the board, once a second) or "memory" (monitor). */
  var CHARTS = [
    { id: "tokens", title: "Output Tokens per Second", unit: "tok/s", colors: ["#00ca5a", "#ff6d6d"],
      lines: [{ key: "output_tokens_per_s", name: "Output tok/s" }] },
    { id: "ttft", title: "Time to First Token (ms)", unit: "ms", colors: ["#ff9f00", "#9966CC"],
      lines: [{ key: "ttft_p50_ms", name: "TTFT p50" }, { key: "ttft_p95_ms", name: "TTFT p95" }] },
    { id: "tpot", title: "Time per Output Token (ms)", unit: "ms", colors: ["#8A2BE2", "#8E4585"],
      lines: [{ key: "tpot_p50_ms", name: "TPOT p50" }] },
    { id: "users", title: "Number of Users", unit: "", colors: ["#0099ff"],
      lines: [{ key: "users", name: "Number of Users" }] },
    { id: "memory", title: "Server Memory (MiB)", unit: "MiB", source: "memory",
      colors: ["#0099ff", "#ff6d6d", "#9966CC"],
      lines: [{ key: "server_rss_mib", name: "Server RSS" }, { key: "server_gpu_mib", name: "Server GPU" },
              { key: "gpu_used_mib", name: "GPU used (all)" }],
      empty: "No monitor: start Locust with --monitor-pid PID (the server's process id) to chart its memory" },
    { id: "slo", title: "SLO Attainment (%)", unit: "%", optional: true, max: 100, colors: ["#00ca5a"],
      lines: [{ key: "slo_attainment_pct", name: "SLO met %" }] },
    { id: "goodput", title: "Goodput (requests/s)", unit: "req/s", optional: true, colors: ["#00ca5a", "#0099ff"],
      lines: [{ key: "goodput_per_s", name: "Goodput" }, { key: "requests_per_s", name: "Successful req/s" }] },
    { id: "lag", title: "Dispatch Lag p99 (ms)", unit: "ms", optional: true, colors: ["#ff6d6d"],
      lines: [{ key: "dispatch_lag_p99_ms", name: "Dispatch lag p99" }] }
  ];

  /* The stacked bar's parts, in the order they happen (llmload.core.metrics STREAM_PARTS / SYNC_PARTS). */
  var PARTS = [
    { key: "ttft_residual", name: "client/network", color: "#9e9e9e" },
    { key: "e2e_residual", name: "client/network", color: "#9e9e9e" },
    { key: "frontend", name: "frontend", color: "#0099ff" },
    { key: "queue", name: "queue", color: "#ff6d6d" },
    { key: "prefill", name: "prefill", color: "#ff9f00" },
    { key: "decode", name: "decode", color: "#00ca5a" },
    { key: "tail", name: "tail", color: "#9966CC" }
  ];
  var PARTS_HEIGHT = 170;

  /* The figures over the last seconds, as cards above the charts. */
  var NOW = [
    { key: "output_tokens_per_s", title: "Output tok/s" },
    { key: "ttft_p50_ms", title: "TTFT p50", unit: "ms" },
    { key: "ttft_p95_ms", title: "TTFT p95", unit: "ms" },
    { key: "tpot_p50_ms", title: "TPOT p50", unit: "ms" },
    { key: "requests_per_s", title: "Requests/s" },
    { key: "users", title: "Users" },
    { key: "server_rss_mib", title: "Server RSS", unit: "MiB", source: "monitor", optional: true },
    { key: "server_gpu_mib", title: "Server GPU", unit: "MiB", source: "monitor", optional: true },
    { key: "slo_attainment_pct", title: "SLO met", unit: "%", optional: true },
    { key: "goodput_per_s", title: "Goodput", unit: "req/s", optional: true },
    { key: "dispatch_lag_p99_ms", title: "Dispatch lag p99", unit: "ms", optional: true }
  ];

  function node(tag, attrs, parent, text) {
    var el = document.createElement(tag);
    for (var k in attrs || {}) el.setAttribute(k, attrs[k]);
    if (text !== undefined) el.textContent = text;
    if (parent) parent.appendChild(el);
    return el;
  }

  function svgNode(tag, attrs, parent, text) {
    var el = document.createElementNS(SVG, tag);
    for (var k in attrs || {}) el.setAttribute(k, attrs[k]);
    if (text !== undefined) el.textContent = text;
    if (parent) parent.appendChild(el);
    return el;
  }

  function present(v) { return v !== null && v !== undefined && !isNaN(v); }

  function format(v) {
    if (!present(v)) return "-";
    if (Number.isInteger(v)) return v.toLocaleString();
    var a = Math.abs(v);
    return a >= 1000 ? Math.round(v).toLocaleString() : a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
  }

  /* An axis tick: as many decimals as its step needs (0, 2.5, 5 / 0, 20, 40). */
  function tickLabel(v, step) {
    var decimals = Math.max(0, Math.min(6, -Math.floor(Math.log10(step) + 1e-9)));
    if (Math.abs(step * Math.pow(10, decimals) - Math.round(step * Math.pow(10, decimals))) > 1e-6) decimals++;
    return Number(v.toFixed(decimals)).toLocaleString();
  }

  function niceStep(span, count) {
    var raw = span / Math.max(count, 1), mag = Math.pow(10, Math.floor(Math.log10(raw))), r = raw / mag;
    return (r <= 1 ? 1 : r <= 2 ? 2 : r <= 2.5 ? 2.5 : r <= 5 ? 5 : 10) * mag;
  }

  var TIME_STEPS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200]
    .map(function (s) { return s * 1000; });

  function timeStep(span, count) {
    for (var i = 0; i < TIME_STEPS.length; i++) if (span / TIME_STEPS[i] <= count) return TIME_STEPS[i];
    return TIME_STEPS[TIME_STEPS.length - 1];
  }

  function colorLuminance(css) {
    var m = /rgba?\(([\d.]+),\s*([\d.]+),\s*([\d.]+)(?:,\s*([\d.]+))?/.exec(css || "");
    if (!m || (m[4] !== undefined && parseFloat(m[4]) === 0)) return null;
    return (0.299 * m[1] + 0.587 * m[2] + 0.114 * m[3]) / 255;
  }

  /* Dark when Locust's page is dark (its MUI theme sets the body's background), or the report says so. */
  function themeOf(element) {
    if (global.theme === "dark") return THEMES.dark;
    if (global.theme === "light") return THEMES.light;
    for (var el = element; el && el.nodeType === 1; el = el.parentElement) {
      var lum = colorLuminance(getComputedStyle(el).backgroundColor);
      if (lum !== null) return lum < 0.5 ? THEMES.dark : THEMES.light;
    }
    return THEMES.light;
  }

  /* ------------------------------------------------------------------ series */

  function Series() { this.time = []; this.cols = {}; }

  Series.prototype.push = function (point) {
    var n = this.time.length;
    this.time.push(point.time * 1000);
    for (var key in point) {
      if (key === "time") continue;
      var col = this.cols[key];
      if (!col) { col = this.cols[key] = new Array(n); for (var i = 0; i < n; i++) col[i] = null; }
      col.push(present(point[key]) ? point[key] : null);
    }
    for (var k in this.cols) if (this.cols[k].length < n + 1) this.cols[k].push(null);
  };

  Series.prototype.last = function () { return this.time.length ? this.time[this.time.length - 1] / 1000 : 0; };

  Series.fromColumns = function (columns) {
    var s = new Series();
    s.time = (columns.time || []).map(function (t) { return t * 1000; });
    for (var key in columns) {
      if (key !== "time") s.cols[key] = columns[key].map(function (v) { return present(v) ? v : null; });
    }
    return s;
  };

  function hasValues(series, key) {
    var col = series.cols[key];
    if (!col) return false;
    for (var i = 0; i < col.length; i++) if (col[i] !== null) return true;
    return false;
  }

  /* ------------------------------------------------------------------ one chart */

  function Chart(spec, parent) {
    this.spec = spec;
    this.box = node("div", { "class": "llmload-chart-box", "data-chart-box": spec.id }, parent);
    this.svg = svgNode("svg", { "class": "llmload-chart", "data-chart": spec.id, height: HEIGHT, role: "img",
                                "aria-label": spec.title }, this.box);
    this.tip = node("div", { "class": "llmload-tooltip" }, this.box);
    var self = this;
    this.box.addEventListener("mousemove", function (e) { self.hover(e); });
    this.box.addEventListener("mouseleave", function () { self.unhover(); });
  }

  Chart.prototype.render = function (series, theme, domain) {
    var spec = this.spec, svg = this.svg;
    var width = Math.max(this.box.clientWidth || 0, 320);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("width", width);
    svg.setAttribute("viewBox", "0 0 " + width + " " + HEIGHT);
    this.box.style.background = theme.background;
    this.series = series; this.theme = theme; this.width = width;
    var lines = spec.lines.filter(function (l) { return hasValues(series, l.key); });
    if (!lines.length) lines = spec.lines.slice(0, 1);
    this.lines = lines;
    svgNode("text", { x: 10, y: 24, "class": "llmload-chart-title", fill: theme.text }, svg, spec.title);

    /* legend, centred, round markers (as ECharts draws Locust's) */
    var legend = svgNode("g", { "class": "llmload-legend" }, svg);
    var x = 0;
    lines.forEach(function (l) {
      var color = spec.colors[spec.lines.indexOf(l) % spec.colors.length];
      var item = svgNode("g", { transform: "translate(" + x + ",0)" }, legend);
      svgNode("circle", { cx: 7, cy: 43, r: 6, fill: color }, item);
      svgNode("text", { x: 18, y: 47, fill: theme.text, "class": "llmload-legend-text" }, item, l.name);
      x += 30 + 7 * l.name.length;
    });
    legend.setAttribute("transform", "translate(" + Math.max((width - x) / 2, 10) + ",0)");

    var left = GRID.left, right = width - GRID.right, top = GRID.top, bottom = HEIGHT - GRID.bottom;
    var t = series.time, n = t.length;
    var t0 = domain ? domain[0] : n ? t[0] : Date.now() - 60000, t1 = domain ? domain[1] : n ? t[n - 1] : Date.now();
    if (t1 - t0 < 5000) t1 = t0 + 5000;
    var max = 0, counted = 0;
    lines.forEach(function (l) {
      (series.cols[l.key] || []).forEach(function (v) { if (v !== null) { counted++; if (v > max) max = v; } });
    });
    var top_ = spec.max && max <= spec.max ? spec.max : max * 1.05;
    var step = niceStep(top_ > 0 ? top_ : 1, 4), ymax = Math.max(step, Math.ceil(top_ / step - 1e-9) * step);
    var sx = function (v) { return left + (v - t0) / (t1 - t0) * (right - left); };
    var sy = function (v) { return bottom - v / ymax * (bottom - top); };
    this.scale = { sx: sx, t0: t0, t1: t1, left: left, right: right, top: top, bottom: bottom };

    for (var y = 0; y <= ymax + step / 1e6; y += step) {
      var py = sy(y);
      svgNode("line", { x1: left, x2: right, y1: py, y2: py, stroke: y === 0 ? theme.axis : theme.split,
                        "stroke-width": 1, "class": y === 0 ? "llmload-axis" : "llmload-split" }, svg);
      svgNode("text", { x: left - 8, y: py + 4, "text-anchor": "end", fill: theme.text, "class": "llmload-tick" },
              svg, tickLabel(y, step));
    }
    var tstep = timeStep(t1 - t0, width < 900 ? 3 : 7);
    for (var tt = Math.ceil(t0 / tstep) * tstep; tt <= t1; tt += tstep) {
      var px = sx(tt);
      svgNode("line", { x1: px, x2: px, y1: bottom, y2: bottom + 5, stroke: theme.axis }, svg);
      svgNode("text", { x: px, y: bottom + 19, "text-anchor": "middle", fill: theme.text, "class": "llmload-tick" },
              svg, new Date(tt).toLocaleTimeString());
    }

    /* the lines: breaks where a value is missing; hollow markers while the points are few (as ECharts does) */
    var stride = Math.max(1, Math.floor(n / (right - left)));
    var markers = n <= 60;
    lines.forEach(function (l) {
      var color = spec.colors[spec.lines.indexOf(l) % spec.colors.length], col = series.cols[l.key] || [];
      var d = "", pen = false, count = 0, lastValue = null;
      for (var i = 0; i < n; i = i === n - 1 ? n : Math.min(i + stride, n - 1)) {
        var v = col[i];
        if (v === null || v === undefined) { pen = false; continue; }
        d += (pen ? "L" : "M") + sx(t[i]).toFixed(1) + " " + sy(v).toFixed(1);
        pen = true; count++; lastValue = v;
      }
      var path = svgNode("path", { d: d || "M0 0", fill: "none", stroke: color, "stroke-width": 2,
                                   "stroke-linejoin": "round", "class": "llmload-line", "data-series": l.key,
                                   "data-points": count, "data-last": lastValue === null ? "" : lastValue }, svg);
      if (!d) path.setAttribute("stroke", "none");
      if (markers) {
        for (var j = 0; j < n; j++) {
          if (col[j] === null || col[j] === undefined) continue;
          svgNode("circle", { cx: sx(t[j]).toFixed(1), cy: sy(col[j]).toFixed(1), r: 2, fill: theme.background,
                              stroke: color, "stroke-width": 1.5 }, svg);
        }
      }
    });
    svg.setAttribute("data-points", counted ? (series.cols[lines[0].key] || []).filter(present).length : 0);
    if (!counted) {
      svgNode("text", { x: (left + right) / 2, y: (top + bottom) / 2, "text-anchor": "middle", fill: theme.muted,
                        "class": "llmload-empty" }, svg, spec.empty || "No data yet");
    }
    this.cursor = svgNode("line", { y1: top, y2: bottom, stroke: theme.muted, "stroke-dasharray": "4 3",
                                    visibility: "hidden" }, svg);
  };

  Chart.prototype.hover = function (event) {
    var s = this.series, sc = this.scale;
    if (!s || !s.time.length || !sc) return;
    var rect = this.svg.getBoundingClientRect(), x = event.clientX - rect.left;
    if (x < sc.left || x > sc.right) { this.unhover(); return; }
    var target = sc.t0 + (x - sc.left) / (sc.right - sc.left) * (sc.t1 - sc.t0);
    var lo = 0, hi = s.time.length - 1;
    while (lo < hi) { var mid = (lo + hi) >> 1; if (s.time[mid] < target) lo = mid + 1; else hi = mid; }
    if (lo > 0 && target - s.time[lo - 1] < s.time[lo] - target) lo--;
    var px = sc.sx(s.time[lo]);
    this.cursor.setAttribute("x1", px); this.cursor.setAttribute("x2", px);
    this.cursor.setAttribute("visibility", "visible");
    var spec = this.spec, tip = this.tip, theme = this.theme;
    while (tip.firstChild) tip.removeChild(tip.firstChild);
    node("div", {}, tip, new Date(s.time[lo]).toLocaleString());
    this.lines.forEach(function (l) {
      var color = spec.colors[spec.lines.indexOf(l) % spec.colors.length], v = (s.cols[l.key] || [])[lo];
      node("div", { style: "color:" + color }, tip, l.name + ": " + format(v) + (spec.unit ? " " + spec.unit : ""));
    });
    tip.style.background = theme.background; tip.style.color = theme.text;
    tip.style.display = "block";
    var left = px + 14;
    if (left + tip.offsetWidth > this.width) left = px - 14 - tip.offsetWidth;
    tip.style.left = left + "px";
    tip.style.top = (event.clientY - rect.top + 12) + "px";
  };

  Chart.prototype.unhover = function () {
    if (this.cursor) this.cursor.setAttribute("visibility", "hidden");
    this.tip.style.display = "none";
  };

  /* ------------------------------------------------------------------ the stacked bar of the parts */

  function PartsChart(parent) {
    this.box = node("div", { "class": "llmload-chart-box llmload-parts-box", "data-chart-box": "parts" }, parent);
    this.svg = svgNode("svg", { "class": "llmload-chart", "data-chart": "parts", height: PARTS_HEIGHT, role: "img",
                                "aria-label": "Where the time goes" }, this.box);
  }

  /* parts: {parts_ms: {queue: 12.5, ...}, counts: {queue: 40, ...}}; positive parts stack right of 0, a negative
     one (a residual measured below 0) left of it, as measured. */
  PartsChart.prototype.render = function (parts, theme, windowS) {
    var svg = this.svg, ms = (parts && parts.parts_ms) || {}, counts = (parts && parts.counts) || {};
    var width = Math.max(this.box.clientWidth || 0, 320);
    while (svg.firstChild) svg.removeChild(svg.firstChild);
    svg.setAttribute("width", width);
    svg.setAttribute("viewBox", "0 0 " + width + " " + PARTS_HEIGHT);
    this.box.style.background = theme.background;
    svgNode("text", { x: 10, y: 24, "class": "llmload-chart-title", fill: theme.text }, svg,
            "Where the Time Goes (ms, mean of the last " + (windowS || 10) + " s)");
    var shown = PARTS.filter(function (p) { return present(ms[p.key]); });
    svg.setAttribute("data-points", shown.length);
    if (!shown.length) {
      svgNode("text", { x: width / 2, y: PARTS_HEIGHT / 2 + 10, "text-anchor": "middle", fill: theme.muted,
                        "class": "llmload-empty" }, svg,
              "No server timing yet: the server returns no per-request metrics (vLLM: --enable-per-request-metrics)");
      return;
    }
    var legend = svgNode("g", { "class": "llmload-legend" }, svg), x = 0;
    shown.forEach(function (p) {
      var item = svgNode("g", { transform: "translate(" + x + ",0)" }, legend), label = p.name + " " + format(ms[p.key]);
      svgNode("circle", { cx: 7, cy: 43, r: 6, fill: p.color }, item);
      svgNode("text", { x: 18, y: 47, fill: theme.text, "class": "llmload-legend-text" }, item, label);
      x += 30 + 7 * label.length;
    });
    legend.setAttribute("transform", "translate(" + Math.max((width - x) / 2, 10) + ",0)");
    var pos = 0, neg = 0;
    shown.forEach(function (p) { if (ms[p.key] >= 0) pos += ms[p.key]; else neg += ms[p.key]; });
    var left = GRID.left, right = width - GRID.right, top = 70, bottom = 110;
    /* the axis runs from the negative parts' sum (0 without one) to the positive ones' rounded up */
    var step = niceStep((pos - neg) || 1, 6), lo = neg, hi = Math.max(step, Math.ceil(pos / step) * step);
    var sx = function (v) { return left + (v - lo) / (hi - lo) * (right - left); };
    for (var t = Math.ceil(lo / step) * step; t <= hi + step / 1e6; t += step) {
      svgNode("line", { x1: sx(t), x2: sx(t), y1: top - 4, y2: bottom + 4, stroke: t === 0 ? theme.axis : theme.split,
                        "class": t === 0 ? "llmload-axis" : "llmload-split" }, svg);
      svgNode("text", { x: sx(t), y: bottom + 20, "text-anchor": "middle", fill: theme.text, "class": "llmload-tick" },
              svg, tickLabel(t, step));
    }
    var up = 0, down = 0;
    shown.forEach(function (p) {
      var v = ms[p.key], from = v >= 0 ? up : down + v, to = v >= 0 ? up + v : down;
      if (v >= 0) up += v; else down += v;
      var rect = svgNode("rect", { x: sx(from).toFixed(1), y: top, width: Math.max(0, sx(to) - sx(from)).toFixed(1),
                                   height: bottom - top, fill: p.color, "class": "llmload-part", "data-part": p.key,
                                   "data-ms": v, "data-requests": counts[p.key] || 0 }, svg);
      svgNode("title", {}, rect, p.name + ": " + format(v) + " ms (mean of " + (counts[p.key] || 0) + " requests)");
      if (sx(to) - sx(from) > 7 * (p.name.length + 1)) {
        svgNode("text", { x: ((sx(from) + sx(to)) / 2).toFixed(1), y: (top + bottom) / 2 + 4, "text-anchor": "middle",
                          fill: "#fff", "class": "llmload-legend-text", "pointer-events": "none" }, svg, p.name);
      }
    });
    svgNode("text", { x: left, y: PARTS_HEIGHT - 8, fill: theme.muted, "class": "llmload-legend-text" }, svg,
            "TTFT = client/network + frontend + queue + prefill; E2E = TTFT + decode + tail");
  };

  /* ------------------------------------------------------------------ the panel: cards and charts */

  function Panel(container, options) {
    this.options = options || {};
    this.root = node("section", { "class": "llmload-panel", id: this.options.id || "llmload-panel" }, null);
    var head = node("div", { "class": "llmload-head" }, this.root);
    this.heading = node("h2", { "class": "llmload-heading" }, head, "Live: the last 10 s, once a second");
    if (this.options.pageLink) {
      node("a", { href: this.options.pageLink, target: "_blank", "class": "llmload-link" }, head,
           "open on a page of its own");
    }
    this.cards = node("div", { "class": "llmload-now" }, this.root);
    this.grid = node("div", { "class": "llmload-charts" }, this.root);
    this.partsChart = null; this.parts = null; this.windowS = 10;
    this.charts = {};
    this.history = new Series();
    this.memory = new Series();
    this.now = null; this.monitor = null; this.monitoring = false; this.run = null; this.state = "";
    if (container) container.appendChild(this.root);
  }

  Panel.prototype.reset = function () { this.history = new Series(); this.memory = new Series(); };

  Panel.prototype.ingest = function (data) {
    if (data.run !== this.run) { this.reset(); this.run = data.run; }
    var self = this;
    (data.history || []).forEach(function (p) { self.history.push(p); });
    (data.memory || []).forEach(function (p) { self.memory.push(p); });
    this.now = data.now || this.now;
    this.monitor = data.monitor || this.monitor;
    this.monitoring = !!data.monitoring;
    this.state = data.state || "";
    if (data.parts) this.parts = data.parts;
    if (data.window_s) this.windowS = data.window_s;
    if (data.window_s) this.heading.textContent = "Live: the last " + data.window_s + " s, once a second";
  };

  Panel.prototype.visibleCharts = function () {
    var self = this;
    return CHARTS.filter(function (spec) {
      if (!spec.optional) return true;
      return hasValues(spec.source === "memory" ? self.memory : self.history, spec.lines[0].key);
    });
  };

  Panel.prototype.render = function () {
    var theme = themeOf(this.root.parentElement || this.root);
    this.root.style.color = theme.text;
    this.renderCards(theme);
    var self = this, wanted = this.visibleCharts(), domain = this.domain();
    wanted.forEach(function (spec) {
      var chart = self.charts[spec.id] || (self.charts[spec.id] = new Chart(spec, self.grid));
      if (chart.box.parentNode !== self.grid || chart.box !== self.grid.children[wanted.indexOf(spec)]) {
        self.grid.insertBefore(chart.box, self.grid.children[wanted.indexOf(spec)] || null);
      }
      chart.render(spec.source === "memory" ? self.memory : self.history, theme, domain);
    });
    if (this.parts) {  /* live.json's parts (the report's inline data has none) */
      this.partsChart = this.partsChart || new PartsChart(this.grid);
      if (this.partsChart.box !== this.grid.lastChild) this.grid.appendChild(this.partsChart.box);
      this.partsChart.render(this.parts, theme, this.windowS);
    }
  };

  /* One time axis for every chart (as Locust's charts share theirs). */
  Panel.prototype.domain = function () {
    var ends = [this.history, this.memory].filter(function (s) { return s.time.length; });
    if (!ends.length) return null;
    return [Math.min.apply(null, ends.map(function (s) { return s.time[0]; })),
            Math.max.apply(null, ends.map(function (s) { return s.time[s.time.length - 1]; }))];
  };

  Panel.prototype.renderCards = function (theme) {
    var now = this.now || {}, monitor = this.monitor || {}, cards = this.cards;
    while (cards.firstChild) cards.removeChild(cards.firstChild);
    NOW.forEach(function (c) {
      var v = c.source === "monitor" ? monitor[c.key] : now[c.key];
      if (c.optional && !present(v)) return;
      var card = node("div", { "class": "llmload-card", "data-key": c.key, "data-value": present(v) ? v : "" }, cards);
      card.style.background = theme.background;
      node("div", { "class": "llmload-card-value" }, card, format(v) + (c.unit && present(v) ? " " + c.unit : ""));
      node("div", { "class": "llmload-card-title" }, card, c.title);
    });
  };

  /* ------------------------------------------------------------------ live polling */

  function Poller(panel, base) {
    this.panel = panel; this.base = base; this.timer = null; this.busy = false;
  }

  Poller.prototype.url = function () {
    var p = this.panel;
    return this.base + "live.json?run=" + (p.run === null ? "" : p.run) + "&since=" + p.history.last() +
           "&msince=" + p.memory.last();
  };

  Poller.prototype.poll = function () {
    var self = this;
    if (this.busy || document.hidden) return;
    this.busy = true;
    fetch(this.url(), { cache: "no-store", credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error(r.status); return r.json(); })
      .then(function (data) { self.panel.ingest(data); self.panel.render(); })
      .catch(function () { /* the next poll tries again */ })
      .then(function () { self.busy = false; });
  };

  Poller.prototype.start = function () {
    if (this.timer) return;
    var self = this;
    this.poll();
    this.timer = setInterval(function () { self.poll(); }, POLL_MS);
  };

  Poller.prototype.stop = function () { if (this.timer) clearInterval(this.timer); this.timer = null; };

  /* Locust's page: whenever the "LLM metrics" table is on screen, the panel goes right under it. */
  function attachToLocust(config) {
    config = config || {};
    var base = config.base || "./llmload/";
    var panel = new Panel(null, { pageLink: base });
    var poller = new Poller(panel, base);
    var scheduled = false;
    function place() {
      scheduled = false;
      var anchor = document.querySelector('th[data-sortkey="' + (config.anchor || "ttftp50") + '"]');
      var table = anchor && anchor.closest("table");
      var holder = table && (table.parentElement || table);
      if (holder) {
        if (holder.nextSibling !== panel.root) holder.parentNode.insertBefore(panel.root, holder.nextSibling);
        panel.render();
        poller.start();
      } else if (panel.root.parentNode) {
        poller.stop();
        panel.root.parentNode.removeChild(panel.root);
      }
    }
    var observer = new MutationObserver(function (records) {
      for (var i = 0; i < records.length; i++) {
        if (!panel.root.contains(records[i].target)) {
          if (!scheduled) { scheduled = true; setTimeout(place, 50); }
          return;
        }
      }
    });
    function observe() {
      observer.observe(document.body, { childList: true, subtree: true });
      place();
    }
    if (document.body) observe(); else document.addEventListener("DOMContentLoaded", observe);
    window.addEventListener("resize", function () { if (panel.root.parentNode) panel.render(); });
    document.addEventListener("visibilitychange", function () { if (!document.hidden && poller.timer) poller.poll(); });
    return panel;
  }

  /* A run-so-far table from summary.json (the standalone page). */
  function fillTable(table, data) {
    while (table.firstChild) table.removeChild(table.firstChild);
    var head = node("tr", {}, node("thead", {}, table)), body = node("tbody", {}, table);
    data.structure.forEach(function (c) { node("th", { "data-key": c.key }, head, c.title); });
    data.rows.forEach(function (row) {
      var tr = node("tr", {}, body);
      data.structure.forEach(function (c) {
        node("td", { "data-key": c.key }, tr, row[c.key] === undefined ? "" : String(row[c.key]));
      });
    });
  }

  function page(element, options) {
    var base = (options && options.base) || "./";
    node("h2", { "class": "llmload-heading" }, element, "LLM metrics: run so far, per task");
    var wrap = node("div", { "class": "llmload-table-wrap" }, element);
    var table = node("table", { "class": "llmload-table", id: "llmload-table" }, wrap);
    var panel = new Panel(element, {});
    var poller = new Poller(panel, base);
    function refreshTable() {
      if (document.hidden) return;
      fetch(base + "summary.json", { cache: "no-store", credentials: "same-origin" })
        .then(function (r) { return r.json(); }).then(function (d) { fillTable(table, d); }).catch(function () {});
    }
    refreshTable();
    setInterval(refreshTable, POLL_MS);
    poller.start();
    window.addEventListener("resize", function () { panel.render(); });
    return panel;
  }

  /* The HTML report: the section goes after Locust's own charts once React has drawn them. */
  function report(section, data) {
    var panel = new Panel(null, { id: "llmload-report-panel" });
    panel.history = Series.fromColumns(data.history || {});
    panel.memory = Series.fromColumns(data.memory || {});
    var h = panel.history, last = h.time.length - 1, now = {};
    for (var key in h.cols) now[key] = last >= 0 ? h.cols[key][last] : null;
    var m = panel.memory, mlast = m.time.length - 1, monitor = {};
    for (var mk in m.cols) monitor[mk] = mlast >= 0 ? m.cols[mk][mlast] : null;
    panel.now = now; panel.monitor = monitor; panel.monitoring = !!data.monitoring;
    panel.heading.textContent = "Over the run: each point is the last " + (data.window_s || 10) +
      " s at that moment; the cards, the last point";
    (document.getElementById("llmload-report-charts") || section).appendChild(panel.root);
    var tries = 0;
    function move() {
      var headings = document.querySelectorAll("#root h2");
      for (var i = 0; i < headings.length; i++) {
        if (headings[i].textContent.trim() === "Charts" && headings[i].parentElement) {
          var box = headings[i].parentElement;
          box.parentNode.insertBefore(section, box.nextSibling);
          panel.render();
          return;
        }
      }
      if (++tries < 50) setTimeout(move, 100); else panel.render();
    }
    panel.render();
    setTimeout(move, 0);
    window.addEventListener("resize", function () { panel.render(); });
    return panel;
  }

  global.LLMCharts = { attachToLocust: attachToLocust, page: page, report: report, CHARTS: CHARTS,
                       Panel: Panel, Series: Series };
})(window);
