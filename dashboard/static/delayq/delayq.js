// The console's small behaviours: the local-time toggle, reschedule presets, dismissable toasts,
// the phone's Menu button.
// The server always writes UTC with the zone named (templatetags/delayq.py); everything here is an
// extra that the pages work without.
(function () {
  "use strict";
  var STORE = "delayq.localTime";
  var zone = Intl.DateTimeFormat().resolvedOptions().timeZone || "local time";

  function pad(n, width) { return String(n).padStart(width || 2, "0"); }

  function localText(date, withMs) {
    var text = date.getFullYear() + "-" + pad(date.getMonth() + 1) + "-" + pad(date.getDate()) + " " +
      pad(date.getHours()) + ":" + pad(date.getMinutes()) + ":" + pad(date.getSeconds());
    return text + (withMs ? "." + pad(date.getMilliseconds(), 3) : "") + " " + zone;
  }

  function localOn() {
    try { return localStorage.getItem(STORE) === "1"; } catch (e) { return false; }
  }

  // Rewrites every <time datetime> under root to the browser's zone, or back to the server's UTC
  // text (kept in data-utc), so swapped-in rows follow the toggle too.
  function applyTimes(root) {
    var on = localOn();
    (root || document).querySelectorAll("time[datetime]").forEach(function (el) {
      if (!el.dataset.utc) el.dataset.utc = el.textContent;
      if (!on) { el.textContent = el.dataset.utc; return; }
      var date = new Date(el.getAttribute("datetime"));
      if (!isNaN(date)) el.textContent = localText(date, el.dataset.utc.indexOf(".") >= 0);
    });
    var toggle = document.getElementById("local-time-toggle");
    if (toggle) {
      toggle.setAttribute("aria-pressed", on ? "true" : "false");
      toggle.title = on ? "Times are shown in " + zone + "; show them in UTC instead"
                        : "Times are UTC; show them in this browser's time zone (" + zone + ") instead";
    }
  }

  // The reschedule fields are UTC (views.parse_time reads a zoneless value as UTC): fill them so.
  function utcFieldValue(ms) {
    return new Date(ms).toISOString().slice(0, 19);
  }

  var AUTO_DISMISS_MS = 10000;   // successes go away by themselves; errors and warnings stay

  function armToasts() {
    document.querySelectorAll("#delayq-messages li.success, #delayq-messages li.info").forEach(function (li) {
      if (li.dataset.armed) return;
      li.dataset.armed = "1";
      setTimeout(function () { li.remove(); keepClear(false); }, AUTO_DISMISS_MS);
    });
  }

  // ---- toasts keep clear of the controls ----
  // The toasts are pinned to the bottom corner of the window. The page reserves their height at
  // its end (so the last rows and the pager can always be scrolled above them), and a toast that
  // appears over the control just used (its row's actions, found again after htmx swapped the
  // rows) or over a pager in view scrolls the page just enough to show it.
  var used = null;

  document.addEventListener("click", function (event) {
    var control = event.target.closest && event.target.closest("button, a, input[type=submit]");
    if (!control || control.closest(".toasts")) return;
    var row = control.closest("tr[data-id]");
    used = { el: control, row: row ? row.dataset.id : null, value: control.value || "" };
  }, true);

  // The control just used, or after htmx swapped the rows, the same button of the same row.
  function usedControl() {
    if (!used) return null;
    if (used.el.isConnected) return used.el;
    var row = used.row && document.querySelector('tr[data-id="' + CSS.escape(used.row) + '"]');
    if (!row) return null;
    return (used.value && row.querySelector('button[value="' + CSS.escape(used.value) + '"]')) ||
      row.querySelector(".row-actions") || row;
  }

  function keepClear(scroll) {
    var box = document.querySelector(".toasts");
    var shown = box && box.querySelector("li");
    document.body.style.paddingBottom = shown ? box.offsetHeight + 16 + "px" : "";
    if (!shown || !scroll) return;
    var toast = box.getBoundingClientRect(), overlap = 0;
    [usedControl()].concat(Array.prototype.slice.call(document.querySelectorAll(".pager"))).forEach(function (el) {
      if (!el) return;
      var r = el.getBoundingClientRect();
      var beside = r.right <= toast.left || r.left >= toast.right;
      if (!r.height || beside || r.top >= window.innerHeight || r.bottom <= toast.top - 8) return;
      overlap = Math.max(overlap, r.bottom - toast.top + 8);
    });
    if (overlap) window.scrollBy(0, overlap);
  }

  function placeToasts() {
    var fresh = false;
    document.querySelectorAll("#delayq-messages li").forEach(function (li) {
      if (!li.dataset.placed) { li.dataset.placed = "1"; fresh = true; }
    });
    keepClear(fresh);   // scroll only for a toast that just appeared, never under a reading operator
  }

  document.addEventListener("click", function (event) {
    var target = event.target;
    if (target.id === "local-time-toggle") {
      try { localStorage.setItem(STORE, localOn() ? "0" : "1"); } catch (e) { /* private mode: this page only */ }
      applyTimes(document);
      return;
    }
    var preset = target.closest("[data-preset-seconds]");
    if (preset) {
      var form = preset.closest("form");
      var field = form && form.querySelector("input[name=reschedule_at]");
      if (field) {
        field.value = utcFieldValue(Date.now() + Number(preset.dataset.presetSeconds) * 1000);
        field.dispatchEvent(new Event("change", { bubbles: true }));
      }
      return;
    }
    if (target.classList.contains("dismiss")) {
      var item = target.closest("li");
      if (item) item.remove();
      keepClear(false);
    }
  });

  // ---- the main navigation's Menu button (shown below 700 px by delayq.css) ----
  function menu() {
    var toggle = document.getElementById("menu-toggle");
    return toggle && { toggle: toggle, nav: document.getElementById(toggle.getAttribute("aria-controls")) };
  }

  function setMenu(open, focusBack) {
    var m = menu();
    if (!m || !m.nav) return;
    m.toggle.setAttribute("aria-expanded", open ? "true" : "false");
    m.nav.classList.toggle("open", open);
    if (focusBack) m.toggle.focus();
  }

  function initMenu() {
    var m = menu();
    if (!m || !m.nav || m.toggle.dataset.ready) return;
    m.toggle.dataset.ready = "1";
    m.toggle.closest(".topbar").classList.add("has-menu");
    m.toggle.addEventListener("click", function () {
      var open = m.toggle.getAttribute("aria-expanded") !== "true";
      setMenu(open, false);
      if (open) { var first = m.nav.querySelector("a"); if (first) first.focus(); }
    });
  }

  // Esc in the open menu closes it and gives focus back to its button.
  document.addEventListener("keydown", function (event) {
    var m = menu();
    if (event.key !== "Escape" || !m || !m.nav || !m.nav.classList.contains("open")) return;
    if (m.nav.contains(document.activeElement) || document.activeElement === m.toggle) setMenu(false, true);
  });

  // A malformed query answers 400 with the tab saying what is wrong beside the box (and keeping
  // what was typed): htmx leaves 4xx answers unswapped unless told.
  document.addEventListener("htmx:beforeSwap", function (event) {
    var xhr = event.detail.xhr;
    if (xhr && xhr.status === 400 && xhr.responseText.indexOf("data-query-error") >= 0) {
      event.detail.shouldSwap = true;
      event.detail.isError = false;
    }
  });

  function refresh() { initMenu(); applyTimes(document); armToasts(); placeToasts(); }
  document.addEventListener("DOMContentLoaded", refresh);
  document.addEventListener("htmx:afterSettle", refresh);
  if (document.readyState !== "loading") refresh();
})();
