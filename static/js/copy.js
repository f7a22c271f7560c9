// A button with data-copy="ID" copies the text of the element ID (a command, a new API token) with one click;
// where the clipboard is not available (plain HTTP) it selects the text for Ctrl+C instead.
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
})();
