// A session's web terminal (issue 26): xterm.js on a WebSocket to a shell in the sandbox.
// Each connection asks for a ticket first (POST, CSRF header); the socket carries binary
// frames both ways (keystrokes up, output down) and JSON text frames for control: resize
// up; ready and closed down. Pages are whole loads, but an htmx swap that brings or removes
// a [data-terminal] box starts or ends it all the same.
(function () {
  "use strict";

  var encoder = new TextEncoder();
  var THEME = { background: "#0f1623", foreground: "#dce3ee", cursor: "#7fd4c1", selectionBackground: "#3a4a63" };
  var KEYS = { tab: "\t", esc: "\x1b" };
  var ARROWS = { up: "A", down: "B", right: "C", left: "D" };

  // xterm writes its computed CSS (theme colours, cell size) into <style> elements, which
  // the CSP refuses (style-src 'self', no 'unsafe-inline'). While it builds its DOM, a
  // <style> it asks for is an inert hidden element whose text, and whose `sheet`, are a
  // constructed stylesheet instead: CSSOM, which the CSP allows.
  function withAdoptedStyles(build) {
    var create = document.createElement;
    var sheets = [];
    document.createElement = function (name, options) {
      if (String(name).toLowerCase() !== "style") return create.call(document, name, options);
      var holder = create.call(document, "xterm-style");
      var sheet = new CSSStyleSheet();
      holder.hidden = true;
      holder.sheet = sheet;
      sheets.push(sheet);
      document.adoptedStyleSheets = document.adoptedStyleSheets.concat([sheet]);
      new MutationObserver(function () { sheet.replaceSync(holder.textContent); })
        .observe(holder, { childList: true, characterData: true, subtree: true });
      return holder;
    };
    try {
      build();
    } finally {
      document.createElement = create;
    }
    return function drop() {
      document.adoptedStyleSheets = document.adoptedStyleSheets.filter(function (s) { return sheets.indexOf(s) < 0; });
    };
  }

  function socketUrl(path, cols, rows) {
    var url = new URL(path, window.location.href);
    url.protocol = url.protocol === "https:" ? "wss:" : "ws:";
    url.searchParams.set("cols", String(cols));
    url.searchParams.set("rows", String(rows));
    return url.href;
  }

  // Ctrl with the next key typed: letters and @[\]^_ become C0 controls, ? becomes DEL.
  function control(data) {
    if (data.length !== 1) return data;
    var code = data.toUpperCase().charCodeAt(0);
    if (code >= 64 && code <= 95) return String.fromCharCode(code - 64);
    if (data === "?") return "\x7f";
    if (data === " ") return "\x00";
    return data;
  }

  function start(root) {
    if (root.stopTerminal) return;
    var screen = root.querySelector("[data-term-screen]");
    var status = root.querySelector("[data-term-status]");
    var reconnect = root.querySelector("[data-term-reconnect]");
    var ctrl = root.querySelector("[data-term-key=ctrl]");
    var term = new window.Terminal({
      cursorBlink: true, fontFamily: getComputedStyle(screen).fontFamily, fontSize: 14,
      theme: THEME, scrollback: 5000,
    });
    var fit = new window.FitAddon.FitAddon();
    term.loadAddon(fit);
    var dropStyles = withAdoptedStyles(function () { term.open(screen); });
    var live = true;
    var socket = null;
    var closedMessage = "";
    var frame = 0;

    function say(text) { status.textContent = text; }
    function isOpen() { return socket && socket.readyState === WebSocket.OPEN; }
    function send(data) { if (isOpen()) socket.send(data); }
    function sendText(text) { send(encoder.encode(text)); }

    function refit() {
      if (frame) return;
      frame = window.requestAnimationFrame(function () {
        frame = 0;
        if (live && screen.clientWidth > 0) fit.fit();
      });
    }

    function ended(message) {
      socket = null;
      say(message || "The connection dropped.");
      reconnect.hidden = false;
      if (root.contains(document.activeElement) || document.activeElement === document.body) reconnect.focus();
    }

    function connect() {
      reconnect.hidden = true;
      closedMessage = "";
      term.reset();
      say("Connecting…");
      fit.fit();
      fetch(root.getAttribute("data-ticket-url"), {
        method: "POST", credentials: "same-origin",
        headers: { "X-CSRFToken": document.querySelector("meta[name=csrf-token]").content, "Accept": "application/json" },
      }).then(function (response) {
        return response.json().catch(function () { return {}; }).then(function (body) {
          if (!response.ok || !body.url) throw new Error((body.error && body.error.message) || "");
          return body;
        });
      }).then(function (ticket) {
        if (live) open(socketUrl(ticket.url, term.cols, term.rows));
      }).catch(function (error) {
        if (live) ended(error.message);
      });
    }

    function open(url) {
      var ws = new WebSocket(url);
      ws.binaryType = "arraybuffer";
      socket = ws;
      ws.onmessage = function (event) {
        if (typeof event.data !== "string") {
          term.write(new Uint8Array(event.data));
          return;
        }
        var message = JSON.parse(event.data);
        if (message.type === "ready") {
          say("Connected.");
          term.focus();
        } else if (message.type === "closed") {
          closedMessage = message.message || "";
        }
      };
      ws.onclose = function () { if (socket === ws) ended(closedMessage); };
    }

    // Tab goes to the shell; Shift+Tab leaves the terminal (no keyboard trap).
    term.attachCustomKeyEventHandler(function (event) { return !(event.key === "Tab" && event.shiftKey); });
    term.onData(function (data) {
      if (ctrl.getAttribute("aria-pressed") === "true") {
        ctrl.setAttribute("aria-pressed", "false");
        data = control(data);
      }
      sendText(data);
    });
    term.onBinary(function (data) {
      send(Uint8Array.from(data, function (c) { return c.charCodeAt(0) & 0xff; }));
    });
    term.onResize(function (size) {
      send(JSON.stringify({ type: "resize", cols: size.cols, rows: size.rows }));
    });

    // The key row: a press keeps the focus in the terminal (a phone's keyboard stays up).
    function onKeyDown(event) {
      if (event.target.closest("[data-term-key]")) event.preventDefault();
    }
    function onKeyClick(event) {
      var key = event.target.closest("[data-term-key]");
      if (key) {
        var name = key.getAttribute("data-term-key");
        if (name === "ctrl") {
          key.setAttribute("aria-pressed", String(key.getAttribute("aria-pressed") !== "true"));
        } else {
          ctrl.setAttribute("aria-pressed", "false");
          var cursor = term.modes.applicationCursorKeysMode ? "\x1bO" : "\x1b[";
          sendText(KEYS[name] || cursor + ARROWS[name]);
        }
        term.focus();
      } else if (event.target.closest("[data-term-reconnect]")) {
        connect();
      }
    }
    root.addEventListener("mousedown", onKeyDown);
    root.addEventListener("click", onKeyClick);
    var observer = new ResizeObserver(refit);  // the window's size, or the box's
    observer.observe(screen);

    root.stopTerminal = function stop() {
      root.stopTerminal = null;
      live = false;
      observer.disconnect();
      root.removeEventListener("mousedown", onKeyDown);
      root.removeEventListener("click", onKeyClick);
      var ws = socket;
      socket = null;
      if (ws) ws.close();
      term.dispose();
      dropStyles();
    };
    connect();
  }

  function startAll(scope) {
    if (!window.Terminal || !window.FitAddon) return;
    scope.querySelectorAll("[data-terminal]").forEach(start);
  }

  document.addEventListener("DOMContentLoaded", function () { startAll(document); });
  document.addEventListener("htmx:load", function (event) { startAll(event.detail.elt.parentElement || document); });
  document.addEventListener("htmx:beforeCleanupElement", function (event) {
    var root = event.detail.elt;
    if (root.stopTerminal) root.stopTerminal();
  });
  // A page kept in the back/forward cache gets a new shell when shown again.
  window.addEventListener("pagehide", function () {
    document.querySelectorAll("[data-terminal]").forEach(function (root) { if (root.stopTerminal) root.stopTerminal(); });
  });
  window.addEventListener("pageshow", function (event) { if (event.persisted) startAll(document); });
})();
