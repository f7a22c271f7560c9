// Recovery view: copy a restore command with one click; move through search matches with the arrow keys.
(function () {
  "use strict";
  document.addEventListener("click", function (event) {
    var button = event.target.closest("[data-copy]");
    if (!button) return;
    var code = document.getElementById(button.getAttribute("data-copy"));
    if (!code) return;
    var done = function (text) {
      var before = button.textContent;
      button.textContent = text;
      setTimeout(function () { button.textContent = before; }, 2000);
    };
    if (navigator.clipboard && window.isSecureContext) {
      navigator.clipboard.writeText(code.textContent).then(
        function () { done("Copied"); },
        function () { done("Select and copy by hand"); }
      );
    } else {
      var range = document.createRange();
      range.selectNodeContents(code);
      var selection = window.getSelection();
      selection.removeAllRanges();
      selection.addRange(range);
      done("Selected: press Ctrl+C");
    }
  });

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
