// Keyboard shortcuts: / search, ? help, g o / g w / g a go to a page, j / k move the current
// message row, x selects it, r refreshes the page's live regions in place (live.js). Every shortcut has a clickable
// equivalent; this file only saves reaching for the mouse.
(function () {
  "use strict";
  var HELP = [
    ["/", "Focus the search box (the page's query, else find)"], ["?", "Show this list"], ["g o", "Go to the overview"],
    ["g w", "Go to workers"], ["g a", "Go to the audit log"], ["j / k", "Next / previous message row"],
    ["x", "Select the current row"], ["r", "Refresh this page's figures now, in place"], ["Esc", "Leave a field, close this list"]
  ];
  var pendingG = false;
  var current = null;   // the current row's id: rows are swapped by htmx, so keep the id, not the node

  // Typing in a field, or a modifier combination, belongs to the browser, not to us.
  function typing(event) {
    var el = event.target;
    return event.ctrlKey || event.metaKey || event.altKey || el.isContentEditable ||
      /^(INPUT|TEXTAREA|SELECT)$/.test(el.tagName);
  }

  function rows() { return Array.prototype.slice.call(document.querySelectorAll("#messages tbody tr[data-id]")); }

  function mark(row, quiet) {
    rows().forEach(function (r) { r.classList.remove("current-row"); r.removeAttribute("aria-current"); });
    if (!row) { current = null; return; }
    current = row.dataset.id;
    row.classList.add("current-row");
    row.setAttribute("aria-current", "true");
    if (!quiet) row.scrollIntoView({ block: "nearest" });
  }

  function move(step) {
    var all = rows();
    if (!all.length) return;
    var at = all.findIndex(function (r) { return r.dataset.id === current; });
    var next = at < 0 ? (step > 0 ? 0 : all.length - 1) : Math.min(all.length - 1, Math.max(0, at + step));
    mark(all[next]);
  }

  function currentRow() {
    return rows().find(function (r) { return r.dataset.id === current; }) || null;
  }

  // The page's own box (a tab's query), else the header's find box.
  function search() {
    var box = document.querySelector("main input[type=search]") || document.querySelector("header input[type=search]");
    if (box) { box.focus(); box.select(); }
  }

  // The page's live regions (live.js), fetched again now and morphed in place: focus, open
  // panels and ticked rows stay. A page without any: its first polling region, else a reload.
  function refresh() {
    if (document.querySelector("[data-live]")) {
      document.dispatchEvent(new CustomEvent("delayq:refresh"));
      return;
    }
    var region = document.querySelector("main section[id][hx-get]");
    if (!region || !window.htmx) { window.location.reload(); return; }
    window.htmx.ajax("GET", region.getAttribute("hx-get"), { target: "#" + region.id, swap: "outerHTML" });
  }

  function helpDialog() {
    var dialog = document.getElementById("shortcuts-help");
    if (dialog) return dialog;
    dialog = document.createElement("dialog");
    dialog.id = "shortcuts-help";
    dialog.setAttribute("aria-labelledby", "shortcuts-title");
    var html = '<h2 id="shortcuts-title">Keyboard shortcuts</h2><dl class="shortcuts">';
    HELP.forEach(function (h) { html += "<dt><kbd>" + h[0] + "</kbd></dt><dd>" + h[1] + "</dd>"; });
    html += "</dl>";
    // On a page with queries (a state tab, find), the query syntax comes with the shortcuts.
    var syntax = document.getElementById("query-syntax");
    if (syntax) html += '<h2>Query syntax</h2><div data-testid="help-query-syntax">' + syntax.innerHTML + "</div>";
    dialog.innerHTML = html + '<form method="dialog"><button type="submit">Close</button></form>';
    document.body.appendChild(dialog);
    return dialog;
  }

  document.addEventListener("keydown", function (event) {
    if (event.key === "Escape" && typing(event) && !event.ctrlKey && !event.metaKey) {
      event.target.blur();
      return;
    }
    if (typing(event) || event.defaultPrevented) return;
    var open = document.querySelector("dialog[open]");
    if (open) return;   // the dialog has its own keys (Esc closes it)
    if (pendingG) {
      pendingG = false;
      var nav = document.querySelector('nav[aria-label="main"]');
      var url = nav && /^[owa]$/.test(event.key) && nav.getAttribute("data-go-" + event.key);
      if (url) { event.preventDefault(); window.location.assign(url); }
      return;
    }
    switch (event.key) {
      case "/": event.preventDefault(); search(); break;
      case "?": event.preventDefault(); helpDialog().showModal(); break;
      case "g": pendingG = true; setTimeout(function () { pendingG = false; }, 1500); break;
      case "j": move(1); break;
      case "k": move(-1); break;
      case "x": {
        var box = currentRow() && currentRow().querySelector("input[type=checkbox]");
        if (box) box.click();
        break;
      }
      case "r": refresh(); break;
      default: return;
    }
  });

  // A refresh or a tab change swaps the rows: put the marker back on the same message if it is there.
  document.addEventListener("htmx:afterSettle", function () { if (current) mark(currentRow(), true); });
})();
