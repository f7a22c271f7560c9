// The header's "More" disclosure closes like a menu: on Escape (focus back on "More") and on a click elsewhere.
// Without this script it still opens and closes with its own summary.
(function () {
  "use strict";
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape") return;
    document.querySelectorAll("details.nav-more[open], details.site-menu[open]").forEach(function (menu) {
      if (!menu.contains(document.activeElement) && menu !== document.activeElement) return;
      menu.open = false;
      menu.querySelector("summary").focus();
    });
  });
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.nav-more[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.open = false;
    });
  });
})();
