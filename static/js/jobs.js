// Jobs page: poll the progress of running jobs every 2 s and update their rows; stop when none is running.
(function () {
  "use strict";
  var table = document.querySelector("[data-jobs]");
  if (!table) return;
  var url = table.getAttribute("data-progress-url");
  var units = function (job) {
    if (job.total === null) return "";
    if (job.unit === "bytes") return fmtBytes(job.done) + " of " + fmtBytes(job.total);
    return (job.done || 0).toLocaleString("en") + " of " + job.total.toLocaleString("en") + " " + job.unit;
  };
  function fmtBytes(n) {
    var u = ["B", "KiB", "MiB", "GiB", "TiB", "PiB"], i = 0;
    n = n || 0;
    while (n >= 1024 && i < u.length - 1) { n /= 1024; i++; }
    return (i ? n.toFixed(1) : String(n)) + " " + u[i];
  }
  function update(job) {
    var row = table.querySelector('[data-job="' + job.key + '"]');
    if (!row) return;
    var state = row.querySelector('[data-field="state"]');
    var cls = job.active ? "badge--info" : (/failed|blocked/.test(job.state) ? "badge--bad" : "badge--ok");
    var icon = job.active ? "…" : (cls === "badge--bad" ? "✗" : "✓");
    state.innerHTML = "";
    var badge = document.createElement("span");
    badge.className = "badge " + cls;
    var i = document.createElement("span");
    i.className = "badge__icon";
    i.setAttribute("aria-hidden", "true");
    i.textContent = icon;
    badge.appendChild(i);
    badge.appendChild(document.createTextNode(job.state_label));
    state.appendChild(badge);
    var progress = row.querySelector('[data-field="progress"]');
    progress.innerHTML = "";
    if (job.percent !== null) {
      var bar = document.createElement("progress");
      bar.max = 100;
      bar.value = job.percent;
      bar.setAttribute("aria-label", job.percent + " percent");
      progress.appendChild(bar);
      progress.appendChild(document.createTextNode(" "));
    }
    var text = document.createElement("span");
    text.className = "small";
    text.textContent = units(job);
    progress.appendChild(text);
    if (job.outcome) {
      progress.appendChild(document.createElement("br"));
      var out = document.createElement("span");
      out.className = "small " + (cls === "badge--bad" ? "error-text" : "muted");
      out.textContent = job.outcome;
      progress.appendChild(out);
    }
    if (!job.active) row.removeAttribute("data-active");
  }
  function poll() {
    var rows = table.querySelectorAll("[data-active]");
    if (!rows.length) return;
    var query = Array.prototype.map.call(rows, function (r) {
      return "job=" + encodeURIComponent(r.getAttribute("data-job"));
    }).join("&");
    fetch(url + "?" + query, { headers: { Accept: "application/json" }, credentials: "same-origin" })
      .then(function (r) { if (!r.ok) throw new Error("HTTP " + r.status); return r.json(); })
      .then(function (data) { data.jobs.forEach(update); setTimeout(poll, 2000); })
      .catch(function () { setTimeout(poll, 10000); });
  }
  setTimeout(poll, 2000);
})();
