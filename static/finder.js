/* The finder: "/" focuses the header's finder box from anywhere but a form field;
 * a payload search's Stop button ends the chain of htmx steps (no inline scripts: strict CSP). */
(function () {
  "use strict";

  document.addEventListener("keydown", function (evt) {
    if (evt.key !== "/" || evt.ctrlKey || evt.metaKey || evt.altKey) { return; }
    var active = document.activeElement;
    if (active && (/^(INPUT|TEXTAREA|SELECT)$/.test(active.tagName) || active.isContentEditable)) { return; }
    var box = document.querySelector("[data-finder]");
    if (box) { evt.preventDefault(); box.focus(); box.select(); }
  });

  function stop() {
    var more = document.getElementById("search-more");
    if (!more || !more.hasAttribute("hx-get")) { return; }
    more.setAttribute("data-stopped", "1");
    more.removeAttribute("hx-get");
    var cell = more.querySelector("td");
    if (cell) { cell.textContent = "Stopped. " + cell.textContent.replace(/^Searching… /, ""); }
    var button = document.querySelector("[data-stop-search]");
    if (button) { button.remove(); }
  }

  document.addEventListener("click", function (evt) {
    var t = evt.target;
    if (t && t.closest && t.closest("[data-stop-search]")) { stop(); }
  });

  document.addEventListener("htmx:beforeRequest", function (evt) {
    var elt = evt.detail && evt.detail.elt;
    if (elt && elt.hasAttribute && elt.hasAttribute("data-stopped")) { evt.preventDefault(); }
  });

  document.addEventListener("htmx:afterSwap", function () {
    // keep the status line in step with the last step's row
    var more = document.getElementById("search-more");
    var status = document.getElementById("search-progress");
    if (!more || !status) { return; }
    var cell = more.querySelector("td");
    var text = document.getElementById("search-status-text");
    if (cell && text) { text.textContent = cell.textContent; }
    if (!more.hasAttribute("hx-get")) {
      var button = document.querySelector("[data-stop-search]");
      if (button) { button.remove(); }
    }
  });
}());
