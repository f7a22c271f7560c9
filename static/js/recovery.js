// Recovery view: move through search matches with the arrow keys (copy buttons: copy.js).
(function () {
  "use strict";
  var input = document.getElementById("recovery-q");
  var list = document.querySelector("[data-keyboard-list]");
  if (!input || !list) return;
  var links = Array.prototype.slice.call(list.querySelectorAll("a"));
  document.addEventListener("keydown", function (event) {
    if (event.key !== "ArrowDown" && event.key !== "ArrowUp") return;
    var at = links.indexOf(document.activeElement);
    var next = event.key === "ArrowDown" ? at + 1 : at - 1;
    if (next < 0) { input.focus(); event.preventDefault(); return; }
    if (next < links.length) { links[next].focus(); event.preventDefault(); }
  });
})();
