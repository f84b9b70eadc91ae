// Live regions that do not fight the operator. Every element with data-live is refreshed on the
// interval the operator chose (off / 2 / 5 / 15 s, remembered in localStorage): the server answers
// with the same htmx fragment as before, and instead of swapping the region whole it is morphed in
// place, so the focused element, an open <details>, typed text and checked boxes survive. Refreshing
// waits while the operator types, selects text, has a select focused or has a box ticked. Changes to
// counts are announced in a polite live region ("orders ready 12 -> 15").
(function () {
  "use strict";
  var STORE = "delayq.refreshSeconds";
  var CHOICES = [0, 2, 5, 15];
  var DEFAULT_SECONDS = 5;
  var PAUSE_RECHECK_MS = 500;
  var LIVE_HEADER = "X-Delayq-Live";
  var timer = null;
  var refreshes = 0;

  function chosenSeconds() {
    var stored = null;
    try { stored = localStorage.getItem(STORE); } catch (e) { /* private mode: default */ }
    var n = stored === null ? DEFAULT_SECONDS : Number(stored);
    return CHOICES.indexOf(n) >= 0 ? n : DEFAULT_SECONDS;
  }

  // The refresh control's own data-live (its state: on, off, paused) is not a region's URL: without
  // the :not() every tick also asked for "<page>/on" (a 404).
  function regions() { return Array.prototype.slice.call(document.querySelectorAll("[data-live]:not(#live-control)")); }

  // Why a refresh would get in the way now, or "" when it would not.
  function pauseReason() {
    var active = document.activeElement;
    if (active && active.closest && !active.closest(".live-control")) {
      var tag = active.tagName;
      var type = (active.getAttribute("type") || "text").toLowerCase();
      if (tag === "TEXTAREA" || active.isContentEditable ||
          (tag === "INPUT" && ["checkbox", "radio", "button", "submit", "reset"].indexOf(type) < 0)) {
        return "while you type";
      }
      if (tag === "SELECT") return "while a list is open";
    }
    var selection = window.getSelection && window.getSelection();
    if (selection && !selection.isCollapsed && String(selection).trim()) return "while text is selected";
    if (regions().some(function (r) { return r.querySelector("input[type=checkbox]:checked"); })) {
      return "while rows are selected";
    }
    return "";
  }

  // ---- morph -------------------------------------------------------------------------------

  var KEY_ATTRS = ["id", "data-key", "data-topic", "data-group", "data-worker", "data-id", "data-state",
                   "data-fingerprint", "data-testid", "data-sort", "name"];

  function keyOf(node) {
    if (node.nodeType !== 1) return null;
    var parts = [];
    KEY_ATTRS.forEach(function (a) { if (node.hasAttribute(a)) parts.push(a + "=" + node.getAttribute(a)); });
    return parts.length ? node.tagName + "|" + parts.join("|") : null;
  }

  // Keys made unique among siblings (the row buttons all share name=action): the nth of a kind.
  function siblingKeys(nodes) {
    var seen = {};
    return nodes.map(function (n) {
      var k = keyOf(n);
      if (k === null) return null;
      seen[k] = (seen[k] || 0) + 1;
      return k + "#" + seen[k];
    });
  }

  function syncAttributes(from, to) {
    var isDetails = from.tagName === "DETAILS";
    Array.prototype.slice.call(from.attributes).forEach(function (attr) {
      if (isDetails && attr.name === "open") return;   // the operator's choice, not the server's
      if (attr.name === "data-utc" || attr.name === "data-armed") return;   // delayq.js bookkeeping
      if (!to.hasAttribute(attr.name)) from.removeAttribute(attr.name);
    });
    Array.prototype.slice.call(to.attributes).forEach(function (attr) {
      if (isDetails && attr.name === "open") return;
      if (attr.name === "value" && from.tagName === "INPUT" && from.type !== "hidden") return;   // typed text
      if (attr.name === "checked" || attr.name === "selected") return;
      if (from.getAttribute(attr.name) !== attr.value) from.setAttribute(attr.name, attr.value);
    });
  }

  function morph(from, to) {
    if (from.nodeType === 3 || from.nodeType === 8) {
      if (from.nodeValue !== to.nodeValue) from.nodeValue = to.nodeValue;
      return;
    }
    syncAttributes(from, to);
    // A <time> whose instant did not change keeps its (possibly local-time) text.
    if (from.tagName === "TIME" && from.dataset.utc && from.getAttribute("datetime") === to.getAttribute("datetime")) return;
    if (from.tagName === "TEXTAREA" || from.tagName === "SELECT") return;   // the operator's value
    morphChildren(from, to);
  }

  function sameKind(a, b) {
    return a.nodeType === b.nodeType && (a.nodeType !== 1 || a.tagName === b.tagName);
  }

  function morphChildren(from, to) {
    var oldKids = Array.prototype.slice.call(from.childNodes);
    var oldKeys = siblingKeys(oldKids), freshKids = Array.prototype.slice.call(to.childNodes);
    var freshKeys = siblingKeys(freshKids);
    var keyed = {};
    oldKids.forEach(function (n, i) { if (oldKeys[i] !== null) keyed[oldKeys[i]] = n; });
    var used = new Set();
    var unkeyedAt = 0;
    var cursor = from.firstChild;
    freshKids.forEach(function (fresh, i) {
      var k = freshKeys[i];
      var match = null;
      if (k !== null) {
        if (keyed[k] && !used.has(keyed[k])) match = keyed[k];
      } else {
        while (unkeyedAt < oldKids.length) {
          var candidate = oldKids[unkeyedAt++];
          if (!used.has(candidate) && oldKeys[unkeyedAt - 1] === null && sameKind(candidate, fresh)) { match = candidate; break; }
        }
      }
      if (match) {
        used.add(match);
        morph(match, fresh);
        // Only move what is out of place: moving a node would take focus from it.
        if (match !== cursor) from.insertBefore(match, cursor);
        cursor = match.nextSibling;
      } else {
        var added = document.importNode(fresh, true);
        from.insertBefore(added, cursor);
        cursor = added.nextSibling;
      }
    });
    oldKids.forEach(function (n) { if (!used.has(n) && n.parentNode === from) from.removeChild(n); });
  }

  // ---- announcements -----------------------------------------------------------------------

  function countLabel(el) {
    var row = el.closest("[data-topic], [data-worker]");
    var parts = [];
    if (row && row.dataset.topic) parts.push(row.dataset.topic + (row.dataset.group ? "/" + row.dataset.group : ""));
    if (row && row.dataset.worker) parts.push(row.dataset.worker);
    parts.push(el.dataset.state);
    return parts.join(" ");
  }

  function readCounts(region) {
    var counts = {};
    region.querySelectorAll("[data-state]").forEach(function (el) {
      var number = el.querySelector(".n, [data-testid=tab-count]") || el;
      var text = number.textContent.trim();
      if (/^\d+$/.test(text)) counts[countLabel(el)] = Number(text);
    });
    return counts;
  }

  function rowIds(region) {
    return new Set(Array.prototype.map.call(region.querySelectorAll("tr[data-id]"), function (tr) { return tr.dataset.id; }));
  }

  function describeChanges(before, after, rowsBefore, rowsAfter) {
    var changes = [];
    Object.keys(after).forEach(function (label) {
      if (label in before && before[label] !== after[label]) changes.push(label + " " + before[label] + " -> " + after[label]);
    });
    var added = 0, removed = 0;
    rowsAfter.forEach(function (id) { if (!rowsBefore.has(id)) added++; });
    rowsBefore.forEach(function (id) { if (!rowsAfter.has(id)) removed++; });
    if (added) changes.push(added + " new message" + (added > 1 ? "s" : ""));
    if (removed) changes.push(removed + " message" + (removed > 1 ? "s" : "") + " gone");
    if (changes.length > 5) changes = changes.slice(0, 5).concat(["and " + (changes.length - 5) + " more changes"]);
    return changes.join("; ");
  }

  // One sentence per refresh round: the regions of a page answer separately, and a later answer
  // must not talk over an earlier one.
  var heard = [];

  function announce(text) {
    var out = document.getElementById("live-announce");
    if (!out || !text) return;
    text.split("; ").forEach(function (part) { if (heard.indexOf(part) < 0) heard.push(part); });
    out.textContent = heard.join("; ");
  }

  // ---- refreshing --------------------------------------------------------------------------

  function regionUrl(region) {
    var url = region.getAttribute("data-live") || window.location.pathname;
    return region.hasAttribute("data-live-query") ? url + window.location.search : url;
  }

  function refreshNow() {
    if (!window.htmx) return;
    heard = [];
    regions().forEach(function (region) {
      var headers = {};
      headers[LIVE_HEADER] = "1";
      window.htmx.ajax("GET", regionUrl(region), { source: region, target: region, swap: "outerHTML", headers: headers });
    });
  }

  document.addEventListener("htmx:beforeSwap", function (event) {
    var detail = event.detail;
    var headers = detail.requestConfig && detail.requestConfig.headers;
    var region = detail.target;
    if (!headers || headers[LIVE_HEADER] !== "1" || !region || !region.hasAttribute("data-live")) return;
    if (!detail.xhr || detail.xhr.status !== 200) { detail.shouldSwap = false; return; }
    detail.shouldSwap = false;
    var doc = new DOMParser().parseFromString(detail.serverResponse, "text/html");
    var fresh = doc.getElementById(region.id);
    if (!fresh) return;
    var before = readCounts(region), rowsBefore = rowIds(region);
    morph(region, fresh);
    refreshes += 1;
    region.setAttribute("data-refreshes", String(refreshes));
    // Messages for the toasts come out of band; a morphed refresh still shows them.
    var toasts = doc.getElementById("delayq-messages"), here = document.getElementById("delayq-messages");
    if (toasts && here && toasts.querySelector("li")) here.innerHTML = toasts.innerHTML;
    window.htmx.process(region);
    announce(describeChanges(before, readCounts(region), rowsBefore, rowIds(region)));
    // delayq.js re-applies local times (and arms toasts) on settle; a morph is a settle too.
    region.dispatchEvent(new CustomEvent("htmx:afterSettle", { bubbles: true, detail: { elt: region } }));
  });

  function setStatus(text) {
    var status = document.getElementById("live-status");
    if (status && status.textContent !== text) status.textContent = text;
  }

  function schedule() {
    clearTimeout(timer);
    var seconds = chosenSeconds();
    var control = document.getElementById("live-control");
    if (!seconds) {
      if (control) control.dataset.live = "off";
      setStatus("");
      return;
    }
    timer = setTimeout(function tick() {
      var reason = document.visibilityState === "visible" ? pauseReason() : "while the tab is hidden";
      if (control) control.dataset.live = reason ? "paused" : "on";
      if (reason) {
        setStatus("paused " + reason);
        timer = setTimeout(tick, PAUSE_RECHECK_MS);
        return;
      }
      setStatus("");
      refreshNow();
      schedule();
    }, seconds * 1000);
    if (control) control.dataset.live = "on";
  }

  function buildControl(first) {
    var box = document.createElement("div");
    box.id = "live-control";
    box.className = "live-control";
    box.setAttribute("data-testid", "live-control");
    var label = document.createElement("label");
    label.append("Refresh ");
    var select = document.createElement("select");
    select.id = "live-interval";
    select.setAttribute("data-testid", "live-interval");
    CHOICES.forEach(function (n) {
      var option = document.createElement("option");
      option.value = String(n);
      option.textContent = n ? "every " + n + " s" : "off";
      select.appendChild(option);
    });
    select.value = String(chosenSeconds());
    label.appendChild(select);
    var status = document.createElement("small");
    status.id = "live-status";
    status.className = "muted";
    status.setAttribute("data-testid", "live-status");
    var spoken = document.createElement("div");
    spoken.id = "live-announce";
    spoken.setAttribute("aria-live", "polite");
    spoken.setAttribute("data-testid", "live-announce");
    spoken.style.cssText = "position:absolute;width:1px;height:1px;overflow:hidden;clip:rect(0 0 0 0);white-space:nowrap";
    box.append(label, " ", status, spoken);
    select.addEventListener("change", function () {
      try { localStorage.setItem(STORE, select.value); } catch (e) { /* private mode: this page only */ }
      schedule();
    });
    first.parentNode.insertBefore(box, first);
  }

  function start() {
    var live = regions();
    if (!live.length || document.getElementById("live-control")) return;
    buildControl(live[0]);
    schedule();
  }

  // Other scripts (a keyboard shortcut) ask for a refresh now with this event.
  document.addEventListener("delayq:refresh", refreshNow);
  document.addEventListener("DOMContentLoaded", start);
  if (document.readyState !== "loading") start();
})();
