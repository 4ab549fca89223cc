// The console's only script: draw the plotly figures a page (or an htmx fragment) embeds, copy a
// new key, and ask before destructive form posts. Figures arrive as <script type="application/json"> next to
// a <div data-figure="<id of that script>">; htmx.onLoad runs for the page and every swap.
(function () {
  "use strict";

  var config = {displaylogo: false, responsive: true, modeBarButtonsToRemove: ["lasso2d", "select2d"]};

  function draw(root) {
    root.querySelectorAll("[data-figure]").forEach(function (holder) {
      var source = document.getElementById(holder.dataset.figure);
      if (!source || typeof Plotly === "undefined") return;
      var figure = JSON.parse(source.textContent);
      fitNarrow(holder, figure);
      theme(figure);
      // the container takes the figure's height, so a tall chart never spills over the next
      if (figure.layout.height) holder.style.height = figure.layout.height + "px";
      // on a phone the mode bar would sit on the title and legend: touch zooms without it
      var narrow = holder.clientWidth < 600;
      var drawn = Plotly.react(holder, figure.data, figure.layout, Object.assign({}, config, {displayModeBar: narrow ? false : "hover"}));
      if (narrow && drawn && drawn.then) drawn.then(function () { clearTitle(holder); });
      drill(holder);
    });
  }

  // Drill-down: a chart with data-drill="<script id>" (one link per bucket, in the order of its
  // points) opens the sessions behind the bar clicked. The page lists the same links in a table
  // for the keyboard.
  function drill(holder) {
    var source = holder.dataset.drill && document.getElementById(holder.dataset.drill);
    if (!source || holder.dataset.drilling) return;
    holder.dataset.drilling = "1";
    holder.classList.add("drillable");
    holder.on("plotly_click", function (event) {
      var links = JSON.parse(document.getElementById(holder.dataset.drill).textContent);
      var point = event.points && event.points[0];
      var link = point && links[point.pointIndex];
      if (link) window.location.assign(link);
    });
  }

  // The page's colour scheme (console.css's variables, dark when the system asks for it): the
  // figure is drawn on the panel's own ground, with the page's ink, grid and hover colours; in
  // dark mode the few trace colours too dark to read on it take lighter stand-ins.
  var DARK_STANDINS = {"#1f4e79": "#79b8ff", "#424242": "#b1bac4", "#6a1b9a": "#c297ff", "#b71c1c": "#ff7b72", "#1565c0": "#58a6ff"};
  var darkScheme = window.matchMedia ? window.matchMedia("(prefers-color-scheme: dark)") : null;
  function recolour(value) {
    if (typeof value === "string") return DARK_STANDINS[value.toLowerCase()] || value;
    if (Array.isArray(value)) return value.map(recolour);
    if (value && typeof value === "object") {
      var copy = {};
      Object.keys(value).forEach(function (key) { copy[key] = recolour(value[key]); });
      return copy;
    }
    return value;
  }
  function theme(figure) {
    var css = getComputedStyle(document.documentElement);
    function v(name) { return css.getPropertyValue(name).trim(); }
    var layout = figure.layout;
    if (darkScheme && darkScheme.matches) {
      figure.data = recolour(figure.data);
      ["shapes", "annotations"].forEach(function (key) { if (layout[key]) layout[key] = recolour(layout[key]); });
    }
    layout.paper_bgcolor = "rgba(0,0,0,0)";
    layout.plot_bgcolor = "rgba(0,0,0,0)";
    layout.font = Object.assign({}, layout.font, {color: v("--ink")});
    layout.hoverlabel = Object.assign({bgcolor: v("--card"), bordercolor: v("--line"), font: {color: v("--ink")}}, layout.hoverlabel);
    Object.keys(layout).forEach(function (key) {
      if (/^[xy]axis\d*$/.test(key)) {
        layout[key] = Object.assign({}, layout[key], {gridcolor: v("--chart-grid"), linecolor: v("--line"), zerolinecolor: v("--line")});
      }
    });
    figure.data.forEach(function (trace) {  // the gauge's dial: its ticks and frame follow the ink
      if (trace.type === "indicator" && trace.gauge) {
        trace.gauge = Object.assign({bordercolor: v("--line")}, trace.gauge);
        trace.gauge.axis = Object.assign({tickcolor: v("--ink")}, trace.gauge.axis);
      }
    });
  }
  // the system switching between light and dark redraws every figure in the new colours
  if (darkScheme && darkScheme.addEventListener) {
    darkScheme.addEventListener("change", function () { draw(document.body); });
  }

  // On a phone the legend wraps onto several rows: make room for them above the plot (so it
  // never covers the title or an axis title) and give the plot the width the margins took.
  function fitNarrow(holder, figure) {
    var layout = figure.layout;
    if (!layout.legend || layout.showlegend === false || holder.clientWidth >= 600) return;
    var named = figure.data.filter(function (trace) { return trace.name && trace.showlegend !== false; });
    var rows = Math.ceil(named.length / 2);
    var right = layout.yaxis2 && layout.yaxis2.side === "right" ? 52 : 14;
    layout.margin = Object.assign({}, layout.margin, {l: 52, r: right, t: 52 + 24 * rows});
    layout.height = (layout.height || 320) + 24 * Math.max(0, rows - 1);
    // the title at the top of the chart, not centred in the margin the legend's rows now fill
    if (layout.title) layout.title = Object.assign({}, layout.title, {font: {size: 13}, y: 1, yref: "container", yanchor: "top", pad: {t: 12}});
    layout.legend = Object.assign({}, layout.legend, {font: {size: 11}});
  }

  // fitNarrow counts two legend entries a row; longer names wrap one a row and the legend, which
  // grows upwards from the plot, runs over the title. Measured once drawn: the plot and the
  // legend move down by the overlap, the chart growing by as much so the plot keeps its height.
  function clearTitle(holder) {
    var title = holder.querySelector(".gtitle");
    var legend = holder.querySelector(".legend");
    if (!title || !legend) return;
    var overlap = Math.ceil(title.getBoundingClientRect().bottom + 6 - legend.getBoundingClientRect().top);
    if (overlap <= 0) return;
    var layout = holder._fullLayout;
    var height = layout.height + overlap;
    holder.style.height = height + "px";
    // _size: the margins as drawn, the legend's push included
    Plotly.relayout(holder, {"margin.t": Math.max(layout.margin.t, layout._size.t) + overlap, height: height});
  }

  // Traces a fragment adds to a chart already drawn (the cache chart's miss markers, which
  // arrive after the page): <div data-traces-for="<chart id>" data-traces="<script id>">.
  // The fragment reloads on each live update: the traces it added before are replaced, not doubled.
  function addTraces(root) {
    root.querySelectorAll("[data-traces-for]").forEach(function (holder) {
      var target = document.getElementById(holder.dataset.tracesFor);
      var source = document.getElementById(holder.dataset.traces);
      if (!target || !source || typeof Plotly === "undefined" || !target.data) return;
      var old = [];
      target.data.forEach(function (trace, index) { if (trace.addedBy === holder.dataset.traces) old.push(index); });
      if (old.length) Plotly.deleteTraces(target, old);
      var traces = JSON.parse(source.textContent);
      traces.forEach(function (trace) { trace.addedBy = holder.dataset.traces; });
      Plotly.addTraces(target, traces);
    });
  }

  // A live update replaces parts of the session page: the <details> the operator had opened
  // (a summary, a tool call in the surface) stay open. A block is known by the nearest element
  // with an id around it, its summary's text and its rank among blocks of that same key.
  function openKeys(root) {
    var seen = {};
    var keys = [];
    root.querySelectorAll("details").forEach(function (details) {
      var holder = details.parentElement && details.parentElement.closest("[id]");
      var summary = details.querySelector("summary");
      var key = (holder ? holder.id : "") + "|" + (summary ? summary.textContent.trim() : "");
      seen[key] = (seen[key] || 0) + 1;
      keys.push({details: details, key: key + "|" + seen[key]});
    });
    return keys;
  }
  var keptOpen = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    if (!event.detail.elt || event.detail.elt.id !== "poller") return;
    keptOpen = {};
    openKeys(document).forEach(function (entry) { if (entry.details.open) keptOpen[entry.key] = true; });
  });
  function reopen() {
    if (!keptOpen) return;
    openKeys(document).forEach(function (entry) {
      if (keptOpen[entry.key] && !entry.details.open) entry.details.open = true;
    });
  }
  document.addEventListener("htmx:afterSettle", function (event) {
    if (!event.detail.elt || event.detail.elt.id !== "poller") return;
    reopen();
    keptOpen = null;
  });

  // A box that scrolls (a wide table, a long reason, a summary) must be reachable by keyboard
  // (WCAG 2.1.1; axe's scrollable-region-focusable): while its content overflows it takes focus,
  // as a region named after its section's heading, so the arrow keys scroll it.
  var SCROLLERS = ".table-wrap, pre, .block.text";
  function reachable(root) {
    var boxes = root.matches && root.matches(SCROLLERS) ? [root] : [];
    root.querySelectorAll(SCROLLERS).forEach(function (box) { boxes.push(box); });
    boxes.forEach(function (box) {
      var overflows = box.scrollWidth > box.clientWidth + 1 || box.scrollHeight > box.clientHeight + 1;
      if (overflows && !box.hasAttribute("tabindex")) {
        box.setAttribute("tabindex", "0");
        box.dataset.scrollFocus = "1";
        if (!box.hasAttribute("role")) box.setAttribute("role", "region");
        if (!box.hasAttribute("aria-label")) {
          var section = box.closest("section, .subsection, details");
          var heading = section && section.querySelector("h2, h3, summary");
          box.setAttribute("aria-label", (heading ? heading.textContent.trim() : "scrollable content") + " (scrolls)");
        }
      } else if (!overflows && box.dataset.scrollFocus) {
        box.removeAttribute("tabindex");
        delete box.dataset.scrollFocus;
      }
    });
  }
  var resizing = null;
  window.addEventListener("resize", function () {
    clearTimeout(resizing);
    resizing = setTimeout(function () { reachable(document.body); }, 150);
  });
  document.addEventListener("toggle", function (event) { reachable(event.target); }, true);

  htmx.onLoad(function (root) {
    reopen();
    draw(root);
    addTraces(root);
    reachable(root);
  });

  // The header menu collapses on phones (the CSS shows the toggle only there).
  document.documentElement.classList.replace("no-js", "js");
  document.addEventListener("click", function (event) {
    var toggle = event.target.closest && event.target.closest(".nav-toggle");
    if (!toggle) return;
    var open = toggle.closest("header").classList.toggle("open");
    toggle.setAttribute("aria-expanded", open ? "true" : "false");
  });

  // A select or checkbox marked data-autosubmit submits its form when changed (the overview's
  // profile, the period picker's zone and comparison).
  document.addEventListener("change", function (event) {
    if (event.target.matches && event.target.matches("[data-autosubmit]")) event.target.form.submit();
  });

  // The operator's time zone: the browser's, remembered in a cookie the server reads
  // (console.period_request) when a page is asked for without ?tz=. Asked once; a page with a
  // period picker drawn in another zone is drawn again in the browser's.
  (function rememberZone() {
    if (/(^|; )console_tz=/.test(document.cookie)) return;
    var zone;
    try { zone = Intl.DateTimeFormat().resolvedOptions().timeZone; } catch (e) { return; }
    if (!zone) return;
    document.cookie = "console_tz=" + encodeURIComponent(zone) + "; path=/; max-age=31536000; samesite=lax";
    var picker = document.getElementById("period-picker");
    if (picker && picker.dataset.zone !== zone && !/[?&]tz=/.test(window.location.search)) window.location.reload();
  })();

  // The overview's auto-refresh (#overview-poller asks only while this says yes): on unless the
  // operator switched it off (remembered for the tab), never while the tab is hidden.
  var REFRESH_KEY = "console-refresh-off";
  window.consoleRefreshOn = function () {
    var box = document.getElementById("auto-refresh-on");
    return !!box && box.checked && document.visibilityState === "visible";
  };
  function refreshState() {
    var box = document.getElementById("auto-refresh-on");
    var state = document.getElementById("refresh-state");
    if (!box || !state) return;
    state.textContent = !box.checked ? "off" : (document.visibilityState === "visible" ? "on" : "paused while the tab is hidden");
  }
  document.addEventListener("change", function (event) {
    if (event.target.id !== "auto-refresh-on") return;
    try { sessionStorage.setItem(REFRESH_KEY, event.target.checked ? "" : "1"); } catch (e) { /* private mode */ }
    refreshState();
  });
  document.addEventListener("visibilitychange", refreshState);
  // the poller's request is dropped while the switch is off or the tab hidden (a trigger filter
  // would be evaluated JavaScript, which the Content-Security-Policy forbids)
  document.addEventListener("htmx:beforeRequest", function (event) {
    if (event.detail.elt && event.detail.elt.id === "overview-poller" && !window.consoleRefreshOn()) event.preventDefault();
  });
  document.addEventListener("DOMContentLoaded", function () {
    var box = document.getElementById("auto-refresh-on");
    try { if (box && sessionStorage.getItem(REFRESH_KEY)) box.checked = false; } catch (e) { /* private mode */ }
    refreshState();
  });

  // A button marked data-copy="<element id>" copies that element's text (the new key, shown once)
  // and says so beside it; where the clipboard is refused it selects the text for a manual copy.
  document.addEventListener("click", function (event) {
    var button = event.target.closest && event.target.closest("button[data-copy]");
    if (!button) return;
    var source = document.getElementById(button.dataset.copy);
    var status = document.querySelector('[data-copy-status="' + button.dataset.copy + '"]');
    if (!source) return;
    function say(text) { if (status) status.textContent = text; }
    function select() {
      var range = document.createRange();
      range.selectNodeContents(source);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      say("Selected: press Ctrl+C (⌘C) to copy.");
    }
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(source.textContent.trim()).then(function () { say("Copied."); }, select);
    } else {
      select();
    }
  });

  document.addEventListener("submit", function (event) {
    var message = event.target.dataset && event.target.dataset.confirm;
    if (message && !window.confirm(message)) event.preventDefault();
  });
})();
