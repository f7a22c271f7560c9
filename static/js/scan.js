/* The "Scan now" buttons of the fleet page. Without JavaScript each button is a plain form POST to the
   page's own view. With it, the button POSTs to the API (session cookie + CSRF token), then polls the
   scan's inventory, showing the objects counted so far, until it is applied or failed; an applied scan is
   followed through its checksum phase ("checksums: N of M objects", the HEADs that workers do after the
   snapshot), then the page reloads so the row shows the outcome. A scan (or checksum phase) already
   running when the page loads is followed the same way.
   Refusals (409: a scan of this bucket is running) are shown as the server words them. */
(function () {
  "use strict";

  var POLL_MS = 1000;
  var RETRIES = 5; // consecutive failed polls before giving up
  var UNITS = ["B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];

  function count(n, noun) {
    return Number(n || 0).toLocaleString("en-US") + " " + noun + (n === 1 ? "" : "s");
  }

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

  function say(form, text, bad) {
    var status = document.getElementById(form.getAttribute("data-status"));
    if (status) {
      status.textContent = text;
      status.classList.toggle("field__error", !!bad);
    }
  }

  function button(form) {
    return form.querySelector("button[type=submit]");
  }

  function enable(form, on) {
    var b = button(form);
    if (b) {
      b.disabled = !on;
      b.setAttribute("aria-disabled", on ? "false" : "true");
    }
  }

  function readJson(response) {
    return response.text().then(function (text) {
      try {
        return JSON.parse(text);
      } catch (e) {
        return {};
      }
    });
  }

  // Applied, and the stored checksums of what it added or changed are still being fetched.
  function checksumsRunning(inventory) {
    return inventory.status === "applied" && Number(inventory.checksums_total || 0) > 0 &&
      !inventory.checksums_finished_at;
  }

  function checksums(inventory) {
    var text = "checksums: " + Number(inventory.checksums_done || 0).toLocaleString("en-US") + " of " +
      count(inventory.checksums_total, "object");
    if (inventory.checksums_failed) {
      text += " (" + Number(inventory.checksums_failed).toLocaleString("en-US") + " failed)";
    }
    return text;
  }

  function progress(inventory) {
    var name = "Scan #" + inventory.id + " ";
    if (inventory.status === "received") {
      return name + "is waiting for a worker…";
    }
    if (inventory.status === "processing") {
      return name + "is running: " + count(inventory.files_count, "object") + " (" + bytes(inventory.bytes_total) +
        ") so far…";
    }
    if (inventory.status === "applied") {
      var applied = name + "applied: " + count(inventory.files_count, "object") + ", " + bytes(inventory.bytes_total);
      if (checksumsRunning(inventory)) {
        return applied + "; " + checksums(inventory) + "…";
      }
      if (Number(inventory.checksums_failed || 0) > 0) {
        applied += "; " + checksums(inventory);
      }
      return applied + ". Reloading…";
    }
    return name + "failed: " + (inventory.error || "no reason given") + " Reloading…";
  }

  function poll(form, url, failures, id) {
    if (id !== form.pollId) {
      return; // a newer scan of this form is followed instead
    }
    fetch(url, { credentials: "same-origin", headers: { Accept: "application/json" } })
      .then(function (response) {
        return readJson(response).then(function (body) {
          if (!response.ok) {
            throw new Error(body.detail || "the server answered " + response.status);
          }
          return body;
        });
      })
      .then(function (inventory) {
        var done = (inventory.status === "applied" && !checksumsRunning(inventory)) || inventory.status === "failed";
        say(form, progress(inventory), inventory.status === "failed");
        if (done) {
          window.setTimeout(function () { window.location.reload(); }, 800);
        } else {
          window.setTimeout(function () { poll(form, url, 0, id); }, POLL_MS);
        }
      })
      .catch(function (error) {
        if (failures + 1 >= RETRIES) {
          say(form, "Lost track of the scan (" + error.message + "). Reload the page to see how it went.", true);
          enable(form, true);
          return;
        }
        window.setTimeout(function () { poll(form, url, failures + 1, id); }, POLL_MS * (failures + 2));
      });
  }

  function follow(form, url) {
    form.pollId = (form.pollId || 0) + 1;
    poll(form, url, 0, form.pollId);
  }

  function start(form) {
    var token = form.querySelector("input[name=csrfmiddlewaretoken]");
    enable(form, false);
    say(form, "Starting a scan…", false);
    fetch(form.getAttribute("data-scan-api"), {
      method: "POST",
      credentials: "same-origin",
      headers: { Accept: "application/json", "X-CSRFToken": token ? token.value : "" }
    })
      .then(function (response) {
        return readJson(response).then(function (body) {
          if (response.status === 202 && body.url) {
            say(form, "Scan #" + body.id + " started…", false);
            follow(form, body.url);
            return;
          }
          // 409 while a scan runs, 400 for a location that is not a bucket, 403 without the right: in words.
          say(form, body.detail || "The scan could not be started (the server answered " + response.status + ").",
            true);
          enable(form, true);
        });
      })
      .catch(function (error) {
        say(form, "The scan could not be started: " + error.message + ".", true);
        enable(form, true);
      });
  }

  function init() {
    var forms = document.querySelectorAll("form.scan-form[data-scan-api]");
    Array.prototype.forEach.call(forms, function (form) {
      form.addEventListener("submit", function (event) {
        event.preventDefault();
        start(form);
      });
      var running = form.getAttribute("data-running");
      if (running) {
        follow(form, running);
      }
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
