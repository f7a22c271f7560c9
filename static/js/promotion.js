/* Live progress of promotions. Each [data-promotion-progress] element names its JSON endpoint; while the
   job is open (data-open) it is polled every few seconds and the bar, the byte counts and the state are
   updated in place. Without JavaScript the page shows the progress as of its loading. */
(function () {
  "use strict";

  var POLL_MS = 3000;
  var RETRIES = 5;
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

  // The same rule as the bytes_iec template filter: binary units, TiB and above with two decimals.
  function bytes(n) {
    n = Number(n || 0);
    if (n < 1024) {
      return n + " B";
    }
    var unit = 0;
    while (n >= 1024 && unit < UNITS.length - 1) {
      n /= 1024;
      unit += 1;
    }
    return n.toFixed(unit >= 4 ? 2 : 1) + " " + UNITS[unit];
  }

  function count(n, noun) {
    var text = Number(n || 0).toLocaleString("en-US");
    return noun ? text + " " + noun + (n === 1 ? "" : "s") : text;
  }

  function show(el, p) {
    var bar = el.querySelector("progress");
    if (bar) {
      bar.value = p.percent;
      bar.textContent = p.percent + "%";
    }
    var text = el.querySelector("[data-field=text]");
    if (text) {
      var line = bytes(p.bytes_done) + " of " + bytes(p.bytes_total) + " · " + count(p.items_done) + " of " +
        count(p.items_total, "file");
      if (p.items_blocked) {
        line += " · " + count(p.items_blocked, "file") + " blocked";
      }
      text.textContent = line;
    }
    var state = el.querySelector("[data-field=state] .badge");
    if (state) {
      var icon = state.querySelector(".badge__icon");
      state.textContent = p.state_label;
      if (icon) {
        state.insertBefore(icon, state.firstChild);
      }
    }
    if (p.error) {
      el.setAttribute("title", p.error);
    }
  }

  function follow(el) {
    var url = el.getAttribute("data-promotion-progress");
    var failures = 0;
    function tick() {
      fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (!r.ok) {
            throw new Error("HTTP " + r.status);
          }
          return r.json();
        })
        .then(function (p) {
          failures = 0;
          show(el, p);
          if (p.open) {
            window.setTimeout(tick, POLL_MS);
          } else {
            el.removeAttribute("data-open");
          }
        })
        .catch(function () {
          failures += 1;
          if (failures < RETRIES) {
            window.setTimeout(tick, POLL_MS * failures);
          }
        });
    }
    window.setTimeout(tick, POLL_MS);
  }

  if (window.__promotionProgress) {
    return; // the script is included by more than one panel of a page
  }
  window.__promotionProgress = true;
  document.addEventListener("DOMContentLoaded", function () {
    var open = document.querySelectorAll("[data-promotion-progress][data-open]");
    for (var i = 0; i < open.length; i += 1) {
      follow(open[i]);
    }
  });
})();
