// Dates in the viewer's time zone (issue 15 item 2). The server renders
// <time datetime="ISO" data-local="date|datetime"> with a UTC fallback that says "UTC";
// here the text becomes the viewer's local date (or date and time), and every <time>
// gets the full local moment as its tooltip. Re-run after each htmx swap.
(function () {
  "use strict";
  var DATE = { day: "numeric", month: "short", year: "numeric" };
  var FULL = { day: "numeric", month: "short", year: "numeric", hour: "2-digit",
               minute: "2-digit", timeZoneName: "short" };

  function localise(root) {
    var nodes = (root || document).querySelectorAll("time[datetime]");
    for (var i = 0; i < nodes.length; i++) {
      var node = nodes[i];
      var when = new Date(node.getAttribute("datetime"));
      if (isNaN(when.getTime())) { continue; }
      var kind = node.getAttribute("data-local");
      // An older moment the server wrote as a UTC day ("12 Mar 2026 UTC"): the local day.
      if (!kind && / UTC$/.test(node.textContent)) { kind = "date"; }
      if (kind === "date") {
        node.textContent = when.toLocaleDateString(undefined, DATE);
      } else if (kind === "datetime") {
        node.textContent = when.toLocaleString(undefined, FULL);
      }
      node.title = when.toLocaleString(undefined, FULL);
      node.setAttribute("data-localised", "");
    }
  }

  document.addEventListener("DOMContentLoaded", function () { localise(document); });
  document.addEventListener("htmx:afterSettle", function (event) { localise(event.target); });
})();
