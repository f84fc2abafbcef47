// Sandlot glue: dismissible flashes, copy-to-clipboard, editor rows and drawers. The rest is htmx.
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

  // Editor list rows: a <template> row gets a fresh index (removed rows leave gaps; the
  // server reads rows by index), and removing one asks the live check to run again.
  document.addEventListener("click", function (event) {
    var add = event.target.closest("[data-add-row]");
    if (add) {
      var tpl = document.getElementById(add.getAttribute("data-add-row"));
      var list = document.getElementById(tpl.getAttribute("data-into"));
      var next = Number(list.getAttribute("data-next") || 0);
      list.setAttribute("data-next", String(next + 1));
      list.insertAdjacentHTML("beforeend", tpl.innerHTML.split(tpl.getAttribute("data-slot")).join(String(next)));
      var field = list.lastElementChild.querySelector("input, select");
      if (field) field.focus();
      return;
    }
    var remove = event.target.closest("[data-remove-row]");
    if (remove) {
      var row = remove.closest("[data-row]");
      var parent = row.parentElement;
      row.remove();
      parent.dispatchEvent(new CustomEvent("rows-changed", { bubbles: true }));
      return;
    }
    var pick = event.target.closest("[data-pick]");
    if (pick) {
      var input = document.getElementById(pick.getAttribute("data-for"));
      input.value = pick.getAttribute("data-pick");
      input.dispatchEvent(new Event("input", { bubbles: true }));
      // A catalog list marks the one picked; a lone "Use it" (a build's result) has no list.
      var group = pick.closest("ul");
      if (group) {
        group.querySelectorAll("[data-pick]").forEach(function (other) {
          other.setAttribute("aria-pressed", String(other === pick));
          other.classList.toggle("is-current", other === pick);
        });
      }
    }
  });

  // Toasts sit below an open drawer's header on narrow screens (app.css): it tells them
  // how tall that header is now (CSSOM, which the CSP allows; no style attribute).
  var watchedHead = null;
  var headObserver = "ResizeObserver" in window ? new ResizeObserver(function () {
    if (watchedHead) {
      document.documentElement.style.setProperty("--drawer-head", watchedHead.getBoundingClientRect().bottom + "px");
    }
  }) : null;
  function watchDrawerHead() {
    var head = document.querySelector(".drawer .drawer-head");
    if (!headObserver || head === watchedHead) return;
    if (watchedHead) headObserver.unobserve(watchedHead);
    watchedHead = head;
    if (head) headObserver.observe(head);
  }
  document.addEventListener("htmx:afterSettle", watchDrawerHead);
  document.addEventListener("DOMContentLoaded", watchDrawerHead);

  // Enter in a field that asks a question (data-enter-stays) must not save the form.
  document.addEventListener("keydown", function (event) {
    if (event.key === "Enter" && event.target.closest && event.target.closest("[data-enter-stays]")) {
      event.preventDefault();
    }
  });

  // A refused save puts its summary above the form: bring it into view. A question
  // swapped in (data-confirm-here) is brought into view and focused, not its button.
  document.addEventListener("htmx:afterSwap", function (event) {
    var target = event.detail.target;
    var question = target && target.querySelector && target.querySelector("[data-confirm-here]");
    if (question) {
      question.scrollIntoView({ block: "center" });
      question.focus({ preventScroll: true });
    }
    if (target && target.id === "editor-alert" && target.firstElementChild) {
      target.scrollIntoView({ block: "nearest" });
    }
  });

  // Skill upload: the form's <progress> follows the request body as htmx sends it (upload
  // and response both report progress; the bar never goes back).
  document.addEventListener("htmx:xhr:progress", function (event) {
    var box = event.target.querySelector && event.target.querySelector("[data-upload-progress]");
    if (!box || !event.detail.lengthComputable || !event.detail.total) return;
    var bar = box.querySelector("progress");
    var percent = Math.max(Number(bar.value), Math.round(100 * event.detail.loaded / event.detail.total));
    bar.value = percent;
    box.hidden = false;
    box.querySelector("[data-upload-label]").textContent = percent < 100 ? "Uploading… " + percent + "%" : "Sent; checking the skill…";
  });

  // Skill file tree: the file picked is the current one.
  document.addEventListener("click", function (event) {
    var file = event.target.closest("[data-tree-file]");
    if (!file) return;
    document.querySelectorAll("[data-tree-file][aria-current]").forEach(function (other) { other.removeAttribute("aria-current"); });
    file.setAttribute("aria-current", "true");
  });

  // Ctrl/Cmd+Enter submits a form that asks for it (the playground's command box). Here, not
  // in an hx-trigger filter: filters need eval, which the Content-Security-Policy forbids.
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Enter" || !(event.ctrlKey || event.metaKey)) return;
    var form = event.target.closest && event.target.closest("form[data-submit-on-ctrl-enter]");
    if (!form) return;
    event.preventDefault();
    form.requestSubmit();
  });

  // Playground: a live run's entry follows its output (issue 27 item 6). Each poll swaps
  // the entry; if the transcript was scrolled to its end, it stays there, and if the
  // transcript was on screen, the entry's last line (its Stop button) stays on screen. A
  // member who scrolled up to read is left where they are.
  // A transcript reads from its end, like a terminal: a page load or a session opened in
  // place starts there (the newest command, a live one among them), not at the oldest.
  function toTranscriptEnd() {
    var box = document.getElementById("transcript");
    if (box) box.scrollTop = box.scrollHeight;
  }
  document.addEventListener("DOMContentLoaded", toTranscriptEnd);
  document.addEventListener("htmx:afterSettle", function (event) {
    // The target named is the element swapped out (outerHTML): its id tells which it was.
    var target = event.detail.target;
    if (target && (target.id === "playground" || target.id === "session-pane")) toTranscriptEnd();
  });
  var following = null;
  document.addEventListener("htmx:beforeSwap", function (event) {
    var entry = event.detail.target;
    var box = document.getElementById("transcript");
    if (!box || !entry.matches || !entry.matches("#transcript .run.is-running")) return;
    var rect = box.getBoundingClientRect();
    following = {
      id: entry.id,
      end: box.scrollHeight - box.scrollTop - box.clientHeight < 24,
      onScreen: rect.bottom > 0 && rect.top < window.innerHeight
    };
  });
  document.addEventListener("htmx:afterSwap", function () {
    var was = following;
    following = null;
    var box = document.getElementById("transcript");
    var entry = was && document.getElementById(was.id);
    if (!box || !entry || !was.end) return;
    box.scrollTop = box.scrollHeight;
    var last = entry.querySelector(".run-meta") || entry;
    if (was.onScreen) last.scrollIntoView({ block: "nearest" });
  });

  // Stacked table rows on a phone: each cell is labelled with its column's header, once: a
  // cell that carries its own words for that (.stacked-only, "Joined 1 Dec") gets none.
  function labelCells(root) {
    root.querySelectorAll("table.table").forEach(function (table) {
      var heads = Array.prototype.map.call(table.querySelectorAll("thead th"), function (th) {
        return th.classList.contains("col-actions") ? "" : th.textContent.trim();
      });
      table.querySelectorAll("tbody tr").forEach(function (row) {
        Array.prototype.forEach.call(row.children, function (cell, i) {
          if (cell.hasAttribute("data-label") || heads[i] === undefined) return;
          cell.setAttribute("data-label", cell.querySelector(".stacked-only") ? "" : heads[i]);
        });
      });
    });
  }
  document.addEventListener("DOMContentLoaded", function () { labelCells(document); });
  document.addEventListener("htmx:afterSettle", function () { labelCells(document); });
  document.addEventListener("htmx:oobAfterSwap", function () { labelCells(document); });

  // Close the workspace switcher when clicking elsewhere.
  document.addEventListener("click", function (event) {
    document.querySelectorAll("details.switcher[open]").forEach(function (menu) {
      if (!menu.contains(event.target)) menu.removeAttribute("open");
    });
  });
})();
