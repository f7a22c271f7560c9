/* Draws the spend charts with the vendored Chart.js, from JSON each page embeds with json_script.
   A chart is a <canvas data-chart="ID"> whose spec is in <script id="ID" type="application/json">:
   {type, labels, label_keys?, datasets: [{label, key, data}], stacked, horizontal, money, unit, x_title, y_title};
   a key is a tier's value (nvme, pfs, ...) when the series are tiers, so that a tier has one colour everywhere.
   Every chart's numbers are also in a table on the page; axes always carry their unit. */
(function () {
  "use strict";

  // Okabe-Ito: distinguishable with colour-vision deficiencies. Tiers keep one colour everywhere.
  var PALETTE = ["#0072B2", "#E69F00", "#009E73", "#CC79A7", "#56B4E9", "#D55E00", "#F0E442", "#999999"];
  var TIER_COLOURS = {
    nvme: "#D55E00",
    pfs: "#E69F00",
    object_standard: "#0072B2",
    object_infrequent: "#56B4E9",
    archive_instant: "#009E73",
    archive: "#CC79A7",
    deep_archive: "#555555"
  };

  function number(value, digits) {
    return value.toLocaleString("en-US", { minimumFractionDigits: digits, maximumFractionDigits: digits });
  }

  function formatter(spec) {
    if (spec.money) {
      return function (v) { return number(v, 2) + " " + spec.unit; };
    }
    return function (v) { return number(v, v >= 100 ? 0 : 2) + " " + spec.unit; };
  }

  function draw(canvas) {
    var source = document.getElementById(canvas.getAttribute("data-chart"));
    if (!source || typeof window.Chart === "undefined") {
      return;
    }
    var spec = JSON.parse(source.textContent);
    var format = formatter(spec);
    var datasets = spec.datasets.map(function (d, i) {
      var colour = TIER_COLOURS[d.key] || PALETTE[i % PALETTE.length];
      if (spec.label_keys) {
        // One series over tiers (bytes by tier): each bar in its tier's colour.
        colour = spec.label_keys.map(function (key, j) { return TIER_COLOURS[key] || PALETTE[j % PALETTE.length]; });
      }
      return { label: d.label, data: d.data, backgroundColor: colour, borderColor: colour, borderWidth: 0 };
    });
    var valueAxis = {
      stacked: !!spec.stacked,
      beginAtZero: true,
      title: { display: true, text: spec.horizontal ? spec.x_title : spec.y_title },
      ticks: { maxRotation: 0, autoSkip: true, callback: function (v) { return format(Number(v)); } }
    };
    var categoryAxis = {
      stacked: !!spec.stacked,
      title: { display: true, text: spec.horizontal ? spec.y_title : spec.x_title },
      ticks: { autoSkip: true, maxRotation: 0 }
    };
    new window.Chart(canvas, {
      type: spec.type || "bar",
      data: { labels: spec.labels, datasets: datasets },
      options: {
        indexAxis: spec.horizontal ? "y" : "x",
        responsive: true,
        maintainAspectRatio: false,
        animation: false,
        scales: spec.horizontal ? { x: valueAxis, y: categoryAxis } : { x: categoryAxis, y: valueAxis },
        plugins: {
          legend: { display: datasets.length > 1, position: "bottom" },
          tooltip: {
            callbacks: {
              label: function (ctx) {
                var v = spec.horizontal ? ctx.parsed.x : ctx.parsed.y;
                return ctx.dataset.label + ": " + format(v);
              }
            }
          }
        }
      }
    });
  }

  function start() {
    Array.prototype.forEach.call(document.querySelectorAll("canvas[data-chart]"), draw);
    Array.prototype.forEach.call(document.querySelectorAll("[data-print]"), function (button) {
      button.addEventListener("click", function () { window.print(); });
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
