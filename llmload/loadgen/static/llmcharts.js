/* llmload: live LLM charts for Locust's web UI, its HTML report and the /llmload/ page.
 *
 * Drawn by Apache ECharts (static/echarts.common.min.js, loaded before this file; the library that
 * Locust's own charts use), in the look of Locust's charts: title top left, legend with round markers,
 * time axis, an axis tooltip, Shift + wheel to zoom the time axis and drag to pan; Locust's colours,
 * light and dark. Data: llmload/live.json, polled every 2 s while the charts are on screen; each answer
 * carries only the points after the last one the page has (one point per second, the last 10 s at that
 * moment), so a poll costs the same at any point of a run.
 *
 *   LLMCharts.attachToLocust(config)   Locust's page: the panel goes under the "LLM metrics" table
 *   LLMCharts.page(element, {base})    a page of its own: table and charts
 *   LLMCharts.report(element, data)    the HTML report: charts from inline data, no polling
 */
(function (global) {
  "use strict";

  var POLL_MS = 2000;
  var HEIGHT = 280;
  var GRID = { left: 60, right: 40, top: 70, bottom: 32 };
  /* Points up to which each point gets a hollow marker (as Locust's charts while they are short). */
  var MARKERS_UP_TO = 60;
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

  function present(v) { return v !== null && v !== undefined && !isNaN(v); }

  function format(v) {
    if (!present(v)) return "-";
    if (Number.isInteger(v)) return v.toLocaleString();
    var a = Math.abs(v);
    return a >= 1000 ? Math.round(v).toLocaleString() : a >= 100 ? v.toFixed(0) : a >= 10 ? v.toFixed(1) : v.toFixed(2);
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

  /* Columns of points (time in ms); pairs(key) is a column as ECharts' [time, value] points, kept up to date
     by appending, so a poll costs what its new points cost. */
  function Series() { this.time = []; this.cols = {}; this._pairs = {}; }

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

  Series.prototype.pairs = function (key) {
    var out = this._pairs[key] || (this._pairs[key] = []), col = this.cols[key] || [];
    for (var i = out.length; i < this.time.length; i++) out.push([this.time[i], col[i] === undefined ? null : col[i]]);
    return out;
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

  function largest(series, keys) {
    var max = 0;
    keys.forEach(function (key) { (series.cols[key] || []).forEach(function (v) { if (v !== null && v > max) max = v; }); });
    return max;
  }

  /* ------------------------------------------------------------------ one chart */

  function Chart(spec, parent) {
    this.spec = spec;
    this.box = node("div", { "class": "llmload-chart-box", "data-chart-box": spec.id }, parent);
    this.el = node("div", { "class": "llmload-chart", "data-chart": spec.id, role: "img", "aria-label": spec.title },
                   this.box);
    this.el.style.height = HEIGHT + "px";
    this.empty = node("div", { "class": "llmload-empty" }, this.box, spec.empty || "No data yet");
    this.chart = null; this.width = 0; this.theme = null; this.keys = "";
  }

  /* The parts that change with the theme only: set once, and again when the page turns light or dark. */
  Chart.prototype.style = function (theme) {
    var spec = this.spec, unit = spec.unit ? " " + spec.unit : "";
    this.box.style.background = theme.background;
    this.empty.style.color = theme.muted;
    this.chart.setOption({
      animation: false,
      backgroundColor: theme.background,
      textStyle: { color: theme.text },
      title: { text: spec.title, left: 10, top: 8, textStyle: { color: theme.text, fontSize: 18 } },
      legend: { top: 36, icon: "circle", itemWidth: 12, itemHeight: 12, textStyle: { color: theme.text } },
      grid: GRID,
      tooltip: { trigger: "axis", className: "llmload-tooltip", backgroundColor: theme.background,
                 borderColor: theme.split, textStyle: { color: theme.text },
                 valueFormatter: function (v) { return format(v) + (present(v) ? unit : ""); } },
      xAxis: { type: "time", axisLine: { lineStyle: { color: theme.axis } },
               axisLabel: { color: theme.text, hideOverlap: true }, splitLine: { show: false } },
      yAxis: { type: "value", min: 0, axisLabel: { color: theme.text }, splitLine: { lineStyle: { color: theme.split } } },
      dataZoom: [{ type: "inside", zoomOnMouseWheel: "shift", moveOnMouseWheel: false, filterMode: "none" }]
    });
    this.theme = theme;
  };

  Chart.prototype.render = function (series, theme, domain) {
    var spec = this.spec;
    if (!this.chart) {
      if (!global.echarts) { this.empty.textContent = "The chart library (echarts.common.min.js) did not load"; return; }
      this.chart = global.echarts.init(this.el, null, { renderer: "canvas" });
      this.width = this.el.clientWidth;
    } else if (this.el.clientWidth !== this.width) {
      this.width = this.el.clientWidth;
      this.chart.resize();
    }
    if (this.theme !== theme) this.style(theme);
    var lines = spec.lines.filter(function (l) { return hasValues(series, l.key); });
    var counted = lines.length > 0;
    if (!lines.length) lines = spec.lines.slice(0, 1);
    var t = series.time, n = t.length;
    var t0 = domain ? domain[0] : n ? t[0] : Date.now() - 60000, t1 = domain ? domain[1] : n ? t[n - 1] : Date.now();
    if (t1 - t0 < 5000) t1 = t0 + 5000;
    var keys = lines.map(function (l) { return l.key; }).join(",");
    var ymax = spec.max && largest(series, lines.map(function (l) { return l.key; })) <= spec.max ? spec.max : null;
    this.chart.setOption({
      xAxis: { min: t0, max: t1 },
      yAxis: { max: ymax },
      series: lines.map(function (l) {
        var color = spec.colors[spec.lines.indexOf(l) % spec.colors.length];
        return { type: "line", id: l.key, name: l.name, data: series.pairs(l.key), connectNulls: false,
                 showSymbol: n <= MARKERS_UP_TO, symbol: "emptyCircle", symbolSize: 4, sampling: "lttb",
                 color: color, lineStyle: { width: 2 } };
      })
    }, keys === this.keys ? {} : { replaceMerge: ["series"] });  /* a line that appears or goes: a new legend */
    this.keys = keys;
    this.empty.style.display = counted ? "none" : "";
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
