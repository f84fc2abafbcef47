// Sandlot dialogs (issue 15): the phone menu, drawers as real dialogs (focus kept inside and
// given back, Escape, pushed URL and title), and our own confirmation popovers instead of the
// browser's confirm(). Vanilla JS beside htmx; no inline script (the CSP forbids it).
(function () {
  "use strict";

  var FOCUSABLE = "a[href], button:not([disabled]), input:not([disabled]):not([type=hidden]), " +
    "select:not([disabled]), textarea:not([disabled]), summary, [tabindex]:not([tabindex='-1'])";
  var popover = null;   // {el, anchor} while a question is open
  var drawer = null;    // {opener, baseline, title} while a drawer is open
  var pageTitle = document.title;
  var seq = 0;

  function visible(el) { return el.getClientRects().length > 0; }
  function focusables(root) {
    return Array.prototype.filter.call(root.querySelectorAll(FOCUSABLE), visible);
  }
  function openDialog() {
    var slot = document.getElementById("drawer-slot");
    return slot ? slot.querySelector("[role=dialog]") : null;
  }
  // The layer focus must stay in: an open question first, then an open drawer.
  function trapRoot() { return popover ? popover.el : openDialog(); }

  // ---------- focus trap ----------
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Tab") return;
    var root = trapRoot();
    if (!root) return;
    var items = focusables(root);
    if (!items.length) { event.preventDefault(); return; }
    var first = items[0], last = items[items.length - 1], here = document.activeElement;
    if (!root.contains(here)) {
      event.preventDefault();
      (event.shiftKey ? last : first).focus();
    } else if (event.shiftKey && here === first) {
      event.preventDefault();
      last.focus();
    } else if (!event.shiftKey && here === last) {
      event.preventDefault();
      first.focus();
    }
  });
  document.addEventListener("focusin", function (event) {
    var root = trapRoot();
    if (!root || root.contains(event.target)) return;
    var items = focusables(root);
    (items[0] || root).focus();
  });

  // ---------- popovers: confirmations and "discard changes?" ----------
  function place(el, anchor) {
    var r = anchor.getBoundingClientRect();
    var w = el.offsetWidth, h = el.offsetHeight;
    var left = Math.min(Math.max(8, r.right - w), window.innerWidth - w - 8);
    var top = r.bottom + 6;
    if (top + h > window.innerHeight - 8 && r.top - h - 6 >= 8) top = r.top - h - 6;
    el.style.left = Math.max(8, left) + "px";
    el.style.top = Math.max(8, Math.min(top, window.innerHeight - h - 8)) + "px";
  }

  function closePopover(giveFocusBack) {
    if (!popover) return;
    var open = popover;
    popover = null;
    open.el.remove();
    if (giveFocusBack !== false && open.anchor && document.contains(open.anchor)) open.anchor.focus();
  }

  function button(label, cls, marker) {
    var b = document.createElement("button");
    b.type = "button";
    b.className = "btn btn-sm " + cls;
    b.setAttribute(marker, "");
    b.textContent = label;
    return b;
  }

  /** Ask `question` next to `anchor`; `onYes` runs only when the person agrees. */
  function ask(anchor, question, yesLabel, noLabel, danger, onYes) {
    closePopover(false);
    var el = document.createElement("div");
    var textId = "popover-text-" + (++seq);
    el.className = "popover";
    el.setAttribute("role", "alertdialog");
    el.setAttribute("aria-modal", "true");
    el.setAttribute("aria-labelledby", textId);
    var text = document.createElement("p");
    text.className = "popover-text";
    text.id = textId;
    text.textContent = question;
    var actions = document.createElement("div");
    actions.className = "popover-actions";
    var no = button(noLabel, "btn-secondary", "data-popover-cancel");
    var yes = button(yesLabel, danger ? "btn-danger" : "btn-primary", "data-popover-confirm");
    actions.appendChild(no);
    actions.appendChild(yes);
    el.appendChild(text);
    el.appendChild(actions);
    document.body.appendChild(el);
    place(el, anchor);
    popover = { el: el, anchor: anchor };
    no.addEventListener("click", function () { closePopover(); });
    yes.addEventListener("click", function () { closePopover(false); onYes(); });
    yes.focus();
  }

  // A click outside an open question is a "no".
  document.addEventListener("mousedown", function (event) {
    if (popover && !popover.el.contains(event.target)) closePopover(false);
  }, true);
  window.addEventListener("resize", function () { if (popover) place(popover.el, popover.anchor); });

  function labelOf(el) {
    var text = (el.textContent || "").replace(/\s+/g, " ").trim();
    return text && text.length <= 40 ? text : "Confirm";
  }

  // hx-confirm stays the source of the question; the answer comes from our popover.
  document.addEventListener("htmx:confirm", function (event) {
    var question = event.detail.question;
    if (!question) return;
    event.preventDefault();
    var elt = event.detail.elt, trigger = event.detail.triggeringEvent;
    var anchor = (trigger && trigger.submitter) ||
      (elt.tagName === "FORM" ? elt.querySelector("button[type=submit], button:not([type])") : null) || elt;
    var danger = /danger/.test(anchor.className || "");
    ask(anchor, question, labelOf(anchor), "Cancel", danger, function () { event.detail.issueRequest(true); });
  });

  // ---------- drawers ----------
  function snapshot(dialog) {
    var form = dialog.querySelector("form");
    if (!form) return null;
    var parts = [];
    new FormData(form).forEach(function (value, name) {
      if (name === "csrf_token") return;
      parts.push(name + "=" + (typeof value === "string" ? value : value.name));
    });
    return parts.join("&");
  }
  function isDirty() {
    var dialog = openDialog();
    return !!(dialog && drawer && drawer.baseline !== null && snapshot(dialog) !== drawer.baseline);
  }

  function titleOf(dialog) {
    var heading = dialog.querySelector("#drawer-title") || dialog.querySelector("h2");
    return heading ? heading.textContent.replace(/\s+/g, " ").trim() + " · Sandlot" : pageTitle;
  }

  // A drawer appeared (opened by a link, or rendered with the page on reload).
  function drawerOpened(opener) {
    var dialog = openDialog();
    if (!dialog) return;
    if (!drawer) drawer = { opener: opener || null, baseline: snapshot(dialog) };
    document.title = titleOf(dialog);
    if (!dialog.hasAttribute("tabindex")) dialog.setAttribute("tabindex", "-1");
    if (dialog.contains(document.activeElement)) return;
    // A drawer to read and act in (data-focus="dialog": Manage) takes focus itself, so
    // no field of it (a note, a secret) is typed into by the first key pressed.
    if (dialog.getAttribute("data-focus") === "dialog") { dialog.focus(); return; }
    var first = dialog.querySelector(".drawer-body input:not([type=hidden]):not([disabled]), .drawer-body select, .drawer-body textarea");
    (first && visible(first) ? first : (focusables(dialog)[0] || dialog)).focus();
  }

  // The drawer is gone (closed here, or emptied by the server after a save).
  function drawerGone() {
    if (!drawer) return;
    var opener = drawer.opener;
    drawer = null;
    closePopover(false);
    document.title = pageTitle;
    if (opener && document.contains(opener)) opener.focus();
    else {
      var main = document.getElementById("main");
      if (main) { main.setAttribute("tabindex", "-1"); main.focus(); }
    }
  }

  function closeDrawer(href) {
    var slot = document.getElementById("drawer-slot");
    if (!slot || !slot.firstElementChild) return false;
    var link = slot.querySelector("a[data-drawer-close]");
    var back = href || (link ? link.getAttribute("href") : null);
    slot.innerHTML = "";
    // Opening pushed the drawer's URL; closing pushes the page's, so Back reopens the drawer.
    if (back && location.pathname + location.search !== back) history.pushState({ htmx: true }, "", back);
    drawerGone();
    return true;
  }

  // Escape asks first when the form holds changes nobody saved.
  function closeOrAsk(anchor) {
    if (!isDirty()) return closeDrawer();
    ask(anchor, "Discard the changes you made in this form?", "Discard changes", "Keep editing", true,
        function () { closeDrawer(); });
    return true;
  }

  document.addEventListener("click", function (event) {
    var close = event.target.closest("[data-drawer-close]");
    if (close && closeDrawer(close.getAttribute("href"))) event.preventDefault();
  });

  var pendingOpener = null;
  document.addEventListener("htmx:beforeRequest", function (event) {
    var target = event.detail.target;
    if (target && target.id === "drawer-slot" && !openDialog()) pendingOpener = event.detail.elt;
  });
  // Only a swap into the drawer slot (or around it) opens or closes a drawer: another part
  // of the page settling meanwhile (a card's status loading) must not drop the opener.
  function touchesDrawer(target) {
    var slot = document.getElementById("drawer-slot");
    return !!(target && slot && (target === slot || target.contains(slot)));
  }
  document.addEventListener("htmx:afterSettle", function (event) {
    if (!touchesDrawer(event.detail.target)) return;
    if (openDialog()) drawerOpened(pendingOpener);
    else drawerGone();
    pendingOpener = null;
  });
  // The page's install poller re-renders the open drawer out of band once its run ends:
  // the new drawer takes focus as the old one had it.
  document.addEventListener("htmx:oobAfterSwap", function (event) {
    if (!openDialog()) drawerGone();
    else if (touchesDrawer(event.detail.target)) drawerOpened(null);
  });

  // ---------- phone menu ----------
  function menuButton() { return document.querySelector("[data-menu-toggle]"); }
  function setMenu(open, giveFocusBack) {
    var toggle = menuButton(), nav = document.getElementById("sidebar");
    if (!toggle || !nav) return;
    toggle.setAttribute("aria-expanded", String(open));
    nav.classList.toggle("is-open", open);
    if (open) {
      var first = nav.querySelector(".nav a, summary");
      if (first) first.focus();
    } else if (giveFocusBack) toggle.focus();
  }
  document.querySelectorAll("[data-menu-toggle][hidden]").forEach(function (b) { b.hidden = false; });
  document.addEventListener("click", function (event) {
    if (event.target.closest("[data-menu-toggle]")) {
      setMenu(menuButton().getAttribute("aria-expanded") !== "true", false);
    }
  });

  // ---------- Escape: the innermost open thing closes ----------
  document.addEventListener("keydown", function (event) {
    if (event.key !== "Escape" || event.defaultPrevented) return;
    if (popover) { event.preventDefault(); closePopover(); return; }
    var switcher = document.querySelector("details.switcher[open]");
    if (switcher) {
      event.preventDefault();
      switcher.removeAttribute("open");
      switcher.querySelector("summary").focus();
      return;
    }
    var dialog = openDialog();
    if (dialog) {
      event.preventDefault();
      closeOrAsk(dialog.querySelector(".drawer-foot [data-drawer-close]") || dialog.querySelector("[data-drawer-close]") || dialog);
      return;
    }
    var toggle = menuButton();
    if (toggle && toggle.getAttribute("aria-expanded") === "true") { event.preventDefault(); setMenu(false, true); }
  });

  // ---------- history: every entry is one htmx restores (by reloading it) ----------
  // The first page of a visit has no htmx state, so Back to it would change only the URL.
  if (!history.state) history.replaceState({ htmx: true }, "", location.href);

  document.addEventListener("DOMContentLoaded", function () {
    if (openDialog()) {
      pageTitle = document.title;
      drawerOpened(null);
    }
  });
})();
