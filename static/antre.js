/* Antre dashboard behaviour (no inline scripts: the pages run under a strict CSP).
 * - polls ([data-poll]) only while the tab is visible, and never while the operator is typing
 *   in a form inside the polled region (the refresh would wipe the input);
 * - counts lease time down between polls, relative to the server's "as of" time;
 * - draws Plotly charts from the JSON in [data-chart] attributes;
 * - submits [data-autosubmit] selects on change. */
(function () {
  "use strict";

  function busy(region) {
    var active = document.activeElement;
    if (active && region.contains(active) && /^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName)) {
      return true;
    }
    return region.querySelector("form.dirty") !== null;
  }

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (!elt || !elt.hasAttribute || !elt.hasAttribute("data-poll")) { return; }
    if (document.visibilityState !== "visible" || busy(elt)) { evt.preventDefault(); }
  });

  document.addEventListener("input", function (evt) {
    var form = evt.target && evt.target.form;
    if (form && form.closest("[data-poll]")) { form.classList.add("dirty"); }
  });

  document.addEventListener("change", function (evt) {
    var t = evt.target;
    if (t && t.hasAttribute && t.hasAttribute("data-autosubmit") && t.form) { t.form.requestSubmit(); }
  });

  function fmt(ms) {
    var s = ms / 1000, sign = s < 0 ? "-" : "";
    s = Math.abs(s);
    if (s < 60) { return sign + s.toFixed(1) + "s"; }
    if (s < 3600) { return sign + Math.floor(s / 60) + "m" + String(Math.floor(s % 60)).padStart(2, "0") + "s"; }
    return sign + Math.floor(s / 3600) + "h" + String(Math.floor(s % 3600 / 60)).padStart(2, "0") + "m";
  }

  function stampCountdowns(root) {
    root.querySelectorAll(".countdown[data-deadline]").forEach(function (el) {
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

  function drawCharts(root) {
    if (typeof window.Plotly === "undefined") { return; }
    root.querySelectorAll("[data-chart]").forEach(function (el) {
      var fig = JSON.parse(el.getAttribute("data-chart") || "null");
      if (!fig) { return; }
      var target = el.querySelector(".plot");
      if (!target) { target = document.createElement("div"); target.className = "plot"; el.appendChild(target); }
      window.Plotly.react(target, fig.data, fig.layout, {displaylogo: false, responsive: true});
    });
  }

  function setup(root) { stampCountdowns(root); tick(); drawCharts(root); }

  document.addEventListener("DOMContentLoaded", function () {
    setup(document);
    window.setInterval(tick, 250);
  });
  document.addEventListener("htmx:afterSettle", function (evt) { setup(evt.detail.elt || document); });
  document.addEventListener("visibilitychange", function () {
    if (document.visibilityState === "visible" && window.htmx) {
      document.querySelectorAll("[data-poll]").forEach(function (el) { window.htmx.trigger(el, "poll-now"); });
    }
  });
})();
