/* Antre dashboard behaviour (no inline scripts: the pages run under a strict CSP). Loaded in
 * <head> without defer, so the remembered theme applies before the first paint.
 *
 * - preferences kept per browser (localStorage): theme (system / light / dark), times (UTC /
 *   local), live updates (every 2/5/15/60 s or paused); the header's selects change them;
 * - polls ([data-poll]) only while the tab is visible, live updates are not paused, the chosen
 *   interval has passed, and the operator is not working inside the polled region (focus
 *   in it, rows selected, a reason typed): a refresh would wipe what they are doing;
 * - <time class="when" data-ms> reads "3 min ago", the absolute time on hover (title) and on
 *   keyboard focus (tabindex=0; data-abs, drawn by the stylesheet);
 * - counts lease time down between polls, relative to the server's "as of" time;
 * - draws Plotly charts from the JSON in [data-chart] (in the current theme and time zone)
 *   and builds their numbers as a table when the operator opens "Numbers as a table";
 * - selectable tables: "select all", the action bar's count, buttons enabled only with a
 *   selection;
 * - confirmations: hx-confirm / [data-confirm] open the page's <dialog class="confirm">;
 * - the "Menu" button opens the collapsed navigation on narrow screens;
 * - submits [data-autosubmit] selects on change. */
