// Sandlot glue: dismissible flashes and copy-to-clipboard. Everything else is htmx.
(function () {
  "use strict";

  function dismiss(flash) {
    if (!flash || flash.classList.contains("is-leaving")) return;
    flash.classList.add("is-leaving");
    setTimeout(function () { flash.remove(); }, 200);
  }

  // Success and info notices leave by themselves; errors stay until dismissed.
  function scheduleAutoClose(root) {
    root.querySelectorAll(".flash[data-autoclose]:not([data-scheduled])").forEach(function (flash) {
      flash.setAttribute("data-scheduled", "");
      setTimeout(function () { dismiss(flash); }, 6000);
    });
  }

  function copyText(text) {
    if (navigator.clipboard && window.isSecureContext) {
      return navigator.clipboard.writeText(text);
    }
    var area = document.createElement("textarea");
    area.value = text;
    area.setAttribute("readonly", "");
    area.style.position = "fixed";
    area.style.opacity = "0";
    document.body.appendChild(area);
    area.select();
    try { document.execCommand("copy"); } finally { area.remove(); }
    return Promise.resolve();
  }

  document.addEventListener("click", function (event) {
    var close = event.target.closest("[data-dismiss]");
    if (close) {
      dismiss(close.closest(".flash"));
      return;
    }
    var button = event.target.closest("[data-copy]");
    if (button) {
      var source = document.querySelector(button.getAttribute("data-copy"));
      if (!source) return;
      var label = button.querySelector("[data-copy-label]") || button;
      copyText(source.textContent.trim()).then(function () {
        label.textContent = "Copied";
        setTimeout(function () { label.textContent = "Copy"; }, 2000);
      }, function () {
        label.textContent = "Select and copy";
      });
    }
  });

  document.addEventListener("DOMContentLoaded", function () { scheduleAutoClose(document); });
  document.addEventListener("htmx:afterSettle", function () { scheduleAutoClose(document); });
  // A response swapped out-of-band into #flashes does not settle #flashes itself.
  document.addEventListener("htmx:oobAfterSwap", function () { scheduleAutoClose(document); });

  // Close the workspace switcher when clicking elsewhere.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.switcher[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.removeAttribute("open");
    });
  });
})();
