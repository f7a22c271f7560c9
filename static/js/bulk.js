/* Bulk actions on the triage lists: "select all on this page" and a live count of the selected rows.
   Without JavaScript the row checkboxes and the Preview button work as they are; the select-all box
   stays hidden, since it could do nothing. */
(function () {
  "use strict";

  function setUp(form) {
    var items = Array.prototype.slice.call(form.querySelectorAll("[data-bulk-item]"));
    var all = form.querySelector("[data-bulk-all]");
    var counter = form.querySelector("[data-bulk-count]");
    var idle = counter ? counter.textContent : "";

    function update() {
      var picked = items.filter(function (box) { return box.checked; }).length;
      if (all) {
        all.checked = picked > 0 && picked === items.length;
        all.indeterminate = picked > 0 && picked < items.length;
      }
      if (counter) {
        counter.textContent = picked ? picked + " selected" : idle;
      }
    }

    if (all) {
      var wrap = form.querySelector("[data-bulk-all-wrap]");
      var text = form.querySelector("[data-bulk-all-text]");
      if (wrap) { wrap.hidden = false; }
      if (text) { text.hidden = true; }
      all.addEventListener("change", function () {
        items.forEach(function (box) { box.checked = all.checked; });
        update();
      });
    }
    items.forEach(function (box) { box.addEventListener("change", update); });
    form.addEventListener("submit", function (event) {
      if (!items.some(function (box) { return box.checked; })) {
        event.preventDefault();
        if (counter) { counter.textContent = "Select at least one row first."; }
      }
    });
    update();
  }

  document.querySelectorAll("[data-bulk-form]").forEach(setUp);
})();