(function () {
  "use strict";

  var root = document.documentElement;
  root.classList.add("js");

  // -- preferences ---------------------------------------------------------------------------
  function pref(name, fallback) {
    try { return window.localStorage.getItem("antre." + name) || fallback; } catch (e) { return fallback; }
  }
  function setPref(name, value) {
    try { window.localStorage.setItem("antre." + name, value); } catch (e) { /* private mode */ }
  }
  function applyTheme() {
    var theme = pref("theme", "");
    if (theme === "light" || theme === "dark") { root.setAttribute("data-theme", theme); }
    else if (window.matchMedia && window.matchMedia("(prefers-color-scheme: dark)").matches) {
      root.setAttribute("data-theme", "dark");
    } else { root.setAttribute("data-theme", "light"); }
  }
  applyTheme();
  if (window.matchMedia) {
    var mq = window.matchMedia("(prefers-color-scheme: dark)");
    if (mq.addEventListener) { mq.addEventListener("change", function () { applyTheme(); drawCharts(document); }); }
  }
  function isDark() { return root.getAttribute("data-theme") === "dark"; }
  function useLocal() { return pref("tz", "utc") === "local"; }
  function liveEverySeconds() { return Number(pref("live", "2")); }

  function setupPrefs() {
    var box = document.querySelector("header .prefs");
    if (!box) { return; }
    box.hidden = false;
    var fields = {"pref-theme": ["theme", ""], "pref-tz": ["tz", "utc"], "pref-live": ["live", "2"]};
    Object.keys(fields).forEach(function (id) {
      var el = document.getElementById(id);
      if (!el) { return; }
      el.value = pref(fields[id][0], fields[id][1]);
      el.addEventListener("change", function () {
        setPref(fields[id][0], el.value);
        applyTheme();
        renderTimes(document);
        drawCharts(document);
        if (id === "pref-live") { pollNow(); }
      });
    });
  }

  // -- polling -------------------------------------------------------------------------------
  function busy(region) {
    var active = document.activeElement;
    if (active && active !== document.body && region.contains(active) &&
        !active.classList.contains("result")) { return true; }
    if (region.querySelector("input.sel-row:checked")) { return true; }
    return region.querySelector("form.dirty") !== null;
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) { return; }
    var every = liveEverySeconds();
    var last = Number(elt.dataset.polledAt || 0);
    var forced = elt.dataset.forcePoll === "1";
    elt.dataset.forcePoll = "";
    var first = !last;  // a region filled on "load" (e.g. the charts) always loads once
    if (!first && (document.visibilityState !== "visible" || busy(elt) ||
        (!forced && (every === 0 || Date.now() - last < every * 1000 - 200)))) {
      evt.preventDefault();
      return;
    }
    elt.dataset.polledAt = String(Date.now());
  });

  function pollNow() {
    if (!window.htmx || liveEverySeconds() === 0) { return; }
    document.querySelectorAll("[data-poll]").forEach(function (el) {
      el.dataset.forcePoll = "1";
      window.htmx.trigger(el, "poll-now");
    });
  }

  document.addEventListener("input", function (evt) {
    var t = evt.target;
    var form = t && t.form;
    if (form && form.closest("[data-poll]") && t.type !== "checkbox") { form.classList.add("dirty"); }
  });

  document.addEventListener("change", function (evt) {
    var t = evt.target;
    if (t && t.hasAttribute && t.hasAttribute("data-autosubmit") && t.form) { t.form.requestSubmit(); }
    if (t && t.classList && (t.classList.contains("sel-all") || t.classList.contains("sel-row"))) {
      onSelect(t);
    }
  });

  // -- times ---------------------------------------------------------------------------------
  function pad(n) { return String(n).padStart(2, "0"); }
  function absolute(ms) {
    var d = new Date(ms);
    if (useLocal()) {
      var off = -d.getTimezoneOffset(), sign = off < 0 ? "-" : "+";
      off = Math.abs(off);
      return d.getFullYear() + "-" + pad(d.getMonth() + 1) + "-" + pad(d.getDate()) + " " +
        pad(d.getHours()) + ":" + pad(d.getMinutes()) + ":" + pad(d.getSeconds()) +
        " UTC" + sign + pad(Math.floor(off / 60)) + ":" + pad(off % 60);
    }
    return d.toISOString().replace("T", " ").replace(/\.\d+Z$/, " UTC");
  }
  function relative(ms) {
    var s = Math.round((Date.now() - ms) / 1000), future = s < 0;
    s = Math.abs(s);
    var text;
    if (s < 5 && !future) { return "just now"; }  // a deadline seconds away is not "just now"
    if (s < 60) { text = (future ? Math.max(1, s) : s) + " s"; }
    else if (s < 3600) { text = Math.floor(s / 60) + " min"; }
    else if (s < 172800) { text = Math.floor(s / 3600) + " h " + pad(Math.floor(s % 3600 / 60)) + " min"; }
    else { text = Math.floor(s / 86400) + " days"; }
    return future ? "in " + text : text + " ago";
  }
  function renderTimes(scope) {
    scope.querySelectorAll("time.when[data-ms]").forEach(function (el) {
      var ms = Number(el.dataset.ms);
      el.textContent = relative(ms);
      el.title = absolute(ms);
      el.dataset.abs = el.title;  // shown beside it while it has the keyboard focus (CSS)
    });
  }

  function fmt(ms) {
    var s = ms / 1000, sign = s < 0 ? "-" : "";
    s = Math.abs(s);
    if (s < 60) { return sign + s.toFixed(1) + "s"; }
    if (s < 3600) { return sign + Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s"; }
    return sign + Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  }

  function stampCountdowns(scope) {
    scope.querySelectorAll(".countdown[data-deadline]").forEach(function (el) {
      if (!el.dataset.offset) {
        el.dataset.offset = String(Number(el.dataset.asOf) - Date.now());
      }
    });
  }

  function tick() {
    document.querySelectorAll(".countdown[data-deadline]").forEach(function (el) {
      var now = Date.now() + Number(el.dataset.offset || 0);
      var left = Number(el.dataset.deadline) - now;
      el.textContent = left > 0 ? fmt(left) : "expired";
      var row = el.closest("tr");
      if (row) {
        row.classList.toggle("expiring", left < Number(el.dataset.warnMs || 5000));
        row.classList.toggle("expired", left <= 0);
      }
    });
  }

  // -- charts --------------------------------------------------------------------------------
  function shifted(xs) {
    if (!useLocal()) { return xs; }
    return xs.map(function (x) { return x - new Date(x).getTimezoneOffset() * 60000; });
  }
  function themed(layout) {
    var fg = isDark() ? "#e6e9ed" : "#1d232a", grid = isDark() ? "#38414b" : "#e3e7eb";
    var bg = isDark() ? "#1d2329" : "#ffffff";
    var out = Object.assign({}, layout, {paper_bgcolor: bg, plot_bgcolor: bg, font: {color: fg}});
    out.xaxis = Object.assign({}, layout.xaxis || {}, {gridcolor: grid, linecolor: grid});
    if ((layout.xaxis || {}).type === "date") { out.xaxis.title = {text: useLocal() ? "local time" : "UTC"}; }
    out.yaxis = Object.assign({}, layout.yaxis || {}, {gridcolor: grid, linecolor: grid});
    out.shapes = (layout.shapes || []).map(function (s) {
      return Object.assign({}, s, {x0: shifted([s.x0])[0], x1: shifted([s.x1])[0]});
    });
    return out;
  }
  function drawCharts(scope) {
    if (typeof window.Plotly === "undefined") { return; }
    scope.querySelectorAll("[data-chart]").forEach(function (el) {
      var fig = JSON.parse(el.getAttribute("data-chart") || "null");
      if (!fig) { return; }
      var target = el.querySelector(".plot");
      if (!target) { target = document.createElement("div"); target.className = "plot"; el.insertBefore(target, el.firstChild); }
      var dated = ((fig.layout || {}).xaxis || {}).type === "date";  // (a histogram's x: buckets)
      var data = fig.data.map(function (t) { return dated ? Object.assign({}, t, {x: shifted(t.x)}) : t; });
      window.Plotly.react(target, data, themed(fig.layout), {displaylogo: false, responsive: true});
    });
  }
  document.addEventListener("toggle", function (evt) {
    var det = evt.target;
    if (!det.classList || !det.classList.contains("chart-table") || !det.open) { return; }
    var holder = det.closest("[data-chart]");
    var box = det.querySelector(".table-wrap");
    if (!holder || !box) { return; }
    var fig = JSON.parse(holder.getAttribute("data-chart") || "null");
    var lines = fig.data.filter(function (t) { return t.mode === "lines"; });
    var table = document.createElement("table");
    table.className = "grid";
    var cap = table.createCaption();
    cap.textContent = (fig.layout.title && fig.layout.title.text) || "chart";
    var head = table.createTHead().insertRow();
    [useLocal() ? "Time (local)" : "Time (UTC)"].concat(lines.map(function (t) { return t.name; }))
      .forEach(function (name) { var th = document.createElement("th"); th.scope = "col"; th.textContent = name; head.appendChild(th); });
    var body = table.createTBody();
    var xs = lines.length ? lines[0].x : [];
    for (var i = xs.length - 1; i >= 0; i--) {
      var row = body.insertRow();
      row.insertCell().textContent = absolute(xs[i]);
      lines.forEach(function (t) {
        var v = t.y[i];
        row.insertCell().textContent = typeof v === "number" ? (Math.round(v * 10) / 10).toString() : "";
      });
    }
    box.replaceChildren(table);
  }, true);

  // -- selection and the action bar ----------------------------------------------------------
  function onSelect(box) {
    var form = box.form || box.closest("form");
    if (!form) { return; }
    if (box.classList.contains("sel-all")) {
      form.querySelectorAll("input.sel-row").forEach(function (r) { r.checked = box.checked; });
    }
    refreshBar(form);
  }
  function refreshBar(form) {
    var n = form.querySelectorAll("input.sel-row:checked").length;
    var all = form.querySelector("input.sel-all");
    var rows = form.querySelectorAll("input.sel-row").length;
    if (all) { all.checked = rows > 0 && n === rows; all.indeterminate = n > 0 && n < rows; }
    form.querySelectorAll(".action-bar .count").forEach(function (el) {
      el.textContent = n === 1 ? "1 selected" : n + " selected";
    });
    form.querySelectorAll(".action-bar button[data-needs-selection]").forEach(function (b) {
      b.disabled = n === 0;
    });
  }
  function setupSelection(scope) {
    scope.querySelectorAll("form.selectable").forEach(refreshBar);
  }

  // -- confirmation dialog -------------------------------------------------------------------
  function ask(question, onYes) {
    var dialog = document.getElementById("confirm");
    if (!dialog || typeof dialog.showModal !== "function") { onYes(); return; }
    dialog.querySelector(".question").textContent = question;
    var done = function (evt) {
      var value = evt.target && evt.target.value;
      if (value !== "yes" && value !== "no") { return; }
      dialog.removeEventListener("click", done);
      dialog.close();
      if (value === "yes") { onYes(); }
    };
    dialog.addEventListener("click", done);
    dialog.showModal();
    var yes = dialog.querySelector("button[value=yes]");
    if (yes) { yes.focus(); }
  }
  function question(elt) {
    var q = elt.getAttribute("hx-confirm") || elt.getAttribute("data-confirm") || "";
    var form = elt.form || elt.closest("form");
    var n = form ? form.querySelectorAll("input.sel-row:checked").length : 0;
    return q.replace("{n}", n === 1 ? "1 job" : n + " jobs");
  }
  document.addEventListener("htmx:confirm", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (!elt || !elt.getAttribute("hx-confirm")) { return; }
    evt.preventDefault();
    ask(question(elt), function () { evt.detail.issueRequest(true); });
  });
  document.addEventListener("click", function (evt) {
    var b = evt.target && evt.target.closest ? evt.target.closest("button[data-confirm]") : null;
    if (!b || b.dataset.confirmed === "1" || b.hasAttribute("hx-post")) { return; }
    var form = b.form;
    if (!form || !form.checkValidity()) { return; }
    evt.preventDefault();
    ask(question(b), function () { b.dataset.confirmed = "1"; form.requestSubmit(b); b.dataset.confirmed = ""; });
  });

  // an action refused (4xx) or failed: htmx swaps nothing by default, so say it in place
  document.addEventListener("htmx:responseError", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (!elt || (elt.hasAttribute && elt.hasAttribute("data-poll"))) { return; }
    var xhr = evt.detail.xhr, text = "";
    try {
      var doc = new DOMParser().parseFromString(xhr.responseText || "", "text/html");
      var p = doc.querySelector(".refused");
      text = p ? p.textContent : "";
    } catch (e) { text = ""; }
    var box = document.createElement("div");
    box.className = "result error";
    box.setAttribute("role", "alert");
    box.textContent = "Not done (" + xhr.status + "): " + (text || xhr.statusText || "the server refused");
    var where = (evt.detail.target && evt.detail.target.isConnected) ? evt.detail.target : document.getElementById("main");
    where.insertBefore(box, where.firstChild);
  });

  // -- navigation ----------------------------------------------------------------------------
  document.addEventListener("click", function (evt) {
    var b = evt.target && evt.target.closest ? evt.target.closest(".menu-toggle") : null;
    if (!b) { return; }
    var header = b.closest("header");
    var open = !header.classList.contains("open");
    header.classList.toggle("open", open);
    b.setAttribute("aria-expanded", open ? "true" : "false");
  });

  function setup(scope) {
    stampCountdowns(scope);
    tick();
    renderTimes(scope);
    drawCharts(scope);
    setupSelection(scope);
  }

  document.addEventListener("DOMContentLoaded", function () {
    // regions drawn with the page count as just polled; those filled on "load" do not
    document.querySelectorAll("[data-poll]").forEach(function (el) {
      if (!/(^|[ ,])load([ ,]|$)/.test(el.getAttribute("hx-trigger") || "")) {
        el.dataset.polledAt = String(Date.now());
      }
    });
    setupPrefs();
    setup(document);
    window.setInterval(tick, 250);
    window.setInterval(function () { renderTimes(document); }, 1000);
  });
  document.addEventListener("htmx:afterSettle", function (evt) {
    setup(evt.detail.elt || document);
    // after an action (not a poll) the button that was pressed is gone: keyboard focus goes to
    // the result, which screen readers also announce (role=status)
    var cfg = evt.detail.requestConfig;
    if (cfg && cfg.verb === "post" && evt.detail.target) {
      var result = evt.detail.target.querySelector(".result");
      if (result) { result.focus(); }
    }
  });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible") { pollNow(); }
  });
})();
